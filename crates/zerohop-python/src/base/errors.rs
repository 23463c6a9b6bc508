//! zerohop errors become Python exceptions here and nowhere else, with the same message.

use pyo3::exceptions::{
    PyBufferError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyErr;
use zerohop::Error;

pyo3::create_exception!(
    zerohop,
    OutOfMemoryError,
    PyMemoryError,
    "A memory limit refused an allocation; `requested`, `in_use` and `limit` are in bytes."
);

pyo3::create_exception!(
    zerohop,
    CudaError,
    PyRuntimeError,
    "A CUDA driver call failed; `call` says which, `code` is the driver's CUresult and `name` \
     its symbol (CUDA_ERROR_ILLEGAL_ADDRESS, ...)."
);

fn cuda_error(message: String, call: String, code: i32, name: String) -> PyErr {
    let err = CudaError::new_err(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("call", call);
        let _ = value.setattr("code", code);
        let _ = value.setattr("name", name);
    });
    err
}

fn limit_error(message: String, requested: usize, in_use: usize, limit: usize) -> PyErr {
    let err = OutOfMemoryError::new_err(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("requested", requested);
        let _ = value.setattr("in_use", in_use);
        let _ = value.setattr("limit", limit);
    });
    err
}

pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err {
        Error::LimitExceeded {
            requested,
            in_use,
            limit,
        } => limit_error(message, requested, in_use, limit),
        Error::Cuda {
            call, code, name, ..
        } => cuda_error(message, call, code, name),
        Error::InvalidArgument { .. } | Error::Wire(_) | Error::CudaUnavailable { .. } => {
            PyValueError::new_err(message)
        }
        Error::NoSuchColumn { .. } => no_such_column(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        Error::System { errno, .. } => PyOSError::new_err((errno, message)),
        Error::DTypeMismatch { .. } | Error::WrongType(_) => PyTypeError::new_err(message),
        Error::UnsupportedDType { .. }
        | Error::UnsupportedDevice { .. }
        | Error::InvalidTensor(_)
        | Error::UnsupportedVersion { .. }
        | Error::NotHostAccessible { .. }
        | Error::ReadOnly(_)
        | Error::NotContiguous(_)
        | Error::Export(_) => PyBufferError::new_err(message),
    }
}

/// `zerohop.NoSuchColumnError` (a KeyError and a ValueError, defined in the package), or a
/// ValueError should the package not be importable or the name rebound to a non-class.
fn no_such_column(message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("zerohop")
            .and_then(|m| m.getattr("NoSuchColumnError"))
            .ok()
            .and_then(|class| class.cast_into::<PyType>().ok());
        match class {
            Some(class) => PyErr::from_type(class, message),
            None => PyValueError::new_err(message),
        }
    })
}

pub trait IntoPyResult<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for zerohop::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

/// Reports a copy the caller allowed, as a `zerohop.CopyWarning`.
pub fn warn_copy(py: Python<'_>, what: &str) -> PyResult<()> {
    let warnings = py.import("warnings")?;
    let category = py.import("zerohop")?.getattr("CopyWarning")?;
    warnings.call_method1("warn", (what, category, 2))?;
    Ok(())
}
