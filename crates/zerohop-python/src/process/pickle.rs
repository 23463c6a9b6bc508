//! Pickling `zerohop.Tensor` and `zerohop.Table` (PEP 574). What travels and every check on
//! what arrives are the core's (`zerohop::wire`); here its values become Python objects and
//! back, data becomes a `pickle.PickleBuffer`, bytes or an Arrow batch, and received buffers
//! become core buffers.

use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyTuple};
use zerohop::wire::{self, Incoming, Outgoing, Rebuilt, TableWire, TensorWire, Value};
use zerohop::{Buffer, DType, Device, Stream, TensorView};

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::base::owner::PyOwner;
use crate::base::tensor::PyTensor;
use crate::base::value::{object_of, value_of};
use crate::tables::table::PyTable;

/// Data that travels: a handle dict, a PickleBuffer (out of band), bytes (bytearray when
/// writable, so the copy stays writable) or None.
fn data_object<'py>(py: Python<'py>, data: Outgoing) -> PyResult<Bound<'py, PyAny>> {
    let (start, len, owner, readonly, out_of_band) = match data {
        Outgoing::Shared(handle) => return object_of(py, handle),
        Outgoing::Nothing | Outgoing::ArrowBatch => return Ok(py.None().into_bound(py)),
        Outgoing::Bytes {
            start,
            len,
            owner,
            readonly,
            out_of_band,
        } => (start, len, owner, readonly, out_of_band),
    };
    if out_of_band {
        // SAFETY: `start..start + len` is host memory `owner` keeps alive (the core says so);
        // the byte view holds `owner` and keeps the read-only mark.
        let bytes = unsafe {
            TensorView::from_raw_parts(
                start,
                DType::U8,
                vec![len as i64],
                vec![1],
                Device::CPU,
                owner,
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
        // SAFETY: `len` readable host bytes that `owner` (alive here) keeps alive.
        unsafe { std::slice::from_raw_parts(start, len) }
    };
    let copied = if readonly {
        PyBytes::new(py, slice).into_any()
    } else {
        PyByteArray::new(py, slice).into_any()
    };
    drop(owner);
    Ok(copied)
}

/// `(rebuild, (FORMAT, state, data))`: what `__reduce_ex__` returns for every zerohop object.
fn reduce_value<'py>(
    py: Python<'py>,
    rebuild: &str,
    state: Value,
    data: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let args = (wire::FORMAT, object_of(py, state)?, data).into_pyobject(py)?;
    let rebuild = py
        .import(intern!(py, "zerohop._zerohop"))?
        .getattr(rebuild)?;
    PyTuple::new(py, [rebuild, args.into_any()])
}

/// `Tensor.__reduce_ex__`.
pub fn reduce_tensor<'py>(
    tensor: &Bound<'py, PyTensor>,
    protocol: i32,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = tensor.py();
    let t = tensor.get();
    let stream = t.stream();
    let reduced = py
        .detach(|| wire::reduce_tensor(&t.view, t.is_copied, stream, protocol))
        .py()?;
    let data = data_object(py, reduced.data)?;
    reduce_value(py, "_rebuild_tensor", reduced.state, data)
}

/// `Table.__reduce_ex__`.
pub fn reduce_table<'py>(
    table: &Bound<'py, PyTable>,
    storage: &zerohop::soa::Table,
    stream: Stream,
    protocol: i32,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = table.py();
    let reduced = py
        .detach(|| wire::reduce_table(storage, stream, protocol))
        .py()?;
    let data = match reduced.data {
        // pyarrow pickles record batches with out-of-band buffers (protocol 5), and the
        // receiver's zerohop.from_arrow shares them again.
        Outgoing::ArrowBatch => py
            .import(intern!(py, "pyarrow"))
            .map_err(|_| {
                PyTypeError::new_err(
                    "pickling an Arrow-backed zerohop.Table needs pyarrow (pip install \
                     pyarrow), or table.to_soa() first (a copy) for the SoA form",
                )
            })?
            .call_method1(intern!(py, "record_batch"), (table,))?,
        other => data_object(py, other)?,
    };
    reduce_value(py, "_rebuild_table", reduced.state, data)
}

/// The received data: a handle dict as a value, anything else through NumPy, which reads
/// every buffer-protocol object (bytes, bytearray, memoryview, PickleBuffer, Ray's and Dask's
/// buffers).
fn incoming(data: &Bound<'_, PyAny>) -> PyResult<Incoming> {
    let py = data.py();
    if data.cast::<PyDict>().is_ok() {
        return Ok(Incoming::Shared(value_of(data, 0)?));
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
    Ok(Incoming::Bytes {
        buffer,
        writable: !readonly,
        in_band,
    })
}

fn incoming_if(needed: bool, data: &Bound<'_, PyAny>) -> PyResult<Option<Incoming>> {
    needed.then(|| incoming(data)).transpose()
}

fn report_copy<T>(py: Python<'_>, rebuilt: &Rebuilt<T>) -> PyResult<()> {
    match &rebuilt.copy_note {
        Some(note) => warn_copy(py, note),
        None => Ok(()),
    }
}

/// Rebuilds a `zerohop.Tensor` from `Tensor.__reduce_ex__`'s output: a view of `data`.
#[pyfunction]
fn _rebuild_tensor(
    py: Python<'_>,
    format: &Bound<'_, PyAny>,
    state: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    let parsed = TensorWire::parse(&value_of(format, 0)?, &value_of(state, 0)?).py()?;
    let data = incoming_if(parsed.needs_data(), data)?;
    let rebuilt = py.detach(|| parsed.rebuild(data)).py()?;
    report_copy(py, &rebuilt)?;
    Ok(match rebuilt.stream {
        Some(stream) => PyTensor::with_stream(rebuilt.value, rebuilt.is_copied, stream),
        None => PyTensor::new(rebuilt.value, rebuilt.is_copied),
    })
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
    let soa = match TableWire::parse(&value_of(format, 0)?, &value_of(state, 0)?).py()? {
        TableWire::Soa(soa) => soa,
        TableWire::Arrow => {
            let table = py
                .get_type::<PyTable>()
                .call_method1(intern!(py, "from_arrow"), (data,))?;
            return Ok(table.cast_into::<PyTable>()?.unbind());
        }
    };
    let data = incoming_if(soa.needs_data(), data)?;
    let rebuilt = py.detach(|| soa.rebuild(data)).py()?;
    report_copy(py, &rebuilt)?;
    Py::new(py, PyTable::from_table(rebuilt.value))
}

/// Whether objects pickle for another machine now: while any
/// `zerohop.pickling(across_machines="bytes")` block is open, on any thread.
#[pyfunction]
fn _pickling_across_machines() -> bool {
    wire::across_machines()
}

/// One open `zerohop.pickling(across_machines="bytes")` block: objects pickle for another
/// machine, on every thread, until every open block is closed (or collected).
#[pyclass(name = "_AcrossMachinesBlock", module = "zerohop._zerohop")]
struct PyAcrossMachinesBlock {
    block: Option<wire::AcrossMachines>,
}

#[pymethods]
impl PyAcrossMachinesBlock {
    #[new]
    fn new() -> Self {
        PyAcrossMachinesBlock {
            block: Some(wire::AcrossMachines::open()),
        }
    }

    /// Closes the block; closing it again changes nothing.
    fn close(&mut self) {
        self.block = None;
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_rebuild_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(_rebuild_table, m)?)?;
    m.add_function(wrap_pyfunction!(_pickling_across_machines, m)?)?;
    m.add_class::<PyAcrossMachinesBlock>()?;
    Ok(())
}
