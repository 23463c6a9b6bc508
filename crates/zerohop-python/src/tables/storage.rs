//! What a `zerohop.Table` holds, and the Arrow side of it: SoA tables (one aligned buffer),
//! Arrow record batches (columns in the producer's buffers, shared), and device columns
//! (CUDA tensors, shared).

use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use zerohop::arrow::arrow_array::ffi::FFI_ArrowArray;
use zerohop::arrow::arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray};
use zerohop::arrow::arrow_schema::{DataType, Field, Schema};
use zerohop::arrow::{export_device, tensor_to_array, FFI_ArrowDeviceArrayStream, SyncEvent};
use zerohop::soa::ColumnTable;
use zerohop::{DeviceKind, TensorView};

use crate::base::errors::IntoPyResult;
use crate::base::tensor::PyTensor;
use crate::protocols::arrow::{
    array_capsules, batch_capsules, boxed_capsule, cast_batch_to_requested, cast_to_requested,
    host_device_capsules, schema_capsule, stream_capsule, Imported, DEVICE_ARRAY, DEVICE_STREAM,
};

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

/// The Arrow faces of a table (Python capsules), for every kind.
pub trait ArrowFace {
    fn record_batch(&self, copy: bool) -> PyResult<(RecordBatch, Vec<String>)>;
    fn schema_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
    fn array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>>;
    fn stream_capsule<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
        chunks: Option<&[RecordBatch]>,
    ) -> PyResult<Bound<'py, PyAny>>;
    fn device_array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>>;
    fn device_stream_capsule<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>>;
}

impl ArrowFace for Storage {
    /// This table as a record batch: shared for Arrow tables; for SoA tables, plain columns
    /// are shared and vectors/matrices transposed only with `copy` (see `to_record_batch`).
    fn record_batch(&self, copy: bool) -> PyResult<(RecordBatch, Vec<String>)> {
        match self {
            Storage::Arrow(b) => Ok((b.clone(), vec![])),
            Storage::Soa(t) => {
                let export = t.to_record_batch(copy).map_err(|e| {
                    PyBufferError::new_err(format!(
                        "{e}. Call table.to_arrow(copy=True) for an Arrow copy of this table"
                    ))
                })?;
                Ok((export.batch, export.copied_columns))
            }
            Storage::Columns(_) => Err(PyBufferError::new_err(
                "this table lives on a CUDA device; the Arrow C data interface is for host \
                 memory (use __arrow_c_device_array__ / __arrow_c_device_stream__)",
            )),
        }
    }

    fn schema_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let schema = match self {
            Storage::Columns(c) => Schema::new(
                c.columns()
                    .iter()
                    .map(|(name, v)| device_field(name, v))
                    .collect::<PyResult<Vec<_>>>()?,
            ),
            other => other.record_batch(false)?.0.schema().as_ref().clone(),
        };
        Ok(schema_capsule(py, &schema)?.into_any())
    }

    fn array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (batch, _) = self.record_batch(false)?;
        let batch = cast_batch_to_requested(py, requested, batch)?;
        batch_capsules(py, &batch)
    }

    /// The table as a stream; `chunks` (the batches an import arrived in) stay separate.
    fn stream_capsule<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
        chunks: Option<&[RecordBatch]>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let batches = match chunks {
            Some(chunks) if !chunks.is_empty() => chunks.to_vec(),
            _ => vec![self.record_batch(false)?.0],
        };
        let batches = batches
            .into_iter()
            .map(|b| cast_batch_to_requested(py, requested, b))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(stream_capsule(py, batches)?.into_any())
    }

    fn device_array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        match self {
            Storage::Columns(c) => {
                let (array, schema) = device_export(c.columns(), true, c.stream().0)?;
                // Device data is not cast on the host: the consumer gets its own schema.
                PyTuple::new(
                    py,
                    [
                        boxed_capsule(py, schema, crate::protocols::arrow::SCHEMA)?.into_any(),
                        boxed_capsule(py, array, DEVICE_ARRAY)?.into_any(),
                    ],
                )
            }
            _ => {
                let (batch, _) = self.record_batch(false)?;
                let batch = cast_batch_to_requested(py, requested, batch)?;
                let array = FFI_ArrowArray::new(&StructArray::from(batch.clone()).to_data());
                host_device_capsules(py, schema_capsule(py, &batch.schema())?.into_any(), array)
            }
        }
    }

    fn device_stream_capsule<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data_type, array) = match self {
            Storage::Columns(c) => {
                let (array, schema) = device_export(c.columns(), true, c.stream().0)?;
                let data_type = DataType::try_from(&schema)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                (data_type, array)
            }
            _ => {
                let (batch, _) = self.record_batch(false)?;
                let batch = cast_batch_to_requested(py, requested, batch)?;
                let array = FFI_ArrowArray::new(&StructArray::from(batch.clone()).to_data());
                (
                    struct_type(&batch),
                    zerohop::arrow::FFI_ArrowDeviceArray {
                        array,
                        device_id: -1,
                        device_type: DeviceKind::Cpu as i32,
                        sync_event: std::ptr::null_mut(),
                        reserved: [0; 3],
                    },
                )
            }
        };
        let stream = FFI_ArrowDeviceArrayStream::single(data_type, array);
        Ok(boxed_capsule(py, stream, DEVICE_STREAM)?.into_any())
    }
}

fn struct_type(batch: &RecordBatch) -> DataType {
    DataType::Struct(batch.schema().fields().clone())
}

fn device_field(name: &str, view: &TensorView) -> PyResult<Field> {
    let mut data_type = zerohop::arrow::arrow_type_of(view.dtype()).py()?;
    for &k in view.shape().iter().skip(1).rev() {
        data_type =
            DataType::FixedSizeList(Arc::new(Field::new("item", data_type, false)), k as i32);
    }
    Ok(Field::new(name, data_type, false))
}

/// Exports device columns with an event recorded on their producing stream.
fn device_export(
    columns: &[(String, TensorView)],
    as_batch: bool,
    stream: usize,
) -> PyResult<(
    zerohop::arrow::FFI_ArrowDeviceArray,
    zerohop::arrow::arrow_array::ffi::FFI_ArrowSchema,
)> {
    let device = columns
        .first()
        .map(|(_, v)| v.device())
        .ok_or_else(|| PyValueError::new_err("a table without columns has no device array"))?;
    let sync = if device.kind == DeviceKind::Cuda {
        let event = zerohop::cuda::Event::record(device.id, zerohop::Stream(stream)).py()?;
        Some(SyncEvent {
            pointer: event.handle_ptr(),
            owner: Arc::new(event),
        })
    } else {
        None
    };
    export_device(columns, as_batch, sync).py()
}

/// Device capsules for one tensor (a plain array, not a batch).
pub fn tensor_device_capsules<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let view = tensor.view.clone();
    if view.device().is_host_accessible() {
        let exported = tensor_to_array(&view, "tensor", false).py()?;
        let array = cast_to_requested(py, requested, exported.array)?;
        let field = Field::new("", array.data_type().clone(), false);
        let array = FFI_ArrowArray::new(&array.to_data());
        return host_device_capsules(
            py,
            crate::protocols::arrow::field_schema_capsule(py, &field)?.into_any(),
            array,
        );
    }
    let (array, schema) = device_export(&[(String::new(), view)], false, tensor.stream())?;
    PyTuple::new(
        py,
        [
            boxed_capsule(py, schema, crate::protocols::arrow::SCHEMA)?.into_any(),
            boxed_capsule(py, array, DEVICE_ARRAY)?.into_any(),
        ],
    )
}

fn tensor_field(view: &TensorView) -> PyResult<Field> {
    device_field("", view)
}

/// Host capsules for one tensor: (n,) → primitive, (n, K…) → FixedSizeList.
pub fn tensor_capsules<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
    requested: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let exported = tensor_to_array(&tensor.view, "tensor", false).py()?;
    let array = cast_to_requested(py, requested, exported.array)?;
    let field = Field::new("", array.data_type().clone(), false);
    array_capsules(py, &field, &array)
}

pub fn tensor_schema_capsule<'py>(
    py: Python<'py>,
    tensor: &PyTensor,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(crate::protocols::arrow::field_schema_capsule(py, &tensor_field(&tensor.view)?)?.into_any())
}

/// What an import becomes: the table's storage, the columns that were copied, and, when the
/// data arrived in several chunks (concatenated for tensors only with `copy`), those chunks,
/// so that a re-export streams them as they came.
pub struct FromImport {
    pub storage: Storage,
    pub copied: Vec<String>,
    pub chunks: Vec<RecordBatch>,
}

/// The storage for an import: one batch (or several, concatenated only with `copy`), or
/// device columns ordered after the producer's event.
pub fn storage_from_import(py: Python<'_>, imported: Imported, copy: bool) -> PyResult<FromImport> {
    match imported {
        Imported::Host {
            batches,
            schema,
            realigned,
        } => {
            let batch = match batches.len() {
                0 => RecordBatch::new_empty(schema),
                1 => batches[0].clone(),
                _ if copy => arrow_select::concat::concat_batches(&schema, &batches)
                    .map_err(|e| PyValueError::new_err(format!("concatenating batches: {e}")))?,
                n => {
                    return Err(PyBufferError::new_err(format!(
                        "the data arrives in {n} chunks, and one tensor per column needs one \
                         contiguous chunk: rechunk first (polars: df.rechunk(); pyarrow: \
                         table.combine_chunks()) or pass copy=True to concatenate"
                    )))
                }
            };
            let mut copied = realigned;
            let chunks = if batches.len() > 1 {
                copied.push("(all: chunks concatenated)".into());
                batches
            } else {
                Vec::new()
            };
            Ok(FromImport {
                storage: Storage::Arrow(batch),
                copied,
                chunks,
            })
        }
        Imported::Device(import) => {
            // Imports are ordered on the legacy default stream, as DLPack imports are.
            let legacy = zerohop::cuda::LEGACY_STREAM;
            if import.device.kind == DeviceKind::Cuda {
                // SAFETY: the producer's event handle, alive while the columns hold its array.
                unsafe {
                    zerohop::cuda::wait_for_event(import.device.id, legacy, import.sync_event)
                }
                .py()?;
            } else if !import.sync_event.is_null() {
                return Err(PyBufferError::new_err(format!(
                    "a sync event on {}: zerohop synchronises CUDA only",
                    import.device
                )));
            }
            let _ = py;
            Ok(FromImport {
                storage: Storage::Columns(ColumnTable::new(import.columns, legacy).py()?),
                copied: vec![],
                chunks: vec![],
            })
        }
    }
}

/// A table sharing the memory of `columns` ({name: tensor}): host tensors become Arrow
/// columns, CUDA tensors device columns. Nothing is copied; strided tensors are refused.
pub fn storage_from_tensors(py: Python<'_>, columns: &Bound<'_, PyAny>) -> PyResult<Storage> {
    let pairs = crate::base::args::named_items(columns)?;
    let from_dlpack = py.import("zerohop")?.getattr("from_dlpack")?;
    let mut views = Vec::new();
    let mut stream = 1usize;
    for (name, obj) in pairs {
        // zerohop tensors keep their producing stream through from_dlpack.
        let tensor = from_dlpack.call1((obj,))?;
        let tensor = tensor.cast::<PyTensor>()?.get();
        if views.is_empty() {
            stream = tensor.stream();
        }
        views.push((name, tensor.view.clone()));
    }
    let on_device = views
        .first()
        .is_some_and(|(_, v)| v.device().kind == DeviceKind::Cuda);
    if on_device {
        return Ok(Storage::Columns(
            ColumnTable::new(views, zerohop::Stream(stream)).py()?,
        ));
    }
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, view) in &views {
        let exported = tensor_to_array(view, &format!("column {name:?}"), false).py()?;
        fields.push(Field::new(name, exported.array.data_type().clone(), false));
        arrays.push(exported.array);
    }
    let rows = arrays.first().map_or(0, |a| a.len());
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| PyValueError::new_err(format!("columns of unequal length: {e}")))?;
    Ok(Storage::Arrow(batch))
}
