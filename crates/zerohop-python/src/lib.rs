//! The `zerohop._zerohop` extension module: thin bindings over the `zerohop` crate.
//!
//! The modules are layers; each uses only the ones listed before it:
//! `base` (the Tensor type, owners, errors) → `memory` (resources, the NumPy hook) →
//! `protocols` (DLPack, array interfaces, Arrow) → `tables` → `process` (pickle, IPC) →
//! `api` (the Python methods of Tensor and Table, module functions).
//! `scripts/check-layers.py` holds the crate to that order.

mod api;
mod base;
mod memory;
mod process;
mod protocols;
mod tables;

use pyo3::prelude::*;

use crate::api::functions;
use crate::base::tensor::PyTensor;
use crate::protocols::dlpack_import;
use crate::tables::table::PyTable;

#[pymodule]
fn _zerohop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DLPACK_VERSION", (1, 3))?;
    m.add_class::<PyTensor>()?;
    m.add_class::<PyTable>()?;
    m.add_function(wrap_pyfunction!(dlpack_import::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(
        protocols::interface::from_array_interface,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(functions::zeros, m)?)?;
    m.add_function(wrap_pyfunction!(functions::from_arrow, m)?)?;
    process::pickle::register(m)?;
    m.add(
        "OutOfMemoryError",
        m.py().get_type::<base::errors::OutOfMemoryError>(),
    )?;
    m.add("CudaError", m.py().get_type::<base::errors::CudaError>())?;
    m.add(
        "CopyWarning",
        m.py().get_type::<base::errors::CopyWarning>(),
    )?;
    m.add(
        "NoSuchColumnError",
        base::errors::no_such_column_type(m.py())?,
    )?;
    m.add("StreamError", base::errors::stream_error_type(m.py())?)?;
    let memory = PyModule::new(m.py(), "memory")?;
    memory.setattr(
        "__doc__",
        "Memory resources and adaptors (system, shared, CUDA; pool, arena, limit, stats, \
         tracking, log), the current resource per device, and the hook that makes NumPy \
         allocate from it. The `zerohop.memory` package wraps these in classes.",
    )?;
    memory::register(&memory)?;
    m.add_submodule(&memory)?;
    let cuda_module = PyModule::new(m.py(), "cuda")?;
    cuda_module.setattr(
        "__doc__",
        "CUDA through the driver API, loaded at run time: availability, device count, stream \
         synchronisation, and import of the CUDA array interface.",
    )?;
    protocols::cuda::register(&cuda_module)?;
    m.add_submodule(&cuda_module)?;
    Ok(())
}
