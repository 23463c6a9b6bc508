//! DLPack 1.3: export zerohop views as managed tensors, import managed tensors as views.
//!
//! All raw-pointer work on DLPack structs lives in this module.

pub mod exchange;
#[cfg(test)]
mod exchange_tests;
mod export;
pub mod ffi;
mod import;
mod import_all;

pub use export::{export_legacy, export_versioned, ExportOptions};
pub use import::{import_legacy, import_versioned, Import, ImportedTensor};
pub use import_all::import_all_versioned;

#[cfg(test)]
mod tests;
