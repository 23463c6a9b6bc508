//! The top layer: the Python methods of `Tensor` and `Table` and the module's functions,
//! written against every layer below.

pub mod functions;
pub mod table_methods;
pub mod tensor_methods;
