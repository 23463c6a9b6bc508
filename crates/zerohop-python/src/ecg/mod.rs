//! `zerohop._zerohop.ecg`: the ECG stages and the WFDB/CSV readers over `zerohop-ecg`.

use std::io::ErrorKind;

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use zerohop_ecg::EcgError;

pub mod pipeline;
pub mod synth;
pub mod vae;
pub mod wfdb;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pipeline::register(m)?;
    synth::register(m)?;
    vae::register(m)?;
    wfdb::register(m)
}

/// The ECG crate's errors in Python, for every reader and stage alike: a missing file is
/// FileNotFoundError (what `open` raises), other I/O errors OSError, zerohop's own errors
/// their usual classes, everything else ValueError; the message is the crate's, naming the
/// file, line, column or parameter.
pub fn to_py(err: EcgError) -> PyErr {
    match err {
        EcgError::Io { ref source, .. } if source.kind() == ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(err.to_string())
        }
        EcgError::Io { .. } => PyOSError::new_err(err.to_string()),
        EcgError::Zerohop(e) => crate::base::errors::to_py(e),
        other => PyValueError::new_err(other.to_string()),
    }
}
