//! The `zerohop._zerohop` extension module: thin bindings over the `zerohop` crate.

mod arrow;
mod arrow_table;
mod capsule;
mod cuda;
mod ecg;
mod errors;
mod exchange;
mod interface;
mod memory;
mod numpy_hook;
mod owner;
mod table;
mod tensor;

use pyo3::exceptions::PyBufferError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyCapsule, PyDict};
use zerohop::{DType, TensorView};

use crate::errors::IntoPyResult;
use crate::tensor::PyTensor;

/// Imports anything that speaks DLPack (or a DLPack capsule) without copying.
///
/// Asks for a versioned (1.x) capsule first; producers that refuse `max_version` (pyarrow
/// raises TypeError, others raise other errors) are asked again for a legacy capsule.
/// `copy=True` returns a compact copy in zerohop memory instead of a view.
#[pyfunction]
#[pyo3(signature = (obj, /, *, copy=None))]
fn from_dlpack(py: Python<'_>, obj: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<PyTensor> {
    let imported = if let Ok(tensor) = obj.cast::<PyTensor>() {
        let t = tensor.get();
        // Same data, same producing stream.
        PyTensor::with_stream(t.view.clone(), t.is_copied, t.stream())
    } else if obj.is_instance_of::<PyCapsule>() {
        let import = capsule::consume(obj)?;
        PyTensor::new(import.view, import.is_copied)
    } else if !obj.hasattr(intern!(py, "__dlpack__"))?
        && obj.hasattr(intern!(py, "__cuda_array_interface__"))?
    {
        cuda::from_cuda_array_interface(py, obj)?
    } else if !obj.hasattr(intern!(py, "__dlpack__"))?
        && obj.hasattr(intern!(py, "__array_interface__"))?
    {
        interface::from_array_interface(obj)?
    } else {
        let capsule = request_capsule(py, obj)?;
        let import = capsule::consume(&capsule)?;
        PyTensor::new(import.view, import.is_copied)
    };
    if copy == Some(true) {
        return Ok(PyTensor::new(imported.view.contiguous_copy().py()?, true));
    }
    Ok(imported)
}

fn request_capsule<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let (kind, _id): (i32, i32) = obj
        .call_method0(intern!(py, "__dlpack_device__"))?
        .extract()?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), (1, 3))?;
    if tensor::device_takes_stream(kind) {
        // The legacy default stream: what a consumer with no stream of its own means.
        kwargs.set_item(intern!(py, "stream"), 1)?;
    }
    let dunder = intern!(py, "__dlpack__");
    match obj.call_method(dunder, (), Some(&kwargs)) {
        Ok(capsule) => Ok(capsule),
        Err(versioned_error) => {
            let legacy = if tensor::device_takes_stream(kind) {
                let kwargs = PyDict::new(py);
                kwargs.set_item(intern!(py, "stream"), 1)?;
                obj.call_method(dunder, (), Some(&kwargs))
            } else {
                obj.call_method0(dunder)
            };
            legacy.map_err(|legacy_error| {
                let err = PyBufferError::new_err(format!(
                    "{} could not export through DLPack: asked for a versioned capsule: {}; \
                     asked for a legacy capsule: {}",
                    obj.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    versioned_error,
                    legacy_error
                ));
                err.set_cause(py, Some(legacy_error));
                err
            })
        }
    }
}

/// A zero-filled tensor in fresh zerohop memory: host memory from the current host resource
/// (128-byte aligned), or device memory for `device="cuda:N"`.
#[pyfunction]
#[pyo3(signature = (shape, dtype="float32", device="cpu"))]
fn zeros(shape: Vec<i64>, dtype: &str, device: &str) -> PyResult<PyTensor> {
    let dtype = DType::from_name(dtype).py()?;
    let device = zerohop::Device::parse(device).py()?;
    if device.kind == zerohop::DeviceKind::Cuda {
        return cuda::zeros_on(device, dtype, &shape);
    }
    if device.kind != zerohop::DeviceKind::Cpu {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "zeros on {device}: zerohop allocates on cpu and cuda:N"
        )));
    }
    Ok(PyTensor::new(TensorView::zeros(dtype, &shape).py()?, false))
}

/// A table over Arrow data from any producer of the Arrow PyCapsule interface, sharing its
/// memory (see `Table.from_arrow`).
#[pyfunction]
#[pyo3(signature = (data, /, *, copy=false))]
fn from_arrow(py: Python<'_>, data: &Bound<'_, PyAny>, copy: bool) -> PyResult<Py<table::PyTable>> {
    let table = py.get_type::<table::PyTable>().call_method(
        "from_arrow",
        (data,),
        Some(&[("copy", copy)].into_py_dict(py)?),
    )?;
    Ok(table.cast_into::<table::PyTable>()?.unbind())
}

#[pymodule]
fn _zerohop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DLPACK_VERSION", (1, 3))?;
    m.add_class::<PyTensor>()?;
    m.add_class::<table::PyTable>()?;
    m.add_function(wrap_pyfunction!(from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(interface::from_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(from_arrow, m)?)?;
    m.add(
        "OutOfMemoryError",
        m.py().get_type::<errors::OutOfMemoryError>(),
    )?;
    let memory = PyModule::new(m.py(), "memory")?;
    memory::register(&memory)?;
    m.add_submodule(&memory)?;
    let ecg = PyModule::new(m.py(), "ecg")?;
    ecg::register(&ecg)?;
    m.add_submodule(&ecg)?;
    let cuda_module = PyModule::new(m.py(), "cuda")?;
    cuda::register(&cuda_module)?;
    m.add_submodule(&cuda_module)?;
    Ok(())
}
