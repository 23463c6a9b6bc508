//! DLPack 1.3's C exchange API (`__dlpack_c_exchange_api__`): the table of C functions a
//! framework publishes on its tensor type so another can import and export its tensors without
//! Python-level protocol calls (30–80 ns a tensor against 0.2–1 µs for `__dlpack__`, per the
//! RFC, dmlc/dlpack#174/#175). The layout lives here, once, for zerohop's own table (the
//! Python extension fills it) and for reading other frameworks' tables (torch's).

use std::ffi::{c_char, c_int, c_void, CStr};

use super::export::{check_exportable, dl_tensor, export_versioned, ExportOptions};
use super::ffi::{DLManagedTensorVersioned, DLPackVersion, DLTensor};
use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::Result;
use crate::memory::CudaStream;
use crate::tensor::TensorView;

/// The name of the capsule that holds a `DLPackExchangeAPI`.
pub const EXCHANGE_API_CAPSULE: &CStr = c"dlpack_exchange_api";

/// Versions the table and chains older ones (NULL: none).
#[repr(C)]
pub struct DLPackExchangeAPIHeader {
    pub version: DLPackVersion,
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// Reports an allocator's failure: the error's kind ("MemoryError", "ValueError", …) and its
/// message, to the context the consumer passed.
pub type SetError = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char);

/// Allocates a tensor like `prototype` (shape, dtype, device) for a consumer's output.
pub type ManagedTensorAllocator = unsafe extern "C" fn(
    *mut DLTensor,
    *mut *mut DLManagedTensorVersioned,
    *mut c_void,
    SetError,
) -> c_int;
/// A Python object of the publishing framework as an owned managed tensor (0, or -1 with a
/// Python exception set); no stream synchronisation.
pub type ManagedTensorFromPyObject =
    unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> c_int;
/// An owned managed tensor (stolen) as a new Python object of the publishing framework.
pub type ManagedTensorToPyObject =
    unsafe extern "C" fn(*mut DLManagedTensorVersioned, *mut *mut c_void) -> c_int;
/// A non-owning description of a Python object's tensor, valid while the object lives.
pub type DLTensorFromPyObject = unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> c_int;
/// The stream the publishing framework queues work on for a device (NULL on the host).
pub type CurrentWorkStream = unsafe extern "C" fn(c_int, i32, *mut *mut c_void) -> c_int;

/// The table, as DLPack 1.3 lays it out.
#[repr(C)]
pub struct DLPackExchangeAPI {
    pub header: DLPackExchangeAPIHeader,
    pub managed_tensor_allocator: Option<ManagedTensorAllocator>,
    pub managed_tensor_from_py_object_no_sync: Option<ManagedTensorFromPyObject>,
    pub managed_tensor_to_py_object_no_sync: Option<ManagedTensorToPyObject>,
    pub dltensor_from_py_object_no_sync: Option<DLTensorFromPyObject>,
    pub current_work_stream: Option<CurrentWorkStream>,
}

const _: () = assert!(std::mem::size_of::<DLPackExchangeAPI>() == 56);

// SAFETY: a published table is immutable static data (function pointers and a NULL or static
// chain pointer), read from any thread.
unsafe impl Sync for DLPackExchangeAPI {}

/// Describes `view` in `out` without an owner: `shape` and `strides` point into the view
/// itself, so the description is valid while the view lives where it is (a view inside a
/// Python object does). The same refusals as an export (negative strides).
pub fn describe(view: &TensorView, out: &mut DLTensor) -> Result<()> {
    check_exportable(view)?;
    *out = dl_tensor(view);
    out.shape = view.shape().as_ptr() as *mut i64;
    out.strides = view.strides().as_ptr() as *mut i64;
    Ok(())
}

/// The allocator entry of zerohop's table: a compact, zero-filled tensor like `prototype`
/// (shape, dtype, device) in fresh zerohop memory ([`TensorView::zeros_on`]). A refusal
/// reports its reason through `set_error` and returns -1.
///
/// # Safety
/// `prototype` NULL or a readable DLTensor whose `shape` holds `ndim` sizes; `out` NULL or
/// writable; `set_error` callable with `error_ctx`.
pub unsafe extern "C" fn allocate_like(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: SetError,
) -> c_int {
    let made = std::panic::catch_unwind(|| {
        // SAFETY: per the contract (NULL refused).
        let p = unsafe { prototype.as_ref() }.ok_or("the prototype is NULL")?;
        let shape = match p.ndim {
            0 => &[][..],
            // SAFETY: DLPack: `shape` holds `ndim` sizes.
            n if n > 0 && !p.shape.is_null() => unsafe {
                std::slice::from_raw_parts(p.shape, n as usize)
            },
            _ => return Err("the prototype's ndim or shape is invalid".to_string()),
        };
        let dtype = DType::from_raw(p.dtype.code, p.dtype.bits, p.dtype.lanes)
            .map_err(|_| "unsupported dtype".to_string())?;
        let device = Device::from_raw(p.device.device_type, p.device.device_id)
            .map_err(|e| e.to_string())?;
        let view = TensorView::zeros_on(device, dtype, shape).map_err(|e| e.to_string())?;
        export_versioned(&view, ExportOptions::default()).map_err(|e| e.to_string())
    });
    let message = match made {
        Ok(Ok(managed)) if !out.is_null() => {
            // SAFETY: checked non-NULL; the caller owns the tensor.
            unsafe { *out = managed.as_ptr() };
            return 0;
        }
        // The tensor made is dropped (freed) with its deleter when out is NULL.
        Ok(Ok(managed)) => {
            // SAFETY: a managed tensor made above, owned by nobody else: its own deleter
            // frees it, once.
            unsafe {
                if let Some(delete) = (*managed.as_ptr()).deleter {
                    delete(managed.as_ptr());
                }
            }
            "out is NULL".to_string()
        }
        Ok(Err(why)) => why,
        Err(_) => "internal error in zerohop (please report)".to_string(),
    };
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: the caller's reporter and context, with two C strings.
    unsafe { set_error(error_ctx, c"RuntimeError".as_ptr(), text.as_ptr()) };
    -1
}

/// The work-stream entry of zerohop's table: zerohop makes CUDA data ready on the legacy
/// default stream before it leaves, so that is its work stream there; NULL elsewhere.
///
/// # Safety
/// `out` NULL (refused with -1) or writable.
pub unsafe extern "C" fn work_stream(kind: c_int, _device_id: i32, out: *mut *mut c_void) -> c_int {
    if out.is_null() {
        return -1;
    }
    let stream = match DeviceKind::from_raw(kind) {
        Some(DeviceKind::Cuda | DeviceKind::CudaManaged) => CudaStream::LEGACY.handle(),
        _ => 0,
    };
    // SAFETY: checked non-NULL.
    unsafe { *out = stream as *mut c_void };
    0
}
