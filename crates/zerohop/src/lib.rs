#![doc = include_str!("../README.md")]

pub mod array_interface;
#[cfg(feature = "arrow")]
pub mod arrow;
pub mod buffer;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
mod device_calls;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod gate;
pub mod guard;
pub mod handoff;
pub mod memory;
#[cfg(feature = "ndarray")]
pub mod ndarray_views;
pub mod release;
pub mod soa;
#[cfg(feature = "tch")]
pub mod tch_tensors;
pub mod tensor;
mod tensor_dims;
mod tensor_moves;
mod tensor_zeros;
pub mod value;
pub mod wire;

pub use buffer::{Buffer, Owner};
pub use device::{Device, DeviceKind};
pub use dtype::{DType, DTypeCode, Element};
pub use error::{Error, Result};
pub use memory::{MemoryResource, Stream, SystemResource, DEFAULT_ALIGNMENT};
pub use release::{ReleaseCallback, ReleaseFn};
pub use tensor::TensorView;
