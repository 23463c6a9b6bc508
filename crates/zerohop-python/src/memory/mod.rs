//! `zerohop._zerohop.memory`: memory resources and adaptors, and the hooks that make NumPy
//! allocate from them, with the Python call stack recorded for each allocation.

use pyo3::prelude::*;

pub mod numpy_hook;
pub mod python_stack;
pub mod resource;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    resource::register(m)?;
    numpy_hook::register(m)?;
    python_stack::install();
    Ok(())
}
