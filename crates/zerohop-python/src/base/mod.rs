//! The bottom layer: the Python `Tensor` type, the owner objects that keep foreign memory
//! alive, error conversion and framework look-ups. It depends on nothing else in the crate.

pub mod errors;
pub mod exchange;
pub mod owner;
pub mod tensor;
pub mod value;
