//! Argument shapes that several Python entry points accept.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `{name: array}` or `[(name, array)]`, as (name, array) pairs in order.
pub fn named_items<'py>(columns: &Bound<'py, PyAny>) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    if let Ok(d) = columns.cast::<PyDict>() {
        return d.iter().map(|(k, v)| Ok((k.extract()?, v))).collect();
    }
    columns.extract()
}
