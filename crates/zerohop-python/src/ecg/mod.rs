//! `zerohop._zerohop.ecg`: the ECG stages and the WFDB/CSV readers over `zerohop-ecg`.

use pyo3::prelude::*;

pub mod pipeline;
pub mod wfdb;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pipeline::register(m)?;
    wfdb::register(m)
}
