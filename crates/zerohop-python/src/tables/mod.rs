//! SoA and Arrow tables: the `Table` type, its storage, and Arrow import/export of tables and
//! tensors.

pub mod storage;
pub mod table;
