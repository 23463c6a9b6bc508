//! `zerohop.cuda`: availability, device tensors, and the CUDA array interface (v3) import.

use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use zerohop::cuda::{self as zcuda, CudaDeviceResource, LEGACY_STREAM};
use zerohop::{Buffer, DType, DTypeCode, Device, Stream, TensorView};

use crate::errors::IntoPyResult;
use crate::owner::PyOwner;
use crate::tensor::PyTensor;

#[pyfunction]
fn is_available() -> bool {
    zcuda::is_available()
}

#[pyfunction]
fn device_count() -> usize {
    zcuda::device_count()
}

/// Blocks until `stream` (a DLPack/CUDA stream value; default: the legacy default stream) on
/// `device` has finished its queued work.
#[pyfunction]
#[pyo3(signature = (device=0, stream=1))]
fn synchronize(py: Python<'_>, device: i32, stream: usize) -> PyResult<()> {
    py.detach(|| zcuda::synchronize(device, Stream(stream)))
        .py()
}

/// A zero-filled tensor in fresh device memory (cuMemAlloc) of `device`.
pub fn zeros_on(device: Device, dtype: DType, shape: &[i64]) -> PyResult<PyTensor> {
    let numel = zerohop::tensor::checked_numel(shape).py()?;
    let bytes = numel * dtype.itemsize();
    // The device's current resource (a pool `memory.install` or `set_current` put there),
    // else plain device memory.
    let resource: Arc<dyn zerohop::MemoryResource> = match zerohop::memory::current_resource(device)
    {
        Some(r) => r,
        None => Arc::new(CudaDeviceResource::new(device.id).py()?),
    };
    let buffer = Buffer::allocate(resource, bytes, zcuda::CUDA_ALIGNMENT, LEGACY_STREAM).py()?;
    // SAFETY: a fresh device allocation of `bytes` bytes on `device`.
    unsafe { zcuda::memset_zero(device.id, buffer.as_ptr(), bytes) }.py()?;
    let view = TensorView::from_buffer(buffer, dtype, shape).py()?;
    Ok(PyTensor::with_stream(view, false, LEGACY_STREAM.0))
}

fn dtype_from_typestr(typestr: &str) -> PyResult<DType> {
    let bytes = typestr.as_bytes();
    if bytes.len() < 3 {
        return Err(PyValueError::new_err(format!(
            "typestr {typestr:?} is malformed"
        )));
    }
    let native = if cfg!(target_endian = "little") {
        b'<'
    } else {
        b'>'
    };
    let size: u8 = typestr[2..]
        .parse()
        .map_err(|_| PyValueError::new_err(format!("typestr {typestr:?} is malformed")))?;
    if bytes[0] != native && bytes[0] != b'|' && size > 1 {
        return Err(PyBufferError::new_err(format!(
            "typestr {typestr:?} is not native byte order"
        )));
    }
    let code = match bytes[1] {
        b'i' => DTypeCode::Int,
        b'u' => DTypeCode::UInt,
        b'f' => DTypeCode::Float,
        b'c' => DTypeCode::Complex,
        b'b' => DTypeCode::Bool,
        other => {
            return Err(PyBufferError::new_err(format!(
                "typestr {typestr:?}: kind {:?} is not supported",
                other as char
            )))
        }
    };
    DType::from_raw(code as u8, size * 8, 1).py()
}

/// Imports anything with `__cuda_array_interface__` (v2 or v3) without a copy, keeping the
/// object alive. A v3 `stream` is honoured: the legacy default stream (which zerohop's CUDA
/// views are ordered on) waits for it.
#[pyfunction]
pub fn from_cuda_array_interface(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let cai = obj.getattr("__cuda_array_interface__")?;
    let cai = cai
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("__cuda_array_interface__ lacks {key:?}")))
    };
    let version: i64 = get("version")?.extract()?;
    if !(0..=3).contains(&version) {
        return Err(PyValueError::new_err(format!(
            "CUDA array interface version {version} is unknown"
        )));
    }
    let shape: Vec<i64> = get("shape")?.extract()?;
    let dtype = dtype_from_typestr(&get("typestr")?.extract::<String>()?)?;
    let (ptr, readonly): (usize, bool) = get("data")?.extract()?;
    if cai.get_item("mask")?.is_some_and(|m| !m.is_none()) {
        return Err(PyBufferError::new_err(
            "masked CUDA arrays are not supported",
        ));
    }
    let item = dtype.itemsize() as i64;
    let strides = match cai.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<i64> = s.extract()?;
            bytes
                .iter()
                .map(|&b| {
                    if b % item != 0 {
                        Err(PyBufferError::new_err(format!(
                            "stride {b} bytes is not a multiple of the {item}-byte element"
                        )))
                    } else {
                        Ok(b / item)
                    }
                })
                .collect::<PyResult<Vec<i64>>>()?
        }
        _ => zerohop::tensor::compact_strides(&shape),
    };
    let numel = zerohop::tensor::checked_numel(&shape).py()?;
    let device = if numel == 0 || ptr == 0 {
        Device::cuda(0)
    } else {
        Device::cuda(zcuda::pointer_device(ptr).py()?)
    };
    if let Some(stream) = cai.get_item("stream")? {
        if !stream.is_none() {
            let stream: usize = stream.extract()?;
            if stream == 0 {
                return Err(PyValueError::new_err(
                    "CUDA array interface stream 0 is not allowed (ambiguous)",
                ));
            }
            let id = device.id;
            py.detach(|| zcuda::order_streams(id, Stream(stream), LEGACY_STREAM))
                .py()?;
        }
    }
    let owner: zerohop::Owner = Arc::new(PyOwner::new(obj.clone().unbind()));
    // SAFETY: the producer promises the memory described by its interface stays valid while
    // the object lives, and `owner` keeps the object alive; the layout is validated inside.
    let view = unsafe {
        TensorView::from_raw_parts(
            ptr as *mut u8,
            dtype,
            shape,
            strides,
            device,
            owner,
            readonly,
        )
    }
    .py()?;
    Ok(PyTensor::with_stream(view, false, LEGACY_STREAM.0))
}

/// The `__cuda_array_interface__` (v3) of a CUDA tensor.
pub fn interface<'py>(py: Python<'py>, t: &PyTensor) -> PyResult<Bound<'py, PyDict>> {
    let view = &t.view;
    let typestr = crate::tensor::typestr(view.dtype())
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
    d.set_item("stream", t.stream())?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(from_cuda_array_interface, m)?)?;
    Ok(())
}
