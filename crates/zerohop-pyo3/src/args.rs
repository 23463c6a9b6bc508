//! Argument shapes that several Python entry points accept, read so that no Python object can
//! make the binding panic or abort: a sequence's `len()` is whatever a subclass says (2^40
//! makes a pre-sized `Vec` abort the process, and PyO3's `Vec<T>` extraction pre-sizes from
//! it), an iterator may never end, and a dict may change while it is read.

use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

/// At most this many names in a list of column or field names: far more than any table has,
/// and a bound on what an endless iterator can make the binding hold.
pub const MAX_NAMES: usize = 1 << 20;

/// At most this many numbers in a list of them (detections, sample indices): a bound on what
/// an endless iterator can make the binding hold, not on a real array.
pub const MAX_NUMBERS: usize = 1 << 28;

/// An empty vector with room for `n` items, or a `MemoryError` naming `what` and the bytes.
pub fn vec_for<T>(n: usize, what: &str) -> PyResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        PyMemoryError::new_err(format!(
            "{what}: no memory for {n} items ({} bytes)",
            n.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    Ok(v)
}

/// The items of `obj`, argument `name`, at most `max` of them: a list or tuple (or a subclass)
/// by the items it stores, whatever its `__len__` and `__iter__` say; any other iterable but
/// str and bytes by iteration, stopped past `max`.
pub fn items<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    max: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let too_many = || PyValueError::new_err(format!("{name} has more than {max} items"));
    if let Ok(list) = obj.cast::<PyList>() {
        // The list may change while it is read (a later item's conversion runs Python code):
        // the iterator re-reads its length at every step and never reads past the end.
        if list.len() > max {
            return Err(too_many());
        }
        let mut out = vec_for(list.len(), name)?;
        for item in list.iter() {
            if out.len() == max {
                return Err(too_many());
            }
            out.push(item);
        }
        return Ok(out);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        if tuple.len() > max {
            return Err(too_many());
        }
        let mut out = vec_for(tuple.len(), name)?;
        out.extend(tuple.iter());
        return Ok(out);
    }
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a sequence, not {}",
            type_name(obj)
        )));
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be a sequence, not {}", type_name(obj)))
    })?;
    let mut out = Vec::new();
    for item in iter {
        if out.len() == max {
            return Err(too_many());
        }
        out.try_reserve(1)
            .map_err(|_| PyMemoryError::new_err(format!("{name}: no memory for its items")))?;
        out.push(item?);
    }
    Ok(out)
}

/// [`items`], each converted to `T`; a conversion's error keeps its type and names the item.
pub fn extract_items<'py, T: FromPyObjectOwned<'py>>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    max: usize,
) -> PyResult<Vec<T>> {
    let items = items(obj, name, max)?;
    let mut out = vec_for(items.len(), name)?;
    for (i, item) in items.iter().enumerate() {
        let value = item.extract::<T>().map_err(|e| {
            let (py, e) = (obj.py(), e.into());
            PyErr::from_type(e.get_type(py), format!("{name}[{i}]: {}", e.value(py)))
        })?;
        out.push(value);
    }
    Ok(out)
}

/// [`extract_items`] of an optional argument (None: absent).
pub fn extract_optional<'py, T: FromPyObjectOwned<'py>>(
    obj: Option<&Bound<'py, PyAny>>,
    name: &str,
    max: usize,
) -> PyResult<Option<Vec<T>>> {
    obj.filter(|o| !o.is_none())
        .map(|o| extract_items(o, name, max))
        .transpose()
}

/// `{name: array}` or `[(name, array)]`, as (name, array) pairs in order. The dict is read
/// from a snapshot of its items, so a dict that changes meanwhile cannot break the read.
pub fn named_items<'py>(columns: &Bound<'py, PyAny>) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let pairs = match columns.cast::<PyDict>() {
        Ok(d) => items(d.items().as_any(), "columns", MAX_NAMES)?,
        Err(_) => items(columns, "columns", MAX_NAMES)?,
    };
    let mut out = vec_for(pairs.len(), "columns")?;
    for pair in pairs {
        out.push(pair.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "columns must be a dict of arrays or (name, array) pairs, got an item of type {}",
                type_name(&pair)
            ))
        })?);
    }
    Ok(out)
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// An int argument `name` that must fit `usize` (a count, a size, a stream handle): a
/// TypeError naming it for anything but an int, a ValueError naming it and the value for a
/// negative or too large one. PyO3's own extraction says neither.
pub fn count(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
    if !obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<usize>().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be an int from 0 to {}, got {obj}",
            usize::MAX
        ))
    })
}

/// A str argument `name`: a TypeError naming it and what it `accepts` for anything else.
pub fn text(obj: &Bound<'_, PyAny>, name: &str, accepts: &str) -> PyResult<String> {
    match obj.cast::<PyString>() {
        Ok(s) => Ok(s.to_string()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{name} must be {accepts}, got {}",
            type_name(obj)
        ))),
    }
}

/// `rows`: a row count.
pub fn rows(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    count(obj, "rows")
}

/// `alignment`: bytes, a power of two (checked by the core).
pub fn alignment(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    count(obj, "alignment")
}

/// `stream`: a CUDA stream handle (1 legacy, 2 per-thread, or a `cudaStream_t`).
pub fn stream_handle(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    count(obj, "stream")
}

/// `name`: a column's name.
pub fn column_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    text(obj, "name", "a column name (str)")
}

/// `framework`: the consumer's name.
pub fn framework(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    text(
        obj,
        "framework",
        "'torch', 'jax', 'numpy', 'tensorflow' or 'zerohop'",
    )
}

/// `device`: where memory lives.
pub fn device(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    text(
        obj,
        "device",
        "a device name such as 'cpu', 'cuda:0' or 'cuda_host'",
    )
}
