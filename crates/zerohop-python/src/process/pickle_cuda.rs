//! Pickling CUDA tensors by CUDA IPC: the pickle carries a memory handle, an offset and an
//! interprocess event, never the bytes; another process on the same machine maps the same
//! device memory, ordered after the producer's stream.
//!
//! The producer must keep the tensor alive until the consumer has unpickled it (a handle does
//! not hold the allocation). It also keeps the events of its most recent exports, which the
//! consumers open; older ones are destroyed.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use zerohop::cuda::ipc::{self, ExportedEvent, IpcHandle, HANDLE_BYTES};
use zerohop::{Buffer, DType, Device, Stream, TensorView};

use crate::base::errors::IntoPyResult;
use crate::base::tensor::PyTensor;

/// Events of the most recent exports, kept until consumers are likely to have opened them.
const KEPT_EVENTS: usize = 4096;
static EXPORTED: Mutex<VecDeque<ExportedEvent>> = Mutex::new(VecDeque::new());

/// The `cuda_ipc` entry of a CUDA tensor's pickled state: `len` bytes from `start` (the span
/// of its elements), exported after the work queued on its producing stream.
pub fn export_state<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    start: usize,
    len: usize,
) -> PyResult<Bound<'py, PyDict>> {
    // SAFETY: `start..start + len` is the span of a live tensor's elements on its device, and
    // the stream is the one the tensor's data is produced on.
    unsafe { export_span(py, tensor.view.device().id, start, len, tensor.stream()) }
}

/// The `cuda_ipc` entry for `len` bytes of device memory from `start`, exported after the
/// work queued on `stream`.
///
/// # Safety
/// `start..start + len` must be live device memory of device `device` that stays allocated
/// while the caller's object lives, produced on `stream`.
pub unsafe fn export_span<'py>(
    py: Python<'py>,
    device: i32,
    start: usize,
    len: usize,
    stream: usize,
) -> PyResult<Bound<'py, PyDict>> {
    // SAFETY: guaranteed by the caller.
    let (handle, event) = unsafe { ipc::export(device, start, len, Stream(stream)) }.py()?;
    {
        let mut kept = EXPORTED.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT_EVENTS {
            kept.pop_front();
        }
        kept.push_back(event);
    }
    let d = PyDict::new(py);
    d.set_item("memory", PyBytes::new(py, &handle.memory))?;
    d.set_item("event", PyBytes::new(py, &handle.event))?;
    d.set_item("offset", handle.offset)?;
    d.set_item("bytes", handle.bytes)?;
    d.set_item("device_uuid", PyBytes::new(py, &handle.device_uuid))?;
    d.set_item("pid", handle.pid)?;
    d.set_item("boot_id", &handle.boot_id)?;
    Ok(d)
}

fn bytes_field<const N: usize>(d: &Bound<'_, PyDict>, key: &str) -> PyResult<[u8; N]> {
    let value = d
        .get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("pickled CUDA handle: no {key:?}")))?;
    let bytes: Vec<u8> = value
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("pickled CUDA handle: {key:?} is not bytes")))?;
    bytes.try_into().map_err(|b: Vec<u8>| {
        PyValueError::new_err(format!(
            "pickled CUDA handle: {key:?} has {} bytes, not {N}",
            b.len()
        ))
    })
}

fn int_field(d: &Bound<'_, PyDict>, key: &str) -> PyResult<usize> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("pickled CUDA handle: no {key:?}")))?
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("pickled CUDA handle: {key:?} is not an int")))
}

/// The producer's device memory named by the handle in `state`, mapped: a buffer of
/// `nbytes` bytes, ordered after the producer's stream on the legacy stream.
pub fn import_buffer(state: &Bound<'_, PyDict>, nbytes: usize, what: &str) -> PyResult<Buffer> {
    let handle = IpcHandle {
        memory: bytes_field::<HANDLE_BYTES>(state, "memory")?,
        event: bytes_field::<HANDLE_BYTES>(state, "event")?,
        offset: int_field(state, "offset")?,
        bytes: int_field(state, "bytes")?,
        device_uuid: bytes_field::<16>(state, "device_uuid")?,
        pid: u32::try_from(int_field(state, "pid")?)
            .map_err(|_| PyValueError::new_err("pickled CUDA handle: pid out of range"))?,
        boot_id: state
            .get_item("boot_id")?
            .ok_or_else(|| PyValueError::new_err("pickled CUDA handle: no \"boot_id\""))?
            .extract()
            .map_err(|_| PyTypeError::new_err("pickled CUDA handle: \"boot_id\" is not a str"))?,
    };
    if handle.bytes != nbytes {
        return Err(PyValueError::new_err(format!(
            "pickled CUDA {what}: the handle maps {} bytes, the layout needs {nbytes}",
            handle.bytes
        )));
    }
    let mapped = ipc::import(&handle, zerohop::cuda::LEGACY_STREAM).py()?;
    let device = Device::cuda(mapped.device());
    let ptr = NonNull::new(mapped.ptr() as *mut u8).ok_or_else(|| {
        PyValueError::new_err(format!("pickled CUDA {what}: the mapping is NULL"))
    })?;
    // SAFETY: `nbytes` bytes from `ptr` are the mapped device memory, which `mapped` keeps
    // open (and the buffer keeps `mapped`).
    Ok(unsafe { Buffer::from_foreign(ptr, nbytes, device, Arc::new(mapped)) })
}

/// A tensor over the producer's device memory: `nbytes` mapped from the handle in `state`,
/// element 0 at `offset`.
#[allow(clippy::too_many_arguments)]
pub fn rebuild(
    state: &Bound<'_, PyDict>,
    dtype: DType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    offset: usize,
    nbytes: usize,
    readonly: bool,
    is_copied: bool,
) -> PyResult<PyTensor> {
    let buffer = import_buffer(state, nbytes, "tensor")?;
    let device = buffer.device();
    // SAFETY: the caller checked that the layout from `offset` lies inside `nbytes` bytes.
    let view = unsafe {
        TensorView::from_raw_parts(
            buffer.as_ptr().wrapping_add(offset),
            dtype,
            shape,
            strides,
            device,
            Arc::new(buffer),
            readonly,
        )
    }
    .py()?;
    // The import made the legacy stream wait on the producer's event.
    Ok(PyTensor::with_stream(
        view,
        is_copied,
        zerohop::cuda::LEGACY_STREAM.0,
    ))
}
