//! Python objects as the core's structured values (`zerohop::value::Value`) and back: how
//! pickled states, schemas and tensor specs cross into the core, which reads them.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use zerohop::value::{Value, MAX_DEPTH};

use zerohop_pyo3::args::vec_for;

/// A Python object as a state value; containers deeper than `MAX_DEPTH` are not opened.
pub fn value_of(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    value_with(obj, depth, &|_| Ok(None))
}

/// [`value_of`], with `leaf` giving the value of objects that are no plain value (`None`:
/// described as [`Value::Other`]).
pub fn value_with(
    obj: &Bound<'_, PyAny>,
    depth: usize,
    leaf: &dyn Fn(&Bound<'_, PyAny>) -> PyResult<Option<Value>>,
) -> PyResult<Value> {
    // `is_instance_of` first: a failed `cast` builds an error object, which a spec of a few
    // dozen names would pay for at every call.
    if obj.is_instance_of::<PyString>() {
        return Ok(match obj.cast::<PyString>()?.to_str() {
            Ok(s) => Value::Str(s.to_owned()),
            Err(_) => Value::Other("a str that is not valid UTF-8".into()),
        });
    }
    if obj.is_none() {
        return Ok(Value::None);
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.is_truthy()?));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(n) = obj.extract::<i128>() {
            return Ok(Value::Int(n));
        }
    } else if obj.is_instance_of::<PyBytes>() {
        return Ok(Value::Bytes(obj.cast::<PyBytes>()?.as_bytes().to_vec()));
    } else if depth < MAX_DEPTH {
        if obj.is_instance_of::<PyDict>() {
            // A snapshot: `leaf` runs Python code that may change the dict, and PyO3's
            // iterator over a dict that changes panics.
            let snapshot = obj.cast::<PyDict>()?.items();
            let mut items = vec_for(snapshot.len(), "a dict in the state")?;
            for pair in snapshot.iter() {
                let (k, v) = pair.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
                if let Ok(k) = k.extract::<String>() {
                    items.push((k, value_with(&v, depth + 1, leaf)?));
                }
            }
            return Ok(Value::Dict(items));
        }
        // The items a list or tuple (or a subclass) stores, never its `__len__` or
        // `__iter__`, which a subclass can make up.
        if obj.is_instance_of::<PyList>() {
            let list = obj.cast::<PyList>()?;
            return sequence(list.len(), list.iter(), depth, leaf);
        }
        if obj.is_instance_of::<PyTuple>() {
            let tuple = obj.cast::<PyTuple>()?;
            return sequence(tuple.len(), tuple.iter(), depth, leaf);
        }
    }
    if let Some(value) = leaf(obj)? {
        return Ok(value);
    }
    let kind = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Ok(Value::Other(format!("an object of type {kind}")))
}

/// A list of `len` items, read from `items` (fewer when a list shrinks meanwhile).
fn sequence<'py>(
    len: usize,
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
    leaf: &dyn Fn(&Bound<'_, PyAny>) -> PyResult<Option<Value>>,
) -> PyResult<Value> {
    let mut out = vec_for(len, "a sequence in the state")?;
    for item in items {
        out.push(value_with(&item, depth + 1, leaf)?);
    }
    Ok(Value::List(out))
}

/// A state value as the Python object that travels (sequences as tuples).
pub fn object_of<'py>(py: Python<'py>, value: Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None | Value::Other(_) => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::Int(n) => n.into_pyobject(py)?.into_any(),
        Value::Str(s) => PyString::new(py, &s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, &b).into_any(),
        Value::List(items) => PyTuple::new(
            py,
            items
                .into_iter()
                .map(|v| object_of(py, v))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Value::Dict(items) => {
            let d = PyDict::new(py);
            for (k, v) in items {
                d.set_item(k, object_of(py, v)?)?;
            }
            d.into_any()
        }
    })
}
