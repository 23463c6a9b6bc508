//! Structure-of-arrays tables (the CMS SoA layout) and tensor maps over them.

mod any_table;
#[cfg(test)]
mod any_table_tests;
#[cfg(feature = "arrow")]
mod arrow;
#[cfg(feature = "arrow")]
mod arrow_faces;
#[cfg(all(test, feature = "arrow"))]
mod arrow_faces_tests;
#[cfg(all(test, feature = "arrow"))]
mod arrow_tests;
mod batches;
#[cfg(test)]
mod batches_tests;
mod blocks;
#[cfg(test)]
mod blocks_tests;
mod building;
mod columns;
#[cfg(test)]
mod columns_tests;
mod foreign;
#[cfg(test)]
mod foreign_tests;
mod layout;
mod schema;
#[cfg(test)]
mod schema_tests;
mod structured;
#[cfg(test)]
mod structured_tests;
mod table;
mod tensormap;
#[cfg(test)]
mod tests;

pub use any_table::{ColumnOptions, Table};
#[cfg(feature = "arrow")]
pub use arrow::{tensor_dtype_of, ArrowExport};
#[cfg(feature = "arrow")]
pub use arrow_faces::{
    cast_batch_to_requested, cast_to_requested, host_device_array, tensor_device_array,
    tensor_field, tensor_host_array, FromImport,
};
pub use batches::Batches;
pub use blocks::{BlockLayout, BlocksLayout};
pub use columns::ColumnTable;
pub use layout::{ColumnDims, ColumnLayout, Layout, SOA_DEFAULT_ALIGNMENT};
pub use schema::{ColumnKind, ColumnSpec, ComponentOrder, Schema, SchemaBuilder};
pub use table::SoaTable;
/// A Rust struct with a structure-of-arrays form (see `#[derive(Soa)]` in zerohop-derive).
pub trait SoaRecord {
    fn schema() -> Schema;
}

#[cfg(feature = "derive")]
pub use zerohop_derive::Soa;

pub use tensormap::{MapOptions, MappedTensor, TensorMap, TensorMapBuilder};
