//! The DLPack 1.3 C ABI, field for field.
//!
//! Ownership rules, as the header states them:
//! * A producer fills a managed tensor and gives it away; the consumer calls `deleter` exactly
//!   once when it no longer needs the data. `deleter` may be NULL (nothing to release).
//! * `deleter` may run on any thread, with or without Python's GIL.
//! * In the versioned struct everything up to `flags` is frozen across ABI versions, so a
//!   consumer that does not understand `version.major` may still call `deleter`, and must not
//!   read anything after `flags`.
//! * `strides` are in elements; NULL (only legal before 1.2) means compact row-major.
//! * `data + byte_offset` is the first element. zerohop always exports `byte_offset = 0`.

use std::ffi::{c_void, CStr};
use std::mem::{offset_of, size_of};

pub const DLPACK_MAJOR_VERSION: u32 = 1;
pub const DLPACK_MINOR_VERSION: u32 = 3;

/// The data must not be written through this tensor.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// The producer copied the data; the consumer owns the copy exclusively.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// Sub-byte elements are padded to a byte each instead of packed.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// Capsule names of the Python protocol. They must be static: CPython keeps the pointer.
pub const CAPSULE_LEGACY: &CStr = c"dltensor";
pub const CAPSULE_LEGACY_USED: &CStr = c"used_dltensor";
pub const CAPSULE_VERSIONED: &CStr = c"dltensor_versioned";
pub const CAPSULE_VERSIONED_USED: &CStr = c"used_dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// A `DLDeviceType` value; kept raw so that unknown values can be reported, not trusted.
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// The pre-1.0 managed tensor, still what most consumers ask for by default.
#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The 1.x managed tensor, with a version and flags.
#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// The layouts consumers in C, C++ and Python rely on (64-bit targets).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};
