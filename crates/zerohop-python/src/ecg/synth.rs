//! The ECG crate's memory rule for recordings, for the command line's up-front check.

use pyo3::prelude::*;

use super::to_py;

/// Raises ValueError, naming `what` and the numbers, when a recording of `samples` samples
/// needs more than half of this machine's memory in the ECG job (32 bytes a sample): the rule
/// `synthesize` applies too.
#[pyfunction]
fn check_memory(samples: u64, what: &str) -> PyResult<()> {
    zerohop_ecg::synth::check_memory(samples, what).map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_memory, m)?)
}
