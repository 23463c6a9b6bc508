//! Pickling `zerohop.Tensor` and `zerohop.Table` (PEP 574).
//!
//! What travels, in order of preference:
//! - memory in a shared segment (`zerohop.memory.Shared`): a handle, never the bytes, at any
//!   protocol; the receiver on the same machine maps the same memory;
//! - protocol 5 and up: one `pickle.PickleBuffer` over the data's span (out of band when the
//!   pickler has a `buffer_callback`, as Ray and Dask do), and the rebuilt object is a view of
//!   whatever buffer the unpickler is handed, which it keeps alive;
//! - older protocols: the data's bytes in the stream (a compact copy).
//!
//! Every reduce returns `(rebuild, (FORMAT, state, data))`; the rebuild functions check every
//! value of `state` and `data` against each other before building a view, so a truncated or
//! tampered pickle is a Python exception, never a view past the end of a buffer.
//! CUDA tensors travel by CUDA IPC (`pickle_cuda`): a handle to the same device memory.
//! CUDA SoA tables travel the same way (their one buffer). Inside
//! `zerohop.pickling(across_machines="bytes")`, where a handle would not open, their bytes are
//! staged through the host and put back on a device of the receiver (`wire::host_copy`: one
//! copy each way, asked for by that block). Other device data is refused: zerohop never copies
//! it to the host behind the caller's back.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};
use zerohop::memory::SharedHandle;
use zerohop::soa::Schema;
use zerohop::wire::{self, TableState, TensorState, WireColumn};
use zerohop::{Buffer, DType, Device, TensorView};

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::base::owner::PyOwner;
use crate::base::tensor::PyTensor;
use crate::tables::storage::{kind_name, Storage};
use crate::tables::table::PyTable;

/// Why device data cannot be pickled, and what to do instead.
fn refuse_device(what: &str, device: Device, how: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "cannot pickle a {what} on {device}: zerohop does not copy device memory to the host \
         behind your back. {how}"
    ))
}

/// The shared-segment handle of `start..start + len`, as a dict, when it lies in one.
fn shared_handle<'py>(
    py: Python<'py>,
    start: *const u8,
    len: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(h) = zerohop::memory::handle_for(start, len).py()? else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("shared", &h.name)?;
    d.set_item("boot_id", &h.boot_id)?;
    d.set_item("pid", h.pid)?;
    d.set_item("fd", h.fd)?;
    d.set_item("dev", h.dev)?;
    d.set_item("ino", h.ino)?;
    d.set_item("segment_bytes", h.segment_len)?;
    d.set_item("offset", h.offset)?;
    d.set_item("nbytes", h.len)?;
    Ok(Some(d))
}

/// `data` for `len` bytes at `start` that `owner` keeps alive: a handle (when `shareable`
/// and the bytes lie in a shared segment), a PickleBuffer (protocol 5 and up) or bytes
/// (bytearray when writable, so the copy stays writable).
fn data_of<'py>(
    py: Python<'py>,
    start: *mut u8,
    len: usize,
    owner: &zerohop::Owner,
    readonly: bool,
    protocol: i32,
    shareable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if shareable && len > 0 {
        if let Some(handle) = shared_handle(py, start, len)? {
            return Ok(handle.into_any());
        }
    }
    if protocol >= 5 {
        // SAFETY: `start..start + len` is memory `owner` keeps alive (the caller's tensor or
        // table spans it); the byte view holds `owner` and keeps the read-only mark.
        let bytes = unsafe {
            TensorView::from_raw_parts(
                start,
                DType::U8,
                vec![len as i64],
                vec![1],
                Device::CPU,
                owner.clone(),
                readonly,
            )
        }
        .py()?;
        // NumPy exports the buffer protocol (which abi3 before 3.11 cannot) and keeps the
        // byte view, hence the memory, alive as its base.
        let array = py.import(intern!(py, "numpy"))?.call_method1(
            intern!(py, "asarray"),
            (Bound::new(py, PyTensor::new(bytes, false))?,),
        )?;
        return py
            .import(intern!(py, "pickle"))?
            .getattr(intern!(py, "PickleBuffer"))?
            .call1((array,));
    }
    let slice: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: `len` readable host bytes that `owner` (held by the caller) keeps alive.
        unsafe { std::slice::from_raw_parts(start, len) }
    };
    Ok(if readonly {
        PyBytes::new(py, slice).into_any()
    } else {
        PyByteArray::new(py, slice).into_any()
    })
}

fn rebuild_fn<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import(intern!(py, "zerohop._zerohop"))?.getattr(name)
}

/// `Tensor.__reduce_ex__`.
pub fn reduce_tensor<'py>(
    tensor: &Bound<'py, PyTensor>,
    protocol: i32,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = tensor.py();
    let t = tensor.get();
    let device = t.view.device();
    if device.kind == zerohop::DeviceKind::Cuda {
        return reduce_cuda_tensor(py, t, protocol);
    }
    if !device.is_host_accessible() {
        return Err(refuse_device(
            "zerohop.Tensor",
            device,
            "Copy it to the host with the framework that made it (for example \
             zerohop.from_dlpack(torch.from_dlpack(t).cpu())), or share it within one process \
             through DLPack",
        ));
    }
    let view = &t.view;
    let (wire_state, start) = TensorState::of(view, t.is_copied).py()?;
    let len = wire_state.nbytes;
    let shareable = !across_machines();
    let in_segment =
        shareable && len > 0 && zerohop::memory::handle_for(start, len).py()?.is_some();
    if protocol >= 5 || in_segment {
        // A view of the whole span, strides and all: the receiver shares this memory.
        let data = data_of(
            py,
            start,
            len,
            view.owner(),
            view.is_readonly(),
            protocol,
            shareable,
        )?;
        return reduce_value(py, "_rebuild_tensor", state_dict_of(py, &wire_state)?, data);
    }
    // In band, the bytes are copied anyway: send only the elements, compacted. The compact
    // copy is temporary, so it never travels as a handle (it may come from a shared current
    // resource, and would be freed before anyone attached).
    let compact = if view.is_contiguous() {
        view.clone()
    } else {
        view.contiguous_copy().py()?
    };
    let (compact_state, compact_start) = TensorState::of(&compact, t.is_copied).py()?;
    let compact_state = TensorState {
        readonly: view.is_readonly(),
        ..compact_state
    };
    let data = data_of(
        py,
        compact_start,
        compact_state.nbytes,
        compact.owner(),
        view.is_readonly(),
        protocol,
        false,
    )?;
    reduce_value(
        py,
        "_rebuild_tensor",
        state_dict_of(py, &compact_state)?,
        data,
    )
}

/// A tensor's wire state as the dict that travels.
fn state_dict_of<'py>(py: Python<'py>, wire_state: &TensorState) -> PyResult<Bound<'py, PyDict>> {
    let state = PyDict::new(py);
    state.set_item("dtype", wire_state.dtype.to_string())?;
    state.set_item("shape", PyTuple::new(py, &wire_state.shape)?)?;
    state.set_item("strides", PyTuple::new(py, &wire_state.strides)?)?;
    state.set_item("offset", wire_state.offset)?;
    state.set_item("nbytes", wire_state.nbytes)?;
    state.set_item("readonly", wire_state.readonly)?;
    state.set_item("is_copied", wire_state.is_copied)?;
    Ok(state)
}

/// `(rebuild, (FORMAT, state, data))`: what `__reduce_ex__` returns for every zerohop object.
fn reduce_value<'py>(
    py: Python<'py>,
    rebuild: &str,
    state: Bound<'py, PyDict>,
    data: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let args = PyTuple::new(
        py,
        [
            wire::FORMAT.into_pyobject(py)?.into_any(),
            state.into_any(),
            data,
        ],
    )?;
    PyTuple::new(py, [rebuild_fn(py, rebuild)?, args.into_any()])
}

/// A CUDA tensor's reduce: its span by CUDA IPC (a handle, never the bytes); for another
/// machine its span's bytes, staged through the host (`staged_data`).
fn reduce_cuda_tensor<'py>(
    py: Python<'py>,
    t: &PyTensor,
    protocol: i32,
) -> PyResult<Bound<'py, PyTuple>> {
    let view = &t.view;
    let (wire_state, start) = TensorState::of(view, t.is_copied).py()?;
    let state = state_dict_of(py, &wire_state)?;
    if across_machines() {
        let device = view.device().id;
        state.set_item("staged_from", device)?;
        // SAFETY: the span of the tensor being pickled, which holds its memory for this call.
        let data = unsafe {
            staged_data(
                py,
                device,
                start as usize,
                wire_state.nbytes,
                t.stream(),
                protocol,
            )
        }?;
        return reduce_value(py, "_rebuild_tensor", state, data);
    }
    let len = wire_state.nbytes.max(1);
    state.set_item(
        "cuda_ipc",
        crate::process::pickle_cuda::export_state(py, t, start as usize, len)?,
    )?;
    reduce_value(py, "_rebuild_tensor", state, py.None().into_bound(py))
}

/// `nbytes` of CUDA `device` memory at `start`, copied to the host once `stream`'s work
/// before it is done, as data that travels as host bytes do (never a handle).
///
/// # Safety
/// `start..start + nbytes` must be live device memory for the duration of the call.
unsafe fn staged_data<'py>(
    py: Python<'py>,
    device: i32,
    start: usize,
    nbytes: usize,
    stream: usize,
    protocol: i32,
) -> PyResult<Bound<'py, PyAny>> {
    let stream = zerohop::Stream(stream);
    // SAFETY: per this function's contract.
    let host = py
        .detach(move || unsafe { wire::host_copy(device, start as *const u8, nbytes, stream) })
        .py()?;
    let owner: zerohop::Owner = Arc::new(host.clone());
    data_of(py, host.as_ptr(), host.len(), &owner, true, protocol, false)
}

/// `Table.__reduce_ex__`.
pub fn reduce_table<'py>(
    table: &Bound<'py, PyTable>,
    storage: &Storage,
    stream: usize,
    protocol: i32,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = table.py();
    let state = PyDict::new(py);
    state.set_item("storage", kind_name(storage))?;
    let data = match storage {
        Storage::Soa(t) => {
            let device = t.device();
            if device.kind != zerohop::DeviceKind::Cuda && !device.is_host_accessible() {
                return Err(refuse_device(
                    "zerohop.Table",
                    device,
                    "table.to(\"cpu\") makes a host copy that pickles",
                ));
            }
            let wire_state = TableState::of(t);
            state.set_item("schema", schema_items(py, &wire_state.schema)?)?;
            state.set_item("rows", wire_state.rows)?;
            state.set_item("alignment", wire_state.alignment)?;
            state.set_item("first_row", wire_state.first_row)?;
            state.set_item("len", wire_state.len)?;
            state.set_item("readonly", wire_state.readonly)?;
            state.set_item("nbytes", wire_state.nbytes)?;
            if device.kind == zerohop::DeviceKind::Cuda && across_machines() {
                state.set_item("staged_from", device.id)?;
                let buffer = t.buffer().as_ptr() as usize;
                // SAFETY: the whole buffer of the table being pickled, which holds it.
                let data = unsafe {
                    staged_data(py, device.id, buffer, wire_state.nbytes, stream, protocol)
                }?;
                return reduce_value(py, "_rebuild_table", state, data);
            }
            if device.kind == zerohop::DeviceKind::Cuda {
                // SAFETY: the table's whole buffer is live device memory, produced on the
                // table's stream, held by the table being pickled.
                let handle = unsafe {
                    crate::process::pickle_cuda::export_span(
                        py,
                        device.id,
                        t.buffer().as_ptr() as usize,
                        wire_state.nbytes.max(1),
                        stream,
                    )
                }?;
                state.set_item("cuda_ipc", handle)?;
                return reduce_value(py, "_rebuild_table", state, py.None().into_bound(py));
            }
            let owner: zerohop::Owner = Arc::new(t.buffer().clone());
            data_of(
                py,
                t.buffer().as_ptr(),
                wire_state.nbytes,
                &owner,
                t.is_readonly(),
                protocol,
                !across_machines(),
            )?
        }
        Storage::Arrow(_) => {
            // pyarrow pickles record batches with out-of-band buffers (protocol 5) and the
            // receiver's zerohop.from_arrow shares them again.
            let pyarrow = py.import(intern!(py, "pyarrow")).map_err(|_| {
                PyTypeError::new_err(
                    "pickling an Arrow-backed zerohop.Table needs pyarrow (pip install \
                     pyarrow), or table.to_soa() first (a copy) for the SoA form",
                )
            })?;
            pyarrow.call_method1(intern!(py, "record_batch"), (table,))?
        }
        Storage::Columns(c) => {
            let device = c.device();
            return Err(refuse_device(
                "zerohop.Table",
                device,
                "Copy its columns to the host with the framework that made them and build a \
                 host table (zerohop.Table.from_tensors)",
            ));
        }
    };
    reduce_value(py, "_rebuild_table", state, data)
}

/// Schema items as plain tuples: (name, dtype, kind, K or R, C, order) (`wire::WireColumn`).
fn schema_items<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for c in wire::schema_to_wire(schema) {
        list.append((c.name, c.dtype, c.kind, c.a, c.b, c.order))?;
    }
    Ok(list)
}

fn parse_schema(items: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let list = items
        .cast::<PyList>()
        .map_err(|_| PyTypeError::new_err("pickled table: schema must be a list"))?;
    let mut columns = Vec::with_capacity(list.len());
    for item in list.iter() {
        let (name, dtype, kind, a, b, order): (String, String, String, usize, usize, String) =
            item.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "pickled table: schema item {item} must be (name, dtype, kind, int, int, \
                     order)"
                ))
            })?;
        columns.push(WireColumn {
            name,
            dtype,
            kind,
            a,
            b,
            order,
        });
    }
    wire::schema_from_wire(columns).py()
}

fn check_format(format: &Bound<'_, PyAny>) -> PyResult<()> {
    wire::check_format(format.extract::<u32>().ok(), &format.to_string()).py()
}

/// `state[key]`, converted, or a TypeError naming the key.
fn field<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    state: &Bound<'py, PyDict>,
    key: &str,
    expected: &str,
) -> PyResult<T> {
    let value = state
        .get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("pickled zerohop data lacks {key:?}")))?;
    value.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "pickled zerohop data: {key:?} must be {expected}, got {}",
            value
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "an unprintable object".into())
        ))
    })
}

fn state_dict<'a, 'py>(state: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyDict>> {
    state
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("pickled zerohop data: the state must be a dict"))
}

/// What arrived: a buffer that keeps its exporter alive, whether it may be written, and
/// whether it is the unpickler's own copy (bytes or bytearray: data that came in band).
struct Received {
    buffer: Buffer,
    writable: bool,
    in_band: bool,
}

/// The received data: a shared-segment handle is attached, anything else goes through NumPy,
/// which reads every buffer-protocol object (bytes, bytearray, memoryview, PickleBuffer, Ray's
/// and Dask's buffers).
fn received(data: &Bound<'_, PyAny>) -> PyResult<Received> {
    let py = data.py();
    if let Ok(handle) = data.cast::<PyDict>() {
        let handle = SharedHandle {
            name: field(handle, "shared", "a segment name")?,
            boot_id: field(handle, "boot_id", "a string")?,
            pid: field(handle, "pid", "a process id")?,
            fd: field(handle, "fd", "a descriptor number")?,
            dev: field(handle, "dev", "an int")?,
            ino: field(handle, "ino", "an int")?,
            segment_len: field(handle, "segment_bytes", "a byte count")?,
            offset: field(handle, "offset", "a byte offset")?,
            len: field(handle, "nbytes", "a byte count")?,
        };
        let attached = zerohop::memory::attach(&handle).py()?;
        return Ok(Received {
            buffer: attached.buffer,
            writable: attached.writable,
            in_band: false,
        });
    }
    let in_band =
        data.is_exact_instance_of::<PyBytes>() || data.is_exact_instance_of::<PyByteArray>();
    let array = py
        .import(intern!(py, "numpy"))?
        .call_method1(intern!(py, "frombuffer"), (data, intern!(py, "uint8")))
        .map_err(|e| {
            PyTypeError::new_err(format!(
                "pickled zerohop data must come with a bytes-like buffer or a shared-memory \
                 handle, got {} ({e})",
                data.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
    let (address, readonly): (usize, bool) = array
        .getattr(intern!(py, "__array_interface__"))?
        .get_item("data")?
        .extract()?;
    let len: usize = array.getattr(intern!(py, "nbytes"))?.extract()?;
    let ptr = NonNull::new(address as *mut u8).unwrap_or(NonNull::dangling());
    let owner: zerohop::Owner = Arc::new(PyOwner::new(array.unbind()));
    // SAFETY: the NumPy array exports `len` bytes at `address` and keeps its exporter (the
    // received buffer) alive; the array itself lives as long as `owner`.
    let buffer = unsafe { Buffer::from_foreign(ptr, len, Device::CPU, owner) };
    Ok(Received {
        buffer,
        writable: !readonly,
        in_band,
    })
}

/// Reports a copy made to align received data.
fn warn_realigned(py: Python<'_>, what: &str, at: *const u8, needed: usize) -> PyResult<()> {
    warn_copy(
        py,
        &format!(
            "the received {what} starts at {at:p}, not aligned to the {needed} bytes its \
             elements need: copied"
        ),
    )
}

/// Rebuilds a `zerohop.Tensor` from `Tensor.__reduce_ex__`'s output: a view of `data`.
#[pyfunction]
fn _rebuild_tensor(
    py: Python<'_>,
    format: &Bound<'_, PyAny>,
    state: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    check_format(format)?;
    let state = state_dict(state)?;
    let wire_state = TensorState {
        dtype: wire::parse_dtype(&field::<String>(state, "dtype", "a dtype name")?).py()?,
        shape: field(state, "shape", "a tuple of ints")?,
        strides: field(state, "strides", "a tuple of ints")?,
        offset: field(state, "offset", "a byte offset")?,
        nbytes: field(state, "nbytes", "a byte count")?,
        readonly: field(state, "readonly", "a bool")?,
        is_copied: field(state, "is_copied", "a bool")?,
    };
    wire_state.check().py()?;
    if let Some(from) = staged_from(state)? {
        let host = received(data)?.buffer;
        let device = wire::receiving_device(from).py()?;
        let view = py
            .detach(|| wire_state.view_on_device(&host, device))
            .py()?;
        return Ok(PyTensor::new(view, true));
    }
    if let Some(handle) = state.get_item("cuda_ipc")? {
        let handle = handle
            .cast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("pickled tensor: 'cuda_ipc' is not a dict"))?;
        let TensorState {
            dtype,
            shape,
            strides,
            offset,
            nbytes,
            readonly,
            is_copied,
        } = wire_state;
        return crate::process::pickle_cuda::rebuild(
            handle,
            dtype,
            shape,
            strides,
            offset,
            nbytes.max(1),
            readonly,
            is_copied,
        );
    }
    let Received {
        buffer, writable, ..
    } = received(data)?;
    let at = buffer.as_ptr();
    let (view, copied) = wire_state.view_over(buffer, writable).py()?;
    if copied {
        warn_realigned(py, "tensor", at, wire_state.dtype.alignment())?;
    }
    Ok(PyTensor::new(view, wire_state.is_copied || copied))
}

/// Rebuilds a `zerohop.Table` from `Table.__reduce_ex__`'s output: SoA tables as a view of
/// `data` laid out as the schema says, Arrow tables through `Table.from_arrow`.
#[pyfunction]
fn _rebuild_table(
    py: Python<'_>,
    format: &Bound<'_, PyAny>,
    state: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
) -> PyResult<Py<PyTable>> {
    check_format(format)?;
    let state = state_dict(state)?;
    let storage: String = field(state, "storage", "a storage kind")?;
    match storage.as_str() {
        "soa" => {}
        "arrow" => {
            let table = py
                .get_type::<PyTable>()
                .call_method1(intern!(py, "from_arrow"), (data,))?;
            return Ok(table.cast_into::<PyTable>()?.unbind());
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "pickled table: storage {other:?} must be 'soa' or 'arrow'"
            )))
        }
    }
    let wire_state = TableState {
        schema: parse_schema(
            &state
                .get_item("schema")?
                .ok_or_else(|| PyValueError::new_err("pickled zerohop data lacks \"schema\""))?,
        )?,
        rows: field(state, "rows", "a row count")?,
        alignment: field(state, "alignment", "a power of two")?,
        first_row: field(state, "first_row", "a row number")?,
        len: field(state, "len", "a row count")?,
        readonly: field(state, "readonly", "a bool")?,
        nbytes: field(state, "nbytes", "a byte count")?,
    };
    wire_state.check().py()?;
    if let Some(from) = staged_from(state)? {
        let host = received(data)?.buffer;
        let device = wire::receiving_device(from).py()?;
        let table = py
            .detach(move || wire_state.table_on_device(&host, device))
            .py()?;
        return Py::new(py, PyTable::from_table(table));
    }
    if let Some(handle) = state.get_item("cuda_ipc")? {
        let handle = handle
            .cast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("pickled table: 'cuda_ipc' is not a dict"))?;
        let buffer =
            crate::process::pickle_cuda::import_buffer(handle, wire_state.nbytes.max(1), "table")?;
        // The import made the legacy stream wait on the producer's event. Its buffer is the
        // span the IPC handle covers (at least one byte), so the table is laid over it as is.
        let readonly = wire_state.readonly;
        let table = wire_state.laid_over(buffer, readonly).py()?;
        return Py::new(py, PyTable::from_table(table));
    }
    let Received {
        buffer,
        writable,
        in_band,
    } = received(data)?;
    let at = buffer.as_ptr();
    let widest = wire_state.element_alignment();
    let (table, copied) = wire_state.table_over(buffer, writable, in_band).py()?;
    // Data that came in band is the unpickler's own copy: one more copy is not news.
    if copied && !in_band {
        warn_realigned(py, "table", at, widest)?;
    }
    Py::new(py, PyTable::from_table(table))
}

/// The CUDA device a staged object left (`state["staged_from"]`), if it was staged.
fn staged_from(state: &Bound<'_, PyDict>) -> PyResult<Option<i32>> {
    match state.get_item("staged_from")? {
        None => Ok(None),
        Some(_) => field(state, "staged_from", "a CUDA device number").map(Some),
    }
}

/// While set, objects pickle for another machine: host data as bytes (out of band at
/// protocol 5), never as a shared-memory handle that only this machine can open. Process-wide,
/// because Ray and Dask pickle on threads of their own.
static ACROSS_MACHINES: AtomicBool = AtomicBool::new(false);

fn across_machines() -> bool {
    ACROSS_MACHINES.load(Ordering::SeqCst)
}

/// Sets (when `on` is given) whether objects pickle for another machine; returns the previous
/// setting. `zerohop.pickling(across_machines="bytes")` is the public face.
#[pyfunction]
#[pyo3(signature = (on=None))]
fn _pickling_across_machines(on: Option<bool>) -> bool {
    match on {
        Some(on) => ACROSS_MACHINES.swap(on, Ordering::SeqCst),
        None => across_machines(),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_rebuild_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(_rebuild_table, m)?)?;
    m.add_function(wrap_pyfunction!(_pickling_across_machines, m)?)?;
    Ok(())
}
