//! Apache Arrow: tensors as Arrow arrays and back (arrow-rs), checked C data interface
//! imports, and the C device data interface that arrow-rs lacks.
//!
//! Host arrays and tensors share memory in both directions: an Arrow buffer made from a
//! tensor holds the tensor's owner, and a tensor made from an Arrow array holds the Arrow
//! buffer. Record batches and SoA tables meet in `soa::arrow`.

mod column;
pub(crate) use column::{share_as_arrow_buffer, tensor_to_array_within, values_allocation};
mod device;
mod device_stream;
mod ffi_check;
#[cfg(test)]
mod hostile_tests;
mod import;
mod imported;
#[cfg(test)]
mod tests;
mod types;

pub use column::{array_to_tensor, tensor_to_array, ExportedArray, ImportOptions, ImportedTensor};
pub use device::{export_device, import_device, DeviceImport, FFI_ArrowDeviceArray, SyncEvent};
pub use device_stream::{read_device_stream, FFI_ArrowDeviceArrayStream};
pub use ffi_check::{check_array, schema_data_type};
pub use import::{import_host_batch, HostImport};
pub use imported::{
    import_device_array, import_device_stream, import_host_array, read_host_stream, Imported,
};
pub use types::{arrow_type_of, dtype_of_arrow};

/// The arrow-rs crates this module speaks, for callers that build arrays themselves.
pub use arrow_array;
pub use arrow_buffer;
pub use arrow_data;
pub use arrow_schema;
