//! What a `zerohop.Table` holds, and its Arrow faces as PyCapsules. The tables, batches and
//! device structs are the core's (`zerohop::soa::Table`, `soa::arrow_faces`); here they are
//! wrapped in capsules and their copies reported.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use zerohop::soa::{tensor_device_array, tensor_field, tensor_host_array};
use zerohop::Stream;

use crate::base::errors::{warn_copy, IntoPyResult};
use crate::base::tensor::PyTensor;
use crate::protocols::arrow::{
    array_capsules, batch_capsules, boxed_capsule, field_schema_capsule, requested_type,
    schema_capsule, stream_capsule, DEVICE_ARRAY, DEVICE_STREAM, SCHEMA,
};
use crate::protocols::dlpack_import::from_dlpack;

/// The memory behind a `zerohop.Table`: the core's table (one SoA buffer, Arrow record batch
/// or adopted device columns), which holds every rule; what is here converts for Python.
pub use zerohop::soa::Table as Storage;

/// The kind's public name: Python has called adopted CUDA columns "device" tables.
pub fn kind_name(storage: &Storage) -> &'static str {
    match storage.kind() {
        "columns" => "device",
        other => other,
    }
}

/// Reports the copy a cast to a consumer's requested type made.
fn report(py: Python<'_>, note: Option<String>) -> PyResult<()> {
    note.map_or(Ok(()), |note| warn_copy(py, &note))
}

pub fn table_schema_capsule<'py>(
    py: Python<'py>,
    storage: &Storage,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(schema_capsule(py, &storage.arrow_schema().py()?)?.into_any())
}

pub fn table_array_capsules<'py>(
    py: Python<'py>,
    storage: &Storage,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (batch, _) = storage.record_batch(false).py()?;
    let wanted = requested_type(requested)?;
    let (batch, note) = zerohop::soa::cast_batch_to_requested(batch, wanted.as_ref());
    report(py, note)?;
    batch_capsules(py, &batch)
}

/// The table as a stream; `chunks` (the batches an import arrived in) stay separate.
pub fn table_stream_capsule<'py>(
    py: Python<'py>,
    storage: &Storage,
    requested: Option<&Bound<'py, PyAny>>,
    chunks: &[zerohop::arrow::arrow_array::RecordBatch],
) -> PyResult<Bound<'py, PyAny>> {
    let wanted = requested_type(requested)?;
    let (batches, note) = storage.stream_batches(chunks, wanted.as_ref()).py()?;
    report(py, note)?;
    Ok(stream_capsule(py, batches)?.into_any())
}

fn device_pair<'py>(
    py: Python<'py>,
    exported: (
        zerohop::arrow::FFI_ArrowDeviceArray,
        zerohop::arrow::arrow_array::ffi::FFI_ArrowSchema,
        Option<String>,
    ),
) -> PyResult<Bound<'py, PyTuple>> {
    let (array, schema, note) = exported;
    report(py, note)?;
    PyTuple::new(
        py,
        [
            boxed_capsule(py, schema, SCHEMA)?.into_any(),
            boxed_capsule(py, array, DEVICE_ARRAY)?.into_any(),
        ],
    )
}

pub fn table_device_array_capsules<'py>(
    py: Python<'py>,
    storage: &Storage,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let wanted = requested_type(requested)?;
    device_pair(py, storage.device_array(wanted.as_ref()).py()?)
}

pub fn table_device_stream_capsule<'py>(
    py: Python<'py>,
    storage: &Storage,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let wanted = requested_type(requested)?;
    let (stream, note) = storage.device_stream(wanted.as_ref()).py()?;
    report(py, note)?;
    Ok(boxed_capsule(py, stream, DEVICE_STREAM)?.into_any())
}

/// Device capsules for one tensor (a plain array, not a batch).
pub fn tensor_device_capsules<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let wanted = requested_type(requested)?;
    let stream = tensor.stream();
    device_pair(
        py,
        tensor_device_array(&tensor.view, stream, wanted.as_ref()).py()?,
    )
}

/// Host capsules for one tensor: (n,) → primitive, (n, K…) → FixedSizeList.
pub fn tensor_capsules<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let wanted = requested_type(requested)?;
    let (array, field, note) = tensor_host_array(&tensor.view, wanted.as_ref()).py()?;
    report(py, note)?;
    array_capsules(py, &field, &array)
}

pub fn tensor_schema_capsule<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
) -> PyResult<Bound<'py, PyAny>> {
    let field = tensor_field("", &tensor.view).py()?;
    Ok(field_schema_capsule(py, &field)?.into_any())
}

/// A table sharing the memory of `columns` ({name: tensor}), each taken as `from_dlpack`
/// takes it (zerohop tensors keep their producing stream).
pub fn storage_from_tensors(py: Python<'_>, columns: &Bound<'_, PyAny>) -> PyResult<Storage> {
    let mut views = Vec::new();
    let mut stream = Stream::LEGACY;
    for (name, obj) in zerohop_pyo3::args::named_items(columns)? {
        let tensor = from_dlpack(py, &obj, None, None)?;
        if views.is_empty() {
            stream = tensor.stream();
        }
        views.push((name, tensor.view.clone()));
    }
    Storage::from_views(views, stream).py()
}
