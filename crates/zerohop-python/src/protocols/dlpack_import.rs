//! `zerohop.from_dlpack`: DLPack import from any producer, a capsule, or the array interfaces
//! of producers without `__dlpack__`.

use pyo3::exceptions::PyBufferError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::base::errors::IntoPyResult;
use zerohop_pyo3::{capsule, request_capsule};

use crate::base::errors::to_py;
use crate::base::tensor::PyTensor;
use crate::protocols::{cuda, interface};

/// Imports anything that speaks DLPack (or a DLPack capsule) without copying.
///
/// Asks for a versioned (1.x) capsule first; producers that refuse `max_version` (pyarrow
/// raises TypeError, others raise other errors) are asked again for a legacy capsule.
/// `copy=True` returns a compact copy in zerohop memory instead of a view.
///
/// Read-only data never becomes writable: a versioned capsule's READ_ONLY flag is kept, and a
/// legacy capsule (JAX's, for one), which cannot say whether its memory may be written, is
/// imported read-only, as NumPy does. `readonly=False` is the caller's word that a legacy
/// producer's memory may be written; it cannot lift a producer's READ_ONLY flag.
#[pyfunction]
#[pyo3(signature = (obj, /, *, copy=None, readonly=None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    copy: Option<bool>,
    readonly: Option<bool>,
) -> PyResult<PyTensor> {
    let imported = if let Ok(tensor) = obj.cast::<PyTensor>() {
        let t = tensor.get();
        // Same data, same producing stream.
        PyTensor::with_stream(t.view.clone(), t.is_copied, t.stream())
    } else if obj.is_instance_of::<PyCapsule>() {
        from_capsule(obj, readonly)?
    } else if !obj.hasattr(intern!(py, "__dlpack__"))?
        && obj.hasattr(intern!(py, "__cuda_array_interface__"))?
    {
        cuda::from_cuda_array_interface(py, obj)?
    } else if !obj.hasattr(intern!(py, "__dlpack__"))?
        && obj.hasattr(intern!(py, "__array_interface__"))?
    {
        interface::from_array_interface(obj)?
    } else {
        from_capsule(&request_capsule(py, obj, None)?, readonly)?
    };
    if copy == Some(true) {
        let copied = imported.view.private_copy().py()?;
        let copied = if readonly == Some(true) {
            copied.into_readonly()
        } else {
            copied
        };
        return Ok(PyTensor::new(copied, true));
    }
    match readonly {
        Some(false) if imported.view.is_readonly() => Err(PyBufferError::new_err(
            "readonly=False: the producer marked this memory read-only; copy=True gives a \
             writable copy",
        )),
        Some(true) if !imported.view.is_readonly() => {
            let stream = imported.stream();
            Ok(PyTensor::with_stream(
                imported.view.clone().into_readonly(),
                imported.is_copied,
                stream,
            ))
        }
        _ => Ok(imported),
    }
}

/// A capsule's tensor, read-only when a legacy capsule leaves it unsaid and the caller did
/// not vouch for it (`readonly=False`).
fn from_capsule(capsule: &Bound<'_, PyAny>, readonly: Option<bool>) -> PyResult<PyTensor> {
    let import = capsule::consume(capsule, to_py)?;
    let is_copied = import.is_copied;
    let view = import.into_view(readonly == Some(false));
    Ok(PyTensor::new(view, is_copied))
}
