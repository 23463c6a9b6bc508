//! Import through `__array_interface__` and `__cuda_array_interface__`: this file only reads
//! the dict's values; `zerohop::array_interface` checks them.

use std::sync::Arc;

use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerohop::array_interface::{parse, Flavor, InterfaceFields, InterfaceLayout};
use zerohop::tensor::MAX_NDIM;
use zerohop::{Device, TensorView};

use crate::base::errors::IntoPyResult;
use crate::base::owner::PyOwner;
use crate::base::tensor::PyTensor;
use zerohop_pyo3::args::extract_items;

/// The value of `key`, or None when it is absent or None.
fn optional<'py>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(dict.get_item(key)?.filter(|v| !v.is_none()))
}

fn extract<'py, T: FromPyObjectOwned<'py>>(
    value: &Bound<'py, PyAny>,
    flavor: Flavor,
    key: &str,
    expected: &str,
) -> PyResult<T> {
    value
        .extract()
        .map_err(|_| invalid(value, flavor, key, expected))
}

fn invalid(value: &Bound<'_, PyAny>, flavor: Flavor, key: &str, expected: &str) -> PyErr {
    PyValueError::new_err(format!(
        "invalid {} {key}: expected {expected}, got {}",
        flavor.attribute(),
        value
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "an unprintable object".into())
    ))
}

/// A shape or strides, read item by item: a tuple's `len()` can say anything. One item past
/// the core's limit is read, so that the core refuses it naming the limit.
fn ints(value: &Bound<'_, PyAny>, flavor: Flavor, key: &str) -> PyResult<Vec<i64>> {
    extract_items(value, key, MAX_NDIM + 1)
        .map_err(|_| invalid(value, flavor, key, "a tuple of integers"))
}

/// Reads the interface dict of `obj` into plain values.
fn read_fields(obj: &Bound<'_, PyAny>, flavor: Flavor) -> PyResult<InterfaceFields> {
    let name = flavor.attribute();
    let dict = obj.getattr(name)?;
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a dict")))?;
    let required = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        dict.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("{name} lacks {key:?}")))
    };
    Ok(InterfaceFields {
        version: extract(&required("version")?, flavor, "version", "an integer")?,
        shape: ints(&required("shape")?, flavor, "shape")?,
        typestr: extract(&required("typestr")?, flavor, "typestr", "a string")?,
        data: match optional(dict, "data")? {
            None => None,
            Some(d) => Some(extract(&d, flavor, "data", "(address, read-only flag)")?),
        },
        strides: optional(dict, "strides")?
            .map(|s| ints(&s, flavor, "strides"))
            .transpose()?,
        has_mask: optional(dict, "mask")?.is_some(),
        offset: optional(dict, "offset")?
            .map(|o| extract(&o, flavor, "offset", "an integer"))
            .transpose()?,
        stream: optional(dict, "stream")?
            .map(|s| extract(&s, flavor, "stream", "an integer"))
            .transpose()?,
    })
}

/// The checked layout of `obj`'s interface dict.
pub fn read_layout(obj: &Bound<'_, PyAny>, flavor: Flavor) -> PyResult<InterfaceLayout> {
    parse(&read_fields(obj, flavor)?, flavor).py()
}

/// A view of `layout` on `device` that keeps `obj` alive.
pub fn wrap(
    obj: &Bound<'_, PyAny>,
    layout: InterfaceLayout,
    device: Device,
) -> PyResult<TensorView> {
    let owner: zerohop::Owner = Arc::new(PyOwner::new(obj.clone().unbind()));
    // SAFETY: the producer promises that the memory its interface describes stays valid while
    // the object lives, and `owner` keeps the object alive; the extent is validated inside.
    unsafe {
        TensorView::from_raw_parts(
            layout.address as *mut u8,
            layout.dtype,
            layout.shape,
            layout.strides,
            device,
            owner,
            layout.readonly,
        )
    }
    .py()
}

/// Imports a host object that offers `__array_interface__` (and no DLPack) without a copy,
/// keeping it alive; a read-only array stays read-only.
#[pyfunction]
pub fn from_array_interface(obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let layout = read_layout(obj, Flavor::Host)?;
    let view = wrap(obj, layout, Device::CPU)?;
    Ok(PyTensor::new(view, false))
}
