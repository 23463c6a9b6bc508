//! The exchange protocols over `core`: DLPack capsules (both ways), the NumPy and CUDA array
//! interfaces, and the Arrow C data and device interfaces.

pub mod arrow;
pub mod cuda;
pub mod dlpack_import;
pub mod interface;
