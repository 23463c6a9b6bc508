//! `zerohop.cuda`: availability, device tensors, and the CUDA array interface (v3) import.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use zerohop::array_interface::Flavor;
use zerohop::cuda::{self as zcuda, LEGACY_STREAM};
use zerohop::handoff::{ready_on, ConsumerStream};
use zerohop::{Device, Stream};

use crate::base::errors::IntoPyResult;
use crate::base::tensor::PyTensor;

/// True when a CUDA driver loads and sees at least one device; never raises.
#[pyfunction]
fn is_available() -> bool {
    zcuda::is_available()
}

/// The number of CUDA devices the driver sees (0 without a driver).
#[pyfunction]
fn device_count() -> usize {
    zcuda::device_count()
}

/// Blocks until `stream` (a DLPack/CUDA stream value; default: the legacy default stream) on
/// `device` has finished its queued work.
#[pyfunction]
#[pyo3(signature = (device=0, stream=1))]
fn synchronize(py: Python<'_>, device: i32, stream: usize) -> PyResult<()> {
    py.detach(|| Stream::cuda(stream).and_then(|s| zcuda::synchronize(device, s)))
        .py()
}

/// Imports anything with `__cuda_array_interface__` (v2 or v3) without a copy, keeping the
/// object alive. A v3 `stream` is honoured: the legacy default stream (which zerohop's CUDA
/// views are ordered on) waits for it.
#[pyfunction]
pub fn from_cuda_array_interface(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let layout = crate::protocols::interface::read_layout(obj, Flavor::Cuda)?;
    let numel = zerohop::tensor::checked_numel(&layout.shape).py()?;
    let device = if numel == 0 || layout.address == 0 {
        Device::cuda(0)
    } else {
        Device::cuda(zcuda::pointer_device(layout.address).py()?)
    };
    if let Some(stream) = layout.stream {
        let (producer, ours) = (Stream::on(stream), ConsumerStream::Unnamed);
        py.detach(|| ready_on(device, None, producer, ours)).py()?;
    }
    let view = crate::protocols::interface::wrap(obj, layout, device)?;
    Ok(PyTensor::with_stream(view, false, LEGACY_STREAM))
}

/// The `__cuda_array_interface__` (v3) of a CUDA tensor.
pub fn interface<'py>(py: Python<'py>, t: &PyTensor) -> PyResult<Bound<'py, PyDict>> {
    let view = &t.view;
    let typestr = crate::base::tensor::typestr(view.dtype())
        .ok_or_else(|| PyTypeError::new_err(format!("no typestr for {}", view.dtype())))?;
    let d = PyDict::new(py);
    d.set_item("version", 3)?;
    d.set_item("shape", PyTuple::new(py, view.shape())?)?;
    d.set_item("typestr", typestr)?;
    let address = if view.numel() == 0 {
        0
    } else {
        view.data_ptr() as usize
    };
    d.set_item("data", (address, view.is_readonly()))?;
    let item = view.dtype().itemsize() as i64;
    if view.is_contiguous() {
        d.set_item("strides", py.None())?;
    } else {
        let strides: Vec<i64> = view.strides().iter().map(|s| s * item).collect();
        d.set_item("strides", PyTuple::new(py, strides)?)?;
    }
    d.set_item("stream", t.stream().raw())?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(from_cuda_array_interface, m)?)?;
    Ok(())
}
