//! The DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`) as a consumer: a framework
//! publishes a static table of C functions on its tensor type; calling
//! `managed_tensor_to_py_object_no_sync` makes one of its tensors from our managed tensor
//! without any Python-level protocol calls. zerohop uses it for host tensors only: the
//! "no sync" contract leaves CUDA stream ordering to the caller.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::{ffi, intern};
use zerohop::dlpack::ffi::{DLManagedTensorVersioned, DLPackVersion, DLTensor};

const API_CAPSULE: &CStr = c"dlpack_exchange_api";

#[repr(C)]
struct ExchangeHeader {
    version: DLPackVersion,
    prev_api: *mut ExchangeHeader,
}

type SetError = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char);

#[repr(C)]
struct ExchangeApi {
    header: ExchangeHeader,
    managed_tensor_allocator: Option<
        unsafe extern "C" fn(
            *mut DLTensor,
            *mut *mut DLManagedTensorVersioned,
            *mut c_void,
            SetError,
        ) -> c_int,
    >,
    managed_tensor_from_py_object_no_sync:
        Option<unsafe extern "C" fn(*mut c_void, *mut *mut DLManagedTensorVersioned) -> c_int>,
    managed_tensor_to_py_object_no_sync:
        Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned, *mut *mut c_void) -> c_int>,
    dltensor_from_py_object_no_sync:
        Option<unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> c_int>,
    current_work_stream: Option<unsafe extern "C" fn(c_int, i32, *mut *mut c_void) -> c_int>,
}

const _: () = assert!(std::mem::size_of::<ExchangeApi>() == 56);

/// A framework's table, valid for the whole process (the header requires it to be static).
#[derive(Clone, Copy)]
struct ApiPtr(*const ExchangeApi);
// SAFETY: the table is immutable static data of the providing library.
unsafe impl Send for ApiPtr {}
// SAFETY: as above.
unsafe impl Sync for ApiPtr {}

static TORCH_API: OnceLock<Option<ApiPtr>> = OnceLock::new();

fn torch_api(py: Python<'_>) -> Option<ApiPtr> {
    *TORCH_API.get_or_init(|| {
        let tensor_type = py
            .import(intern!(py, "torch"))
            .ok()?
            .getattr(intern!(py, "Tensor"))
            .ok()?;
        let capsule = tensor_type
            .getattr(intern!(py, "__dlpack_c_exchange_api__"))
            .ok()?;
        // SAFETY: `capsule` is alive; a wrong name makes GetPointer fail (checked).
        let raw = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), API_CAPSULE.as_ptr()) };
        if raw.is_null() {
            // SAFETY: clear the error GetPointer set; we fall back to the Python protocol.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        let api = raw as *const ExchangeApi;
        // SAFETY: a live, static table; the header layout is stable across versions.
        let major = unsafe { (*api).header.version.major };
        // SAFETY: as above; checking the function this module calls.
        let usable = major == 1 && unsafe { (*api).managed_tensor_to_py_object_no_sync.is_some() };
        usable.then_some(ApiPtr(api))
    })
}

/// Turns `managed` into a torch tensor through torch's C exchange API. `Ok(None)` when torch
/// does not offer the API (the caller then uses the capsule protocol; `managed` is untouched).
pub fn torch_tensor_from_managed<'py>(
    py: Python<'py>,
    managed: NonNull<DLManagedTensorVersioned>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(api) = torch_api(py) else {
        return Ok(None);
    };
    // SAFETY: checked non-null when the table was cached.
    let to_py = unsafe { (*api.0).managed_tensor_to_py_object_no_sync }.expect("checked");
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: the function steals `managed` (a valid versioned tensor we own) and writes a new
    // reference on success; on failure it sets a Python exception. We never touch `managed`
    // again either way: on failure it may leak, which beats a double free.
    let rc = unsafe { to_py(managed.as_ptr(), &mut out) };
    if rc != 0 || out.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `out` is a new, owned reference to a torch.Tensor.
    Ok(Some(unsafe {
        Bound::from_owned_ptr(py, out as *mut ffi::PyObject)
    }))
}
