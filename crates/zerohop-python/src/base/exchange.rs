//! The DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`, layout in
//! `zerohop::dlpack::exchange`), both ways. As a consumer: torch's table turns our managed
//! tensors into torch tensors without Python-level protocol calls. As a producer: zerohop's
//! own table, published on `zerohop.Tensor`, lets torch, cuda.core, TVM-FFI and any C caller
//! take zerohop tensors the same way. "No sync": the caller orders streams; zerohop's work
//! stream is the legacy default stream, where its tensors are made ready before they leave.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{ffi, intern};
use zerohop::dlpack::exchange::{
    allocate_like, describe, work_stream, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    EXCHANGE_API_CAPSULE,
};
use zerohop::dlpack::ffi::{DLManagedTensorVersioned, DLPackVersion, DLTensor};
use zerohop::dlpack::{export_versioned, import_versioned, ExportOptions};
use zerohop::handoff::{ready_on, ConsumerStream};
use zerohop::{Device, DeviceKind};

use crate::base::errors::IntoPyResult;
use crate::base::tensor::PyTensor;

/// A framework's table, valid for the whole process (the header requires it to be static).
#[derive(Clone, Copy)]
struct ApiPtr(*const DLPackExchangeAPI);
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
            .getattr("Tensor")
            .ok()?;
        let capsule = tensor_type.getattr("__dlpack_c_exchange_api__").ok()?;
        // SAFETY: `capsule` is alive; a wrong name makes GetPointer fail (checked).
        let raw =
            unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), EXCHANGE_API_CAPSULE.as_ptr()) };
        if raw.is_null() {
            // SAFETY: clear the error GetPointer set; we fall back to the Python protocol.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        let api = raw as *const DLPackExchangeAPI;
        // SAFETY: a live, static table; the header layout is stable across versions.
        let major = unsafe { (*api).header.version.major };
        // SAFETY: as above; checking the function this module calls.
        let usable = major == 1 && unsafe { (*api).managed_tensor_to_py_object_no_sync.is_some() };
        usable.then_some(ApiPtr(api))
    })
}

/// Turns `managed` into a torch tensor through torch's C exchange API. `Ok(None)` when torch
/// does not offer the API (the caller then uses the capsule protocol; `managed` is untouched).
/// Streams are the caller's to order first (the call does not synchronise).
pub fn torch_tensor_from_managed<'py>(
    py: Python<'py>,
    managed: NonNull<DLManagedTensorVersioned>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(to_py) = torch_api(py)
        // SAFETY: checked non-null when the table was cached.
        .and_then(|api| unsafe { (*api.0).managed_tensor_to_py_object_no_sync })
    else {
        return Ok(None);
    };
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

/// torch's current stream on a CUDA device through its table (one C call), when it offers it.
pub fn torch_work_stream(py: Python<'_>, device: Device) -> Option<usize> {
    // SAFETY: checked non-null when the table was cached.
    let current = torch_api(py).and_then(|api| unsafe { (*api.0).current_work_stream })?;
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: a static function of torch's table; `out` is a local.
    let rc = unsafe { current(DeviceKind::Cuda as c_int, device.id, &mut out) };
    (rc == 0).then_some(out as usize)
}

/// zerohop's table: static, as the header requires.
static ZEROHOP_API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: 1, minor: 3 },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(allocate_like),
    managed_tensor_from_py_object_no_sync: Some(from_py_object),
    managed_tensor_to_py_object_no_sync: Some(to_py_object),
    dltensor_from_py_object_no_sync: Some(describe_py_object),
    current_work_stream: Some(work_stream),
};

/// The capsule `zerohop.Tensor.__dlpack_c_exchange_api__` holds.
pub fn api_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let table = &ZEROHOP_API as *const DLPackExchangeAPI as *mut c_void;
    // SAFETY: a static table and a static name; no destructor (nothing to free).
    let capsule = unsafe { ffi::PyCapsule_New(table, EXCHANGE_API_CAPSULE.as_ptr(), None) };
    // SAFETY: a new reference, or NULL with a Python error set (taken by from_owned_ptr_or_err).
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// Runs an entry point with the caller's thread attached: 0, or -1 with a Python exception
/// set (a panic becomes a RuntimeError), as the exchange API specifies.
fn entry(body: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    Python::attach(|py| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(py)))
            .unwrap_or_else(|_| {
                Err(PyRuntimeError::new_err(
                    "internal error in zerohop (please report)",
                ))
            });
        match outcome {
            Ok(()) => 0,
            Err(err) => {
                err.restore(py);
                -1
            }
        }
    })
}

/// The zerohop tensor behind a Python object pointer the caller passes.
fn tensor_at<'py>(py: Python<'py>, obj: *mut c_void) -> PyResult<Bound<'py, PyTensor>> {
    if obj.is_null() {
        return Err(PyValueError::new_err(
            "the exchange API was passed a NULL object",
        ));
    }
    // SAFETY: the caller passes a live Python object (the API's contract), borrowed.
    let any = unsafe { Bound::from_borrowed_ptr(py, obj as *mut ffi::PyObject) };
    any.cast_into::<PyTensor>().map_err(|e| {
        let kind = e.into_inner().get_type().name().map(|n| n.to_string());
        PyTypeError::new_err(format!(
            "zerohop's exchange API takes zerohop.Tensor objects, not {}",
            kind.unwrap_or_else(|_| "this object".into())
        ))
    })
}

/// CUDA data made ready on the work stream zerohop reports (the legacy default stream).
fn ready_for_work_stream(t: &PyTensor) -> PyResult<()> {
    // Unnamed: DLPack's default, the legacy stream for CUDA data and nothing for host data.
    let (device, owner) = (t.view.device(), Some(t.view.owner()));
    ready_on(device, owner, t.stream(), ConsumerStream::Unnamed).py()
}

unsafe extern "C" fn from_py_object(
    obj: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    entry(|py| {
        let t = tensor_at(py, obj)?;
        let t = t.get();
        if out.is_null() {
            return Err(PyValueError::new_err(
                "the exchange API was passed a NULL out",
            ));
        }
        ready_for_work_stream(t)?;
        let managed = export_versioned(
            &t.view,
            ExportOptions {
                is_copied: t.is_copied,
            },
        )
        .py()?;
        // SAFETY: checked non-NULL; the caller owns the managed tensor from here.
        unsafe { *out = managed.as_ptr() };
        Ok(())
    })
}

unsafe extern "C" fn to_py_object(
    managed: *mut DLManagedTensorVersioned,
    out: *mut *mut c_void,
) -> c_int {
    entry(|py| {
        let managed = NonNull::new(managed)
            .ok_or_else(|| PyValueError::new_err("the exchange API was passed a NULL tensor"))?;
        if out.is_null() {
            return Err(PyValueError::new_err(
                "the exchange API was passed a NULL out",
            ));
        }
        // SAFETY: the API's contract: a live managed tensor whose ownership passes here (its
        // deleter runs when the view goes, or at once on a refusal).
        let import = unsafe { import_versioned(managed) }.py()?;
        let tensor = Bound::new(py, PyTensor::new(import.into_view(false), false))?;
        // SAFETY: checked non-NULL; the caller owns the new reference.
        unsafe { *out = tensor.into_ptr() as *mut c_void };
        Ok(())
    })
}

unsafe extern "C" fn describe_py_object(obj: *mut c_void, out: *mut DLTensor) -> c_int {
    entry(|py| {
        let t = tensor_at(py, obj)?;
        // SAFETY: the caller's out-parameter, checked non-NULL.
        let out = unsafe { out.as_mut() }
            .ok_or_else(|| PyValueError::new_err("the exchange API was passed a NULL out"))?;
        ready_for_work_stream(t.get())?;
        // The view lives inside the Python object, which the caller keeps alive.
        describe(&t.get().view, out).py()
    })
}
