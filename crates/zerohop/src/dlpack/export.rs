//! Export: a `TensorView` becomes a heap-allocated managed tensor that owns a clone of the
//! view's owner. The consumer's single call to `deleter` frees both.

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;

use super::ffi::*;
use crate::buffer::Owner;
use crate::error::{Error, Result};
use crate::tensor::TensorView;
use crate::tensor_dims::Dims;

/// What the producer tells the consumer beyond the layout.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// The data is a fresh copy made for this consumer (sets `IS_COPIED`).
    pub is_copied: bool,
}

/// The allocation behind one exported managed tensor. `managed` comes first so a pointer to
/// the context is also a pointer to the managed tensor the consumer sees.
#[repr(C)]
struct ExportContext<M> {
    managed: M,
    /// `shape` and `strides`, inline for up to four dimensions (one allocation per export);
    /// the DLTensor points into this.
    dims: Dims,
    _owner: Owner,
}

pub(super) fn check_exportable(view: &TensorView) -> Result<()> {
    if view.has_negative_strides() {
        // torch.from_dlpack aborts the whole process on negative strides (torch 2.11,
        // pytorch#188023), so zerohop never lets such a tensor leave through DLPack.
        return Err(Error::Export(format!(
            "strides {:?} are negative; DLPack consumers such as torch abort on them. \
             Ask for a copy (copy=True) to export a compact tensor",
            view.strides()
        )));
    }
    Ok(())
}

/// `shape`/`strides` in `dims`, one after the other.
fn dims_of(view: &TensorView) -> Dims {
    Dims::new(view.shape(), view.strides())
}

/// The DLTensor for `view`, with `shape`/`strides` still NULL: they must point into the
/// context's `dims` once the context has reached its final heap address (see `finish`).
pub(super) fn dl_tensor(view: &TensorView) -> DLTensor {
    let ndim = view.ndim();
    let dtype = view.dtype();
    let device = view.device();
    DLTensor {
        // Size-0 tensors carry NULL data, as the DLPack header recommends.
        data: if view.numel() == 0 {
            std::ptr::null_mut()
        } else {
            view.data_ptr() as *mut c_void
        },
        device: DLDevice {
            device_type: device.kind as i32,
            device_id: device.id,
        },
        ndim: ndim as i32,
        dtype: DLDataType {
            code: dtype.code as u8,
            bits: dtype.bits,
            lanes: dtype.lanes,
        },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// Points the tensor at its own context and at the dims stored there. Done after the Box is
/// leaked, because moving a Box would invalidate pointers taken into it earlier.
///
/// # Safety
/// `raw` must be a live context from `Box::into_raw` that nobody else references yet.
unsafe fn finish<M>(
    raw: *mut ExportContext<M>,
    parts: impl FnOnce(&mut M) -> (&mut DLTensor, &mut *mut c_void),
) {
    // SAFETY: guaranteed by the caller; the references are dropped before returning.
    unsafe {
        let (shape, strides) = (*raw).dims.parts_mut();
        let (shape, strides) = (shape.as_mut_ptr(), strides.as_mut_ptr());
        let (tensor, manager_ctx) = parts(&mut (*raw).managed);
        tensor.shape = shape;
        tensor.strides = strides;
        *manager_ctx = raw as *mut c_void;
    }
}

/// Exports `view` as a DLPack 1.3 versioned managed tensor. The caller owns the result and
/// must eventually call its `deleter` exactly once.
pub fn export_versioned(
    view: &TensorView,
    options: ExportOptions,
) -> Result<NonNull<DLManagedTensorVersioned>> {
    check_exportable(view)?;
    let mut flags = 0;
    if view.is_readonly() {
        flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
    }
    if options.is_copied {
        flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
    }
    let dims = dims_of(view);
    let dl_tensor = dl_tensor(view);
    let context = Box::new(ExportContext {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags,
            dl_tensor,
        },
        dims,
        _owner: view.owner().clone(),
    });
    let raw = Box::into_raw(context);
    // SAFETY: `raw` is the live, uniquely owned context just leaked from its Box.
    unsafe { finish(raw, |m| (&mut m.dl_tensor, &mut m.manager_ctx)) };
    // SAFETY: `managed` is the first field of a repr(C) struct, so it shares `raw`'s address,
    // which is non-null because it came from a Box.
    Ok(unsafe { NonNull::new_unchecked(raw as *mut DLManagedTensorVersioned) })
}

/// Exports `view` as a legacy (pre-1.0) managed tensor. Read-only views are refused: the
/// legacy struct cannot say "read-only", and a consumer would believe it may write.
pub fn export_legacy(view: &TensorView) -> Result<NonNull<DLManagedTensor>> {
    check_exportable(view)?;
    if view.is_readonly() {
        return Err(Error::Export(
            "a read-only tensor cannot travel as a legacy DLPack capsule, which has no \
             read-only flag; the consumer must ask for max_version >= (1, 0)"
                .into(),
        ));
    }
    let dims = dims_of(view);
    let dl_tensor = dl_tensor(view);
    let context = Box::new(ExportContext {
        managed: DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        },
        dims,
        _owner: view.owner().clone(),
    });
    let raw = Box::into_raw(context);
    // SAFETY: `raw` is the live, uniquely owned context just leaked from its Box.
    unsafe { finish(raw, |m| (&mut m.dl_tensor, &mut m.manager_ctx)) };
    // SAFETY: first field of a repr(C) struct from a Box: same non-null address.
    Ok(unsafe { NonNull::new_unchecked(raw as *mut DLManagedTensor) })
}

/// Frees a context. A panic must not cross the C boundary (it would abort the process), so
/// it is caught and the context leaked instead.
///
/// # Safety
/// `ctx` must come from `Box::into_raw` in this module and not have been freed.
unsafe fn free_context<M>(ctx: *mut ExportContext<M>) {
    // SAFETY: guaranteed by the caller.
    let context = unsafe { Box::from_raw(ctx) };
    let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(context)));
}

/// # Safety
/// Called by the consumer, once, with a tensor made by `export_versioned` (or NULL).
unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` came from `export_versioned`, whose manager_ctx is its own context.
    unsafe { free_context((*managed).manager_ctx as *mut ExportContext<DLManagedTensorVersioned>) }
}

/// # Safety
/// Called by the consumer, once, with a tensor made by `export_legacy` (or NULL).
unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` came from `export_legacy`, whose manager_ctx is its own context.
    unsafe { free_context((*managed).manager_ctx as *mut ExportContext<DLManagedTensor>) }
}
