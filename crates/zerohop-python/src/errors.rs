//! zerohop errors become Python exceptions here and nowhere else, with the same message.

use pyo3::exceptions::{PyBufferError, PyMemoryError, PyTypeError, PyValueError};
use pyo3::PyErr;
use zerohop::Error;

pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err {
        Error::InvalidArgument { .. } => PyValueError::new_err(message),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(message),
        Error::DTypeMismatch { .. } => PyTypeError::new_err(message),
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

pub trait IntoPyResult<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for zerohop::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
