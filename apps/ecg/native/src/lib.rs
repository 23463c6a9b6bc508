//! `zerohop_ecg._native`: the ECG app's Rust readers and kernels (`zerohop-ecg`) for its
//! Python job. Results leave as DLPack capsules and table buffers that the app's Python side
//! hands to zerohop's public API (`zerohop.from_dlpack`, `zerohop.Table.wrap`); inputs come
//! from any DLPack producer. Nothing here reaches into zerohop's own extension.

use std::io::ErrorKind;

use pyo3::exceptions::{
    PyBufferError, PyFileNotFoundError, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use zerohop_ecg::EcgError;

mod csv;
mod handoff;
mod segment;
mod vae;
mod wfdb;

/// The ECG crate's errors in Python: a missing file is FileNotFoundError (what `open`
/// raises), other I/O errors OSError, zerohop's errors as [`zerohop_error`], everything else
/// ValueError; the message is the crate's, naming the file, line, column or parameter.
pub(crate) fn to_py(err: EcgError) -> PyErr {
    match err {
        EcgError::Io { ref source, .. } if source.kind() == ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(err.to_string())
        }
        EcgError::Io { .. } => PyOSError::new_err(err.to_string()),
        EcgError::Zerohop(e) => zerohop_error(e),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// zerohop's errors by Python's built-in classes, which zerohop's own exception classes
/// derive from (its `OutOfMemoryError` is a MemoryError, its `CudaError` a RuntimeError).
pub(crate) fn zerohop_error(err: zerohop::Error) -> PyErr {
    use zerohop::Error as E;
    let message = err.to_string();
    match err {
        E::LimitExceeded { .. } | E::OutOfMemory { .. } => PyMemoryError::new_err(message),
        E::Cuda { .. } => PyRuntimeError::new_err(message),
        E::System { errno, .. } => PyOSError::new_err((errno, message)),
        E::DTypeMismatch { .. } | E::WrongType(_) => PyTypeError::new_err(message),
        E::UnsupportedDType { .. }
        | E::UnsupportedDevice { .. }
        | E::InvalidTensor(_)
        | E::UnsupportedVersion { .. }
        | E::NotHostAccessible { .. }
        | E::ReadOnly(_)
        | E::NotContiguous(_)
        | E::Export(_) => PyBufferError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    csv::register(m)?;
    segment::register(m)?;
    vae::register(m)?;
    wfdb::register(m)
}
