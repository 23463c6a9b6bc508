//! The Arrow PyCapsule interface: capsules for consumers (pyarrow, polars, nanoarrow, …) and
//! imports from any producer that speaks it, host or device.
//!
//! Each capsule owns a boxed C struct; its destructor drops the box, which calls `release`
//! unless a consumer moved the struct out (leaving `release` NULL), so a capsule is consumed
//! at most once and never leaks.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use zerohop::arrow::arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use zerohop::arrow::arrow_array::ffi_stream::FFI_ArrowArrayStream;
use zerohop::arrow::arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchIterator, StructArray};
use zerohop::arrow::arrow_schema::{DataType, Field, Schema};
use zerohop::arrow::{
    import_device_array, import_device_stream, import_host_array, read_host_stream,
    schema_data_type, FFI_ArrowDeviceArray, FFI_ArrowDeviceArrayStream, Imported,
};

use crate::base::errors::IntoPyResult;

pub const SCHEMA: &CStr = c"arrow_schema";
pub const ARRAY: &CStr = c"arrow_array";
pub const STREAM: &CStr = c"arrow_array_stream";
pub const DEVICE_ARRAY: &CStr = c"arrow_device_array";
pub const DEVICE_STREAM: &CStr = c"arrow_device_array_stream";

/// # Safety
/// Called by CPython with a capsule made by [`boxed_capsule::<T>`] about to be destroyed.
unsafe extern "C" fn destroy_boxed<T>(capsule: *mut ffi::PyObject) {
    // SAFETY: the capsule holds a `Box<T>` under its own name (see `boxed_capsule`); dropping
    // the box runs T's Drop, which calls `release` unless a consumer moved the struct out.
    unsafe {
        let ptr = ffi::PyCapsule_GetPointer(capsule, ffi::PyCapsule_GetName(capsule));
        if ptr.is_null() {
            ffi::PyErr_Clear();
        } else {
            drop(Box::from_raw(ptr.cast::<T>()));
        }
    }
}

/// A capsule named `name` owning `value` on the heap.
pub fn boxed_capsule<'py, T: 'static>(
    py: Python<'py>,
    value: T,
    name: &'static CStr,
) -> PyResult<Bound<'py, PyCapsule>> {
    let ptr = Box::into_raw(Box::new(value));
    // SAFETY: `ptr` is a fresh box; the destructor frees it exactly once.
    let made = unsafe {
        PyCapsule::new_with_pointer_and_destructor(
            py,
            NonNull::new_unchecked(ptr).cast::<c_void>(),
            name,
            Some(destroy_boxed::<T>),
        )
    };
    if made.is_err() {
        // SAFETY: no capsule took the box.
        drop(unsafe { Box::from_raw(ptr) });
    }
    made
}

/// The struct inside a producer's capsule, checked by name.
fn capsule_pointer<T>(capsule: &Bound<'_, PyAny>, name: &CStr) -> PyResult<*mut T> {
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a PyCapsule named {name:?}, got {}",
            capsule.get_type()
        ))
    })?;
    // SAFETY: PyCapsule_GetPointer checks the name and raises on a mismatch.
    let ptr = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    if ptr.is_null() {
        return Err(PyErr::take(capsule.py())
            .unwrap_or_else(|| PyValueError::new_err(format!("capsule {name:?} is NULL"))));
    }
    Ok(ptr.cast())
}

/// The data type a schema capsule describes.
fn read_schema(capsule: &Bound<'_, PyAny>) -> PyResult<DataType> {
    let ptr = capsule_pointer::<FFI_ArrowSchema>(capsule, SCHEMA)?;
    // SAFETY: a live schema owned by the capsule, read (not moved) while the capsule lives.
    let schema = unsafe { &*ptr };
    if schema.release().is_none() {
        return Err(PyValueError::new_err(
            "the arrow_schema capsule was already consumed",
        ));
    }
    Ok(schema_data_type(schema).py()?.0)
}

/// The type a consumer's `requested_schema` asks for (None: no request).
pub fn requested_type(requested: Option<&Bound<'_, PyAny>>) -> PyResult<Option<DataType>> {
    let Some(requested) = requested.filter(|r| !r.is_none()) else {
        return Ok(None);
    };
    Ok(Some(read_schema(requested)?))
}

/// Capsules for a record batch, as one struct array.
pub fn batch_capsules<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyTuple>> {
    let schema = FFI_ArrowSchema::try_from(batch.schema().as_ref())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let array = FFI_ArrowArray::new(&StructArray::from(batch.clone()).to_data());
    PyTuple::new(
        py,
        [
            boxed_capsule(py, schema, SCHEMA)?,
            boxed_capsule(py, array, ARRAY)?,
        ],
    )
}

pub fn schema_capsule<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyCapsule>> {
    let ffi =
        FFI_ArrowSchema::try_from(schema).map_err(|e| PyValueError::new_err(e.to_string()))?;
    boxed_capsule(py, ffi, SCHEMA)
}

pub fn field_schema_capsule<'py>(
    py: Python<'py>,
    field: &Field,
) -> PyResult<Bound<'py, PyCapsule>> {
    let ffi = FFI_ArrowSchema::try_from(field).map_err(|e| PyValueError::new_err(e.to_string()))?;
    boxed_capsule(py, ffi, SCHEMA)
}

/// Capsules for one array named by `field`.
pub fn array_capsules<'py>(
    py: Python<'py>,
    field: &Field,
    array: &ArrayRef,
) -> PyResult<Bound<'py, PyTuple>> {
    let ffi = FFI_ArrowArray::new(&array.to_data());
    PyTuple::new(
        py,
        [
            field_schema_capsule(py, field)?,
            boxed_capsule(py, ffi, ARRAY)?,
        ],
    )
}

/// A stream of `batches` (at least one), in order: chunks stay chunks.
pub fn stream_capsule<'py>(
    py: Python<'py>,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let schema = batches
        .first()
        .map(RecordBatch::schema)
        .ok_or_else(|| PyValueError::new_err("an Arrow stream needs a schema"))?;
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    boxed_capsule(py, FFI_ArrowArrayStream::new(Box::new(reader)), STREAM)
}

fn describe(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// Imports from whatever Arrow protocol `obj` speaks: a stream (tables, data frames), an
/// array (record batches, arrays), or the device versions of both.
pub fn import(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Imported> {
    if obj.hasattr(intern!(py, "__arrow_c_stream__"))? {
        let capsule = obj.call_method0(intern!(py, "__arrow_c_stream__"))?;
        let ptr = capsule_pointer::<FFI_ArrowArrayStream>(&capsule, STREAM)?;
        // SAFETY: a live stream owned by the capsule; moving it out leaves the capsule's copy
        // released, as the protocol requires.
        let mut stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr) };
        return read_host_stream(&mut stream).py();
    }
    let device = !obj.hasattr(intern!(py, "__arrow_c_array__"))?;
    if !device || obj.hasattr(intern!(py, "__arrow_c_device_array__"))? {
        let method = if device {
            intern!(py, "__arrow_c_device_array__")
        } else {
            intern!(py, "__arrow_c_array__")
        };
        let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            obj.call_method0(method)?.extract()?;
        let schema_ptr = capsule_pointer::<FFI_ArrowSchema>(&schema, SCHEMA)?;
        // SAFETY: a live schema owned by the capsule, read (not moved) while it lives.
        let schema_ref = unsafe { &*schema_ptr };
        if !device {
            let ptr = capsule_pointer::<FFI_ArrowArray>(&array, ARRAY)?;
            // SAFETY: a live array owned by the capsule, moved out (the capsule's copy is
            // left released); the producer vouches for its buffers.
            return unsafe { import_host_array(FFI_ArrowArray::from_raw(ptr), schema_ref) }.py();
        }
        let ptr = capsule_pointer::<FFI_ArrowDeviceArray>(&array, DEVICE_ARRAY)?;
        // SAFETY: a live device array owned by the capsule, moved out; the capsule keeps an
        // empty (released) struct.
        let array = unsafe { std::ptr::replace(ptr, FFI_ArrowDeviceArray::empty()) };
        return import_device_array(array, schema_ref).py();
    }
    if obj.hasattr(intern!(py, "__arrow_c_device_stream__"))? {
        let capsule = obj.call_method0(intern!(py, "__arrow_c_device_stream__"))?;
        let ptr = capsule_pointer::<FFI_ArrowDeviceArrayStream>(&capsule, DEVICE_STREAM)?;
        // SAFETY: as for device arrays.
        let stream = unsafe { std::ptr::replace(ptr, FFI_ArrowDeviceArrayStream::empty()) };
        return import_device_stream(stream, &describe(obj)).py();
    }
    Err(PyTypeError::new_err(format!(
        "{} does not speak the Arrow PyCapsule interface (no __arrow_c_stream__, \
         __arrow_c_array__ or device variants)",
        describe(obj)
    )))
}

/// The device dunders take `**kwargs`, but only keywords whose default is None: any other
/// value is a feature this producer does not have.
pub fn refuse_unknown_kwargs(kwargs: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<()> {
    for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        if !value.is_none() {
            return Err(pyo3::exceptions::PyNotImplementedError::new_err(format!(
                "zerohop does not support the keyword {key}={value}"
            )));
        }
    }
    Ok(())
}
