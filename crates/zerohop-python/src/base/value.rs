//! Python objects as the core's structured values (`zerohop::value::Value`) and back: how
//! pickled states, schemas and tensor specs cross into the core, which reads them.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use zerohop::value::{Value, MAX_DEPTH};

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
            let d = obj.cast::<PyDict>()?;
            let mut items = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                if let Ok(k) = k.extract::<String>() {
                    items.push((k, value_with(&v, depth + 1, leaf)?));
                }
            }
            return Ok(Value::Dict(items));
        }
        if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
            let mut items = Vec::with_capacity(obj.len()?);
            for item in obj.try_iter()? {
                items.push(value_with(&item?, depth + 1, leaf)?);
            }
            return Ok(Value::List(items));
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
