//! zerohop: hand tensors between ML frameworks without copying them.
//!
//! Layers, each depending only on those above it:
//! `memory` (resources) → `buffer` (owned allocations) → `tensor` (strided views) →
//! `dlpack` (the C ABI, export and import), `array_interface` (the NumPy and CUDA array
//! interface dicts) and `arrow` (feature `arrow`) → `soa` (tables).

pub mod array_interface;
#[cfg(feature = "arrow")]
pub mod arrow;
pub mod buffer;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod memory;
pub mod soa;
pub mod tensor;

pub use buffer::{Buffer, Owner};
pub use device::{Device, DeviceKind};
pub use dtype::{DType, DTypeCode, Element};
pub use error::{Error, Result};
pub use memory::{MemoryResource, Stream, SystemResource, DEFAULT_ALIGNMENT};
pub use tensor::TensorView;
