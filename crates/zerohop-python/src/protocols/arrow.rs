//! The Arrow PyCapsule interface: capsules for consumers (pyarrow, polars, nanoarrow, …) and
//! imports from any producer that speaks it, host or device.
//!
//! Each capsule owns a boxed C struct; its destructor drops the box, which calls `release`
//! unless a consumer moved the struct out (leaving `release` NULL), so a capsule is consumed
//! at most once and never leaks.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

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
    import_device, import_host_batch, read_device_stream, schema_data_type, DeviceImport,
    FFI_ArrowDeviceArray, FFI_ArrowDeviceArrayStream,
};
use zerohop::DeviceKind;

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

/// The schema a capsule describes, as a data type and, for structs, a schema with metadata.
fn read_schema(capsule: &Bound<'_, PyAny>) -> PyResult<(DataType, Option<Schema>, String)> {
    let ptr = capsule_pointer::<FFI_ArrowSchema>(capsule, SCHEMA)?;
    // SAFETY: a live schema owned by the capsule, read (not moved) while the capsule lives.
    let schema = unsafe { &*ptr };
    if schema.release().is_none() {
        return Err(PyValueError::new_err(
            "the arrow_schema capsule was already consumed",
        ));
    }
    let (data_type, full) = schema_data_type(schema).py()?;
    Ok((data_type, full, schema.name().unwrap_or("").to_string()))
}

/// The type a consumer's `requested_schema` asks for (None: no request).
pub fn requested_type(requested: Option<&Bound<'_, PyAny>>) -> PyResult<Option<DataType>> {
    let Some(requested) = requested.filter(|r| !r.is_none()) else {
        return Ok(None);
    };
    Ok(Some(read_schema(requested)?.0))
}

/// `requested_schema` is best effort (the Arrow PyCapsule interface): host data is cast to the
/// requested type where arrow-rs does it without loss (int64 → int32 when every value fits,
/// string ↔ large string, dictionary encodings, …), which is a copy and reported as one;
/// anything else is handed over as it is, and the consumer sees the data's own schema.
pub fn cast_to_requested(
    py: Python<'_>,
    requested: Option<&Bound<'_, PyAny>>,
    array: ArrayRef,
) -> PyResult<ArrayRef> {
    let Some(wanted) = requested_type(requested)? else {
        return Ok(array);
    };
    if &wanted == array.data_type() || !arrow_cast::can_cast_types(array.data_type(), &wanted) {
        return Ok(array);
    }
    // safe: false makes a value that does not fit an error (safe: true would null it).
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    match arrow_cast::cast_with_options(&array, &wanted, &options) {
        Ok(cast) => {
            crate::base::errors::warn_copy(
                py,
                &format!(
                    "Arrow data cast from {} to the requested {wanted} (a copy)",
                    array.data_type()
                ),
            )?;
            Ok(cast)
        }
        Err(_) => Ok(array),
    }
}

/// [`cast_to_requested`] for a record batch, as the struct array it is exported as.
pub fn cast_batch_to_requested(
    py: Python<'_>,
    requested: Option<&Bound<'_, PyAny>>,
    batch: RecordBatch,
) -> PyResult<RecordBatch> {
    if requested_type(requested)?.is_none() {
        return Ok(batch);
    }
    let whole: ArrayRef = Arc::new(StructArray::from(batch.clone()));
    let cast = cast_to_requested(py, requested, whole.clone())?;
    if Arc::ptr_eq(&cast, &whole) {
        return Ok(batch);
    }
    let Some(fields) = cast.as_any().downcast_ref::<StructArray>() else {
        return Ok(batch);
    };
    Ok(RecordBatch::from(fields.clone()))
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

/// A host array on the device interface (device CPU, no event), for consumers that ask for
/// device capsules of host data.
pub fn host_device_capsules<'py>(
    py: Python<'py>,
    schema: Bound<'py, PyAny>,
    array: FFI_ArrowArray,
) -> PyResult<Bound<'py, PyTuple>> {
    let device_array = FFI_ArrowDeviceArray {
        array,
        device_id: -1,
        device_type: DeviceKind::Cpu as i32,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    };
    PyTuple::new(
        py,
        [
            schema,
            boxed_capsule(py, device_array, DEVICE_ARRAY)?.into_any(),
        ],
    )
}

/// What an import produced: host batches, or device columns.
pub enum Imported {
    /// Host record batches, and the columns arrow-rs had to copy because the producer's
    /// buffers were under-aligned (empty when everything is shared).
    Host {
        batches: Vec<RecordBatch>,
        schema: Arc<Schema>,
        realigned: Vec<String>,
    },
    Device(DeviceImport),
}

/// Moves a host array out of the C interface into a record batch (checked and validated in
/// `zerohop::arrow::import_host_batch`), noting the columns arrow-rs had to realign.
fn host_batch(
    array: FFI_ArrowArray,
    data_type: DataType,
    full_schema: Option<&Schema>,
    name: &str,
    realigned: &mut Vec<String>,
) -> PyResult<RecordBatch> {
    // SAFETY: `array` came out of a producer's capsule or stream, which vouches for its
    // buffers under the C data interface; structure and contents are checked inside.
    let import = unsafe { import_host_batch(array, &data_type, full_schema, name) }.py()?;
    realigned.extend(import.realigned);
    Ok(import.batch)
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
    let mut realigned = Vec::new();
    if obj.hasattr(intern!(py, "__arrow_c_stream__"))? {
        let capsule = obj.call_method0(intern!(py, "__arrow_c_stream__"))?;
        let ptr = capsule_pointer::<FFI_ArrowArrayStream>(&capsule, STREAM)?;
        // SAFETY: a live stream owned by the capsule; moving it out leaves the capsule's copy
        // released, as the protocol requires.
        let mut stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr) };
        return read_host_stream(&mut stream, &mut realigned).map(|(batches, schema)| {
            Imported::Host {
                batches,
                schema,
                realigned,
            }
        });
    }
    if obj.hasattr(intern!(py, "__arrow_c_array__"))? {
        let pair = obj.call_method0(intern!(py, "__arrow_c_array__"))?;
        let (schema_capsule, array_capsule): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            pair.extract()?;
        let (data_type, full, name) = read_schema(&schema_capsule)?;
        let ptr = capsule_pointer::<FFI_ArrowArray>(&array_capsule, ARRAY)?;
        // SAFETY: a live array owned by the capsule, moved out (the capsule's copy is left
        // released).
        let array = unsafe { FFI_ArrowArray::from_raw(ptr) };
        let batch = host_batch(array, data_type, full.as_ref(), &name, &mut realigned)?;
        let schema = batch.schema();
        return Ok(Imported::Host {
            batches: vec![batch],
            schema,
            realigned,
        });
    }
    if obj.hasattr(intern!(py, "__arrow_c_device_array__"))? {
        let pair = obj.call_method0(intern!(py, "__arrow_c_device_array__"))?;
        let (schema_capsule, array_capsule): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            pair.extract()?;
        let (data_type, full, name) = read_schema(&schema_capsule)?;
        let ptr = capsule_pointer::<FFI_ArrowDeviceArray>(&array_capsule, DEVICE_ARRAY)?;
        // SAFETY: a live device array owned by the capsule, moved out; the capsule keeps an
        // empty (released) struct.
        let device_array = unsafe { std::ptr::replace(ptr, FFI_ArrowDeviceArray::empty()) };
        return device_or_host(device_array, data_type, full, &name, &schema_capsule);
    }
    if obj.hasattr(intern!(py, "__arrow_c_device_stream__"))? {
        let capsule = obj.call_method0(intern!(py, "__arrow_c_device_stream__"))?;
        let ptr = capsule_pointer::<FFI_ArrowDeviceArrayStream>(&capsule, DEVICE_STREAM)?;
        // SAFETY: as for device arrays.
        let stream = unsafe { std::ptr::replace(ptr, FFI_ArrowDeviceArrayStream::empty()) };
        let (schema, mut arrays) = read_device_stream(stream).py()?;
        if arrays.len() != 1 {
            return Err(PyValueError::new_err(format!(
                "the device stream of {} holds {} batches; zerohop imports device streams of \
                 exactly one batch",
                describe(obj),
                arrays.len()
            )));
        }
        let (data_type, full) = schema_data_type(&schema).py()?;
        let schema_capsule = boxed_capsule(py, schema, SCHEMA)?.into_any();
        return device_or_host(arrays.remove(0), data_type, full, "", &schema_capsule);
    }
    Err(PyTypeError::new_err(format!(
        "{} does not speak the Arrow PyCapsule interface (no __arrow_c_stream__, \
         __arrow_c_array__ or device variants)",
        describe(obj)
    )))
}

fn device_or_host(
    device_array: FFI_ArrowDeviceArray,
    data_type: DataType,
    full: Option<Schema>,
    name: &str,
    schema_capsule: &Bound<'_, PyAny>,
) -> PyResult<Imported> {
    if device_array.device_type == DeviceKind::Cpu as i32 {
        let mut realigned = Vec::new();
        let FFI_ArrowDeviceArray { array, .. } = device_array;
        let batch = host_batch(array, data_type, full.as_ref(), name, &mut realigned)?;
        let schema = batch.schema();
        return Ok(Imported::Host {
            batches: vec![batch],
            schema,
            realigned,
        });
    }
    let ptr = capsule_pointer::<FFI_ArrowSchema>(schema_capsule, SCHEMA)?;
    // SAFETY: the schema capsule is alive for this call.
    let imported = import_device(device_array, unsafe { &*ptr }).py()?;
    Ok(Imported::Device(imported))
}

/// Reads every batch of a host stream, checking each array before arrow-rs sees it.
fn read_host_stream(
    stream: &mut FFI_ArrowArrayStream,
    realigned: &mut Vec<String>,
) -> PyResult<(Vec<RecordBatch>, Arc<Schema>)> {
    let (Some(get_schema), Some(get_next), Some(_)) =
        (stream.get_schema(), stream.get_next(), stream.release())
    else {
        return Err(PyValueError::new_err(
            "the arrow_array_stream capsule was already consumed",
        ));
    };
    let mut ffi_schema = FFI_ArrowSchema::empty();
    // SAFETY: the producer's callback on its live stream with an empty out struct.
    let code = unsafe { get_schema(stream, &mut ffi_schema) };
    if code != 0 {
        return Err(stream_error(stream, "schema", code));
    }
    let (data_type, full) = schema_data_type(&ffi_schema).py()?;
    let name = ffi_schema.name().unwrap_or("").to_string();
    let mut batches = Vec::new();
    loop {
        let mut array = FFI_ArrowArray::empty();
        // SAFETY: as above.
        let code = unsafe { get_next(stream, &mut array) };
        if code != 0 {
            return Err(stream_error(stream, "batch", code));
        }
        if array.is_released() {
            break;
        }
        batches.push(host_batch(
            array,
            data_type.clone(),
            full.as_ref(),
            &name,
            realigned,
        )?);
    }
    let schema = match (batches.first(), full) {
        (Some(b), _) => b.schema(),
        (None, Some(s)) if matches!(data_type, DataType::Struct(_)) => Arc::new(s),
        (None, _) => Arc::new(Schema::new(vec![Field::new(
            if name.is_empty() { "values" } else { &name },
            data_type,
            true,
        )])),
    };
    Ok((batches, schema))
}

fn stream_error(stream: &mut FFI_ArrowArrayStream, what: &str, code: i32) -> PyErr {
    let message = stream
        .get_last_error()
        // SAFETY: the producer's callback on its live stream.
        .map(|f| unsafe { f(stream) })
        .filter(|p| !p.is_null())
        // SAFETY: a NUL-terminated string owned by the producer until its next call.
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    PyValueError::new_err(format!(
        "Arrow stream {what}: the producer returned error {code}: {message}"
    ))
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
