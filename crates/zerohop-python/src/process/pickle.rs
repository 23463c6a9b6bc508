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
//! CUDA SoA tables travel the same way (their one buffer). Other device data is refused:
//! zerohop never copies it to the host behind the caller's back.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};
use zerohop::memory::SharedHandle;
use zerohop::soa::{ColumnKind, ColumnSpec, ComponentOrder, Schema, SoaTable};
use zerohop::{Buffer, DType, Device, TensorView};

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::base::owner::PyOwner;
use crate::base::tensor::PyTensor;
use crate::tables::storage::Storage;
use crate::tables::table::PyTable;

/// The layout of `state` and `data`; a pickle from a zerohop that wrote another is refused.
const FORMAT: u32 = 1;

/// (bytes from the span's start to element 0, bytes of the span) of a strided layout: the
/// memory between its lowest and highest element. Zero elements span nothing.
fn span(shape: &[i64], strides: &[i64], itemsize: usize) -> Option<(i128, i128)> {
    if shape.len() != strides.len() || shape.iter().any(|&n| n < 0) {
        return None;
    }
    if shape.contains(&0) {
        return Some((0, 0));
    }
    // Checked throughout: a hostile pickle may hold 64 axes of extent and stride near 2^63.
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::from(n - 1).checked_mul(i128::from(s))?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let item = itemsize as i128;
    let len = high.checked_sub(low)?.checked_add(1)?.checked_mul(item)?;
    Some((low.checked_neg()?.checked_mul(item)?, len))
}

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
        if across_machines() {
            return Err(refuse_cuda_across_machines("tensor"));
        }
        return reduce_cuda_tensor(py, t);
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
    let item = view.dtype().itemsize();
    let state = PyDict::new(py);
    state.set_item("dtype", view.dtype().to_string())?;
    state.set_item("shape", PyTuple::new(py, view.shape())?)?;
    state.set_item("readonly", view.is_readonly())?;
    state.set_item("is_copied", t.is_copied)?;
    let (offset, len) = span(view.shape(), view.strides(), item)
        .ok_or_else(|| PyValueError::new_err("this tensor's layout has no byte span"))?;
    let (offset, len) = (offset as usize, len as usize);
    let start = view.data_ptr().wrapping_sub(offset);
    let shareable = !across_machines();
    let in_segment =
        shareable && len > 0 && zerohop::memory::handle_for(start, len).py()?.is_some();
    let data = if protocol >= 5 || in_segment {
        // A view of the whole span, strides and all: the receiver shares this memory.
        state.set_item("strides", PyTuple::new(py, view.strides())?)?;
        state.set_item("offset", offset)?;
        state.set_item("nbytes", len)?;
        data_of(
            py,
            start,
            len,
            view.owner(),
            view.is_readonly(),
            protocol,
            shareable,
        )?
    } else {
        // In band, the bytes are copied anyway: send only the elements, compacted. The
        // compact copy is temporary, so it never travels as a handle (it may come from a
        // shared current resource, and would be freed before anyone attached).
        let compact = if view.is_contiguous() {
            view.clone()
        } else {
            view.contiguous_copy().py()?
        };
        state.set_item("strides", PyTuple::new(py, compact.strides())?)?;
        state.set_item("offset", 0)?;
        state.set_item("nbytes", compact.nbytes())?;
        data_of(
            py,
            compact.data_ptr(),
            compact.nbytes(),
            compact.owner(),
            view.is_readonly(),
            protocol,
            false,
        )?
    };
    reduce_value(py, "_rebuild_tensor", state, data)
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
        [FORMAT.into_pyobject(py)?.into_any(), state.into_any(), data],
    )?;
    PyTuple::new(py, [rebuild_fn(py, rebuild)?, args.into_any()])
}

/// A CUDA tensor's reduce: its span by CUDA IPC (a handle, never the bytes).
fn reduce_cuda_tensor<'py>(py: Python<'py>, t: &PyTensor) -> PyResult<Bound<'py, PyTuple>> {
    let view = &t.view;
    let (offset, len) = span(view.shape(), view.strides(), view.dtype().itemsize())
        .ok_or_else(|| PyValueError::new_err("this tensor's layout has no byte span"))?;
    let (offset, len) = (offset as usize, len as usize);
    let state = PyDict::new(py);
    state.set_item("dtype", view.dtype().to_string())?;
    state.set_item("shape", PyTuple::new(py, view.shape())?)?;
    state.set_item("strides", PyTuple::new(py, view.strides())?)?;
    state.set_item("offset", offset)?;
    state.set_item("nbytes", len)?;
    state.set_item("readonly", view.is_readonly())?;
    state.set_item("is_copied", t.is_copied)?;
    let start = view.data_ptr().wrapping_sub(offset);
    state.set_item(
        "cuda_ipc",
        crate::process::pickle_cuda::export_state(py, t, start as usize, len.max(1))?,
    )?;
    reduce_value(py, "_rebuild_tensor", state, py.None().into_bound(py))
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
    state.set_item("storage", storage.kind())?;
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
            let layout = t.layout();
            state.set_item("schema", schema_items(py, t.schema())?)?;
            state.set_item("rows", layout.rows)?;
            state.set_item("alignment", layout.alignment)?;
            state.set_item("first_row", t.first_row())?;
            state.set_item("len", t.len())?;
            state.set_item("readonly", t.is_readonly())?;
            state.set_item("nbytes", layout.total_bytes)?;
            if device.kind == zerohop::DeviceKind::Cuda {
                if across_machines() {
                    return Err(refuse_cuda_across_machines("table"));
                }
                // SAFETY: the table's whole buffer is live device memory, produced on the
                // table's stream, held by the table being pickled.
                let handle = unsafe {
                    crate::process::pickle_cuda::export_span(
                        py,
                        device.id,
                        t.buffer().as_ptr() as usize,
                        layout.total_bytes.max(1),
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
                layout.total_bytes,
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
        Storage::Device { columns, .. } => {
            let device = columns.first().map_or(Device::CPU, |(_, v)| v.device());
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

/// Schema items as plain tuples: (name, dtype, kind, K or R, C, order).
fn schema_items<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for c in schema.columns() {
        let (kind, a, b, order) = match c.kind {
            ColumnKind::TableScalar => ("scalar", 0, 0, "row"),
            ColumnKind::Column => ("column", 0, 0, "row"),
            ColumnKind::Vector(k) => ("vector", k, 0, "row"),
            ColumnKind::Matrix { rows, cols, order } => (
                "matrix",
                rows,
                cols,
                if order == ComponentOrder::RowMajor {
                    "row"
                } else {
                    "col"
                },
            ),
        };
        list.append((c.name.as_str(), c.dtype.to_string(), kind, a, b, order))?;
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
        let kind = match (kind.as_str(), order.as_str()) {
            ("scalar", _) => ColumnKind::TableScalar,
            ("column", _) => ColumnKind::Column,
            ("vector", _) => ColumnKind::Vector(a),
            ("matrix", "row") | ("matrix", "col") => ColumnKind::Matrix {
                rows: a,
                cols: b,
                order: if order == "row" {
                    ComponentOrder::RowMajor
                } else {
                    ComponentOrder::ColumnMajor
                },
            },
            _ => {
                return Err(PyValueError::new_err(format!(
                    "pickled table: column {name:?} has kind {kind:?} / order {order:?}"
                )))
            }
        };
        columns.push(ColumnSpec {
            name,
            dtype: parse_dtype(&dtype)?,
            kind,
        });
    }
    Schema::new(columns).py()
}

/// A dtype name as `Display` writes it, lanes ("float32x4") included.
fn parse_dtype(name: &str) -> PyResult<DType> {
    if let Ok(dtype) = DType::from_name(name) {
        return Ok(dtype);
    }
    let lanes = name
        .rsplit_once('x')
        .and_then(|(base, lanes)| Some((DType::from_name(base).ok()?, lanes.parse::<u16>().ok()?)));
    match lanes {
        Some((base, lanes)) => DType::from_raw(base.code as u8, base.bits, lanes).py(),
        None => Err(PyValueError::new_err(format!(
            "pickled data: {name:?} is not a dtype name"
        ))),
    }
}

fn check_format(format: &Bound<'_, PyAny>) -> PyResult<()> {
    match format.extract::<u32>() {
        Ok(FORMAT) => Ok(()),
        _ => Err(PyValueError::new_err(format!(
            "this pickle's zerohop format is {format}; this zerohop reads format {FORMAT} \
             (was it written by another version?)"
        ))),
    }
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

/// The received bytes, or a fresh aligned copy of them when they start at an address not
/// aligned to `needed` (some transports deliver frames at any offset). The copy is reported
/// as a CopyWarning unless `quiet`.
fn aligned(
    py: Python<'_>,
    buffer: Buffer,
    needed: usize,
    what: &str,
    quiet: bool,
) -> PyResult<(Buffer, bool)> {
    if (buffer.as_ptr() as usize).is_multiple_of(needed) || buffer.is_empty() {
        return Ok((buffer, false));
    }
    let align = needed.max(zerohop::DEFAULT_ALIGNMENT);
    let copy = Buffer::zeroed_host(buffer.len(), align).py()?;
    // SAFETY: two distinct host buffers of `buffer.len()` bytes; the copy is private.
    unsafe { std::ptr::copy_nonoverlapping(buffer.as_ptr(), copy.as_ptr(), buffer.len()) };
    if quiet {
        return Ok((copy, true));
    }
    warn_copy(
        py,
        &format!(
            "the received {what} starts at {:p}, not aligned to the {needed} bytes its \
             elements need: copied",
            buffer.as_ptr()
        ),
    )?;
    Ok((copy, true))
}

fn check_len(buffer: &Buffer, nbytes: usize) -> PyResult<()> {
    if buffer.len() != nbytes {
        return Err(PyValueError::new_err(format!(
            "pickled zerohop data: the buffer holds {} bytes, its metadata says {nbytes} \
             (truncated or mismatched buffers?)",
            buffer.len()
        )));
    }
    Ok(())
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
    let dtype = parse_dtype(&field::<String>(state, "dtype", "a dtype name")?)?;
    let shape: Vec<i64> = field(state, "shape", "a tuple of ints")?;
    let strides: Vec<i64> = field(state, "strides", "a tuple of ints")?;
    let offset: usize = field(state, "offset", "a byte offset")?;
    let nbytes: usize = field(state, "nbytes", "a byte count")?;
    let readonly: bool = field(state, "readonly", "a bool")?;
    let is_copied: bool = field(state, "is_copied", "a bool")?;
    let (low, len) = span(&shape, &strides, dtype.itemsize()).ok_or_else(|| {
        PyValueError::new_err(format!(
            "pickled tensor: shape {shape:?} and strides {strides:?} do not describe a tensor"
        ))
    })?;
    let fits = len == 0 || (offset as i128 >= low && offset as i128 - low + len <= nbytes as i128);
    if !fits {
        return Err(PyValueError::new_err(format!(
            "pickled tensor: shape {shape:?}, strides {strides:?} of {dtype} at byte {offset} \
             reach outside its {nbytes}-byte buffer"
        )));
    }
    if let Some(handle) = state.get_item("cuda_ipc")? {
        let handle = handle
            .cast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("pickled tensor: 'cuda_ipc' is not a dict"))?;
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
    check_len(&buffer, nbytes)?;
    // `offset` is a whole number of elements, so an aligned start aligns every element.
    let (buffer, copied) = aligned(py, buffer, dtype.alignment(), "tensor", false)?;
    let data_ptr = buffer.as_ptr().wrapping_add(offset);
    // Data that arrived read-only stays read-only, also when it had to be copied to align it.
    let readonly = readonly || !writable;
    // SAFETY: every element the layout reaches lies in `buffer` (checked above: the span
    // from `offset - low` to `offset - low + len` is inside its `nbytes` bytes), which the
    // owner keeps alive; read-only received memory stays read-only.
    let view = unsafe {
        TensorView::from_raw_parts(
            data_ptr,
            dtype,
            shape,
            strides,
            Device::CPU,
            Arc::new(buffer),
            readonly,
        )
    }
    .map_err(|e| PyValueError::new_err(format!("pickled tensor: {e}")))?;
    Ok(PyTensor::new(view, is_copied || copied))
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
    let schema = parse_schema(
        &state
            .get_item("schema")?
            .ok_or_else(|| PyValueError::new_err("pickled zerohop data lacks \"schema\""))?,
    )?;
    let rows: usize = field(state, "rows", "a row count")?;
    let alignment: usize = field(state, "alignment", "a power of two")?;
    let first_row: usize = field(state, "first_row", "a row number")?;
    let len: usize = field(state, "len", "a row count")?;
    let readonly: bool = field(state, "readonly", "a bool")?;
    let nbytes: usize = field(state, "nbytes", "a byte count")?;
    let layout = zerohop::soa::Layout::new(&schema, rows, alignment).py()?;
    if layout.total_bytes != nbytes {
        return Err(PyValueError::new_err(format!(
            "pickled table: {rows} rows of its schema at alignment {alignment} take {} bytes, \
             its metadata says {nbytes}",
            layout.total_bytes
        )));
    }
    if let Some(handle) = state.get_item("cuda_ipc")? {
        let handle = handle
            .cast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("pickled table: 'cuda_ipc' is not a dict"))?;
        let buffer = crate::process::pickle_cuda::import_buffer(handle, nbytes.max(1), "table")?;
        let table = SoaTable::over_buffer(schema, rows, alignment, buffer, first_row, len).py()?;
        let table = if readonly {
            table.into_readonly()
        } else {
            table
        };
        // The import made the legacy stream wait on the producer's event.
        return Py::new(py, PyTable::from_table(table));
    }
    let Received {
        buffer,
        writable,
        in_band,
    } = received(data)?;
    check_len(&buffer, nbytes)?;
    let widest = schema
        .columns()
        .iter()
        .map(|c| c.dtype.alignment())
        .max()
        .unwrap_or(1);
    // Views need only element alignment (Ray's store aligns to 64 bytes, so a 128-byte table
    // arrives as a view reporting 64); data that came in band is a copy already, and one more
    // restores the table's own alignment.
    let (buffer, _realigned) = if in_band {
        aligned(py, buffer, alignment.max(widest), "table", true)?
    } else {
        aligned(py, buffer, widest, "table", false)?
    };
    let table = SoaTable::over_buffer(schema, rows, alignment, buffer, first_row, len).py()?;
    // As for tensors: read-only data stays read-only, copied to realign it or not.
    let table = if readonly || !writable {
        table.into_readonly()
    } else {
        table
    };
    Py::new(py, PyTable::from_table(table))
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

fn refuse_cuda_across_machines(what: &str) -> PyErr {
    PyValueError::new_err(format!(
        "a CUDA {what} cannot be pickled for another machine: CUDA IPC handles open on this \
         machine only. Copy it to the host with the framework that made it first (for \
         example zerohop.from_dlpack(torch.from_dlpack(t).cpu())), and back to a device \
         there"
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_rebuild_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(_rebuild_table, m)?)?;
    m.add_function(wrap_pyfunction!(_pickling_across_machines, m)?)?;
    Ok(())
}
