//! Import: a managed tensor from any producer becomes a `TensorView` whose owner calls the
//! producer's deleter exactly once, on whichever thread drops the last view.

use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{compact_strides, TensorView, MAX_NDIM};

enum Managed {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

/// Ownership of a foreign managed tensor: dropping it calls the producer's deleter.
pub struct ImportedTensor {
    managed: Managed,
}

// SAFETY: DLPack requires deleters to be callable from any thread, and the struct is only
// read (never written) after construction.
unsafe impl Send for ImportedTensor {}
// SAFETY: shared references expose nothing; the only operation is the deleter call in Drop.
unsafe impl Sync for ImportedTensor {}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        // SAFETY: the producer handed us the tensor; DLPack makes us responsible for calling
        // its deleter once, and Drop runs once. A NULL deleter means nothing to release.
        unsafe {
            match self.managed {
                Managed::Versioned(m) => {
                    if let Some(deleter) = (*m.as_ptr()).deleter {
                        deleter(m.as_ptr());
                    }
                }
                Managed::Legacy(m) => {
                    if let Some(deleter) = (*m.as_ptr()).deleter {
                        deleter(m.as_ptr());
                    }
                }
            }
        }
    }
}

/// What an import produced: the view plus what the producer said about it.
#[derive(Debug)]
pub struct Import {
    pub view: TensorView,
    pub version: DLPackVersion,
    /// `IS_COPIED`: the producer made this data for us alone.
    pub is_copied: bool,
}

impl Import {
    /// The view a consumer may use: a legacy (0.x) producer cannot say whether its memory may
    /// be written, so its view is read-only (as NumPy takes it) unless the caller vouches that
    /// it may be written (`writable_vouched`); a versioned producer's READ_ONLY flag is kept
    /// either way.
    pub fn into_view(self, writable_vouched: bool) -> TensorView {
        if self.version.major == 0 && !writable_vouched {
            self.view.into_readonly()
        } else {
            self.view
        }
    }
}

/// Takes ownership of a versioned managed tensor and validates it.
///
/// On error the deleter has already been called: the caller must not touch `managed` again
/// in either case.
///
/// # Safety
/// `managed` must point to a live `DLManagedTensorVersioned` whose ownership passes to this
/// call, and whose fields (when its major version is 1) describe memory as DLPack specifies.
pub unsafe fn import_versioned(managed: NonNull<DLManagedTensorVersioned>) -> Result<Import> {
    let owner = Arc::new(ImportedTensor {
        managed: Managed::Versioned(managed),
    });
    // SAFETY: the caller passes a live struct; version and flags are ABI-stable in every 1.x+.
    let (version, flags) = unsafe { ((*managed.as_ptr()).version, (*managed.as_ptr()).flags) };
    if version.major != DLPACK_MAJOR_VERSION {
        // Dropping `owner` calls the deleter, which the header allows for any major version.
        return Err(Error::UnsupportedVersion {
            major: version.major,
            minor: version.minor,
        });
    }
    // SAFETY: major version 1, so the DLTensor is where this ABI says.
    let tensor = unsafe { (*managed.as_ptr()).dl_tensor };
    let readonly = flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
    let padded = flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0;
    // SAFETY: the caller vouches for the DLTensor's pointers.
    let view = unsafe { view_from_dl_tensor(&tensor, readonly, padded, owner) }?;
    Ok(Import {
        view,
        version,
        is_copied: flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0,
    })
}

/// Takes ownership of a legacy managed tensor and validates it. Same contract as
/// [`import_versioned`].
///
/// # Safety
/// `managed` must point to a live `DLManagedTensor` whose ownership passes to this call.
pub unsafe fn import_legacy(managed: NonNull<DLManagedTensor>) -> Result<Import> {
    let owner = Arc::new(ImportedTensor {
        managed: Managed::Legacy(managed),
    });
    // SAFETY: the caller passes a live struct.
    let tensor = unsafe { (*managed.as_ptr()).dl_tensor };
    // SAFETY: the caller vouches for the DLTensor's pointers.
    let view = unsafe { view_from_dl_tensor(&tensor, false, false, owner) }?;
    Ok(Import {
        view,
        version: DLPackVersion { major: 0, minor: 0 },
        is_copied: false,
    })
}

/// # Safety
/// `shape` and `strides` must each point to `ndim` readable i64 (or be NULL), and `data`
/// must describe memory kept alive by `owner`.
unsafe fn view_from_dl_tensor(
    t: &DLTensor,
    readonly: bool,
    subbyte_padded: bool,
    owner: Arc<ImportedTensor>,
) -> Result<TensorView> {
    if t.ndim < 0 {
        return Err(Error::InvalidTensor(format!(
            "ndim is negative ({})",
            t.ndim
        )));
    }
    let ndim = t.ndim as usize;
    if ndim > MAX_NDIM {
        return Err(Error::InvalidTensor(format!(
            "ndim {ndim} exceeds the limit of {MAX_NDIM}"
        )));
    }
    let dtype = DType::from_raw(t.dtype.code, t.dtype.bits, t.dtype.lanes)?;
    if !dtype.is_byte_addressable() && !subbyte_padded {
        return Err(Error::UnsupportedDType {
            code: t.dtype.code,
            bits: t.dtype.bits,
            lanes: t.dtype.lanes,
            reason: "packed sub-byte elements are not addressable; \
                     use lanes that fill whole bytes or the padded flag"
                .into(),
        });
    }
    let device = Device::from_raw(t.device.device_type, t.device.device_id)?;
    let shape = if ndim == 0 {
        Vec::new()
    } else if t.shape.is_null() {
        return Err(Error::InvalidTensor(format!(
            "shape is NULL with ndim {ndim}"
        )));
    } else {
        // SAFETY: non-null and, per the contract, `ndim` readable elements.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }.to_vec()
    };
    let strides = if ndim == 0 {
        Vec::new()
    } else if t.strides.is_null() {
        // Before DLPack 1.2 NULL meant compact row-major; some producers still send it.
        compact_strides(&shape)
    } else {
        // SAFETY: non-null and, per the contract, `ndim` readable elements.
        unsafe { std::slice::from_raw_parts(t.strides, ndim) }.to_vec()
    };
    let data = if t.data.is_null() {
        std::ptr::null_mut()
    } else {
        let offset = usize::try_from(t.byte_offset).ok();
        let addr = offset.and_then(|o| (t.data as usize).checked_add(o));
        if addr.is_none() {
            return Err(Error::InvalidTensor(format!(
                "byte_offset {} overflows the data pointer {:p}",
                t.byte_offset, t.data
            )));
        }
        (t.data as *mut u8).wrapping_add(t.byte_offset as usize)
    };
    // SAFETY: the producer guarantees the memory while its deleter has not run, and `owner`
    // runs the deleter only when the last view is gone. The layout is validated inside.
    unsafe { TensorView::from_raw_parts(data, dtype, shape, strides, device, owner, readonly) }
}
