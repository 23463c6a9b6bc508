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
use zerohop::arrow::{
    export_device, tensor_to_array, FFI_ArrowDeviceArrayStream, ImportOptions, SyncEvent,
};
use zerohop::soa::{ColumnTable, MapOptions, MappedTensor, SoaTable, TensorMap};
use zerohop::{DeviceKind, TensorView};

use crate::base::errors::{to_py, IntoPyResult};
use crate::base::tensor::PyTensor;
use crate::protocols::arrow::{
    array_capsules, batch_capsules, boxed_capsule, cast_batch_to_requested, cast_to_requested,
    host_device_capsules, schema_capsule, stream_capsule, Imported, DEVICE_ARRAY, DEVICE_STREAM,
};

/// The memory behind a table.
#[derive(Clone)]
pub enum Storage {
    Soa(SoaTable),
    Arrow(RecordBatch),
    /// Named device tensors of equal length, and the stream their data is produced on.
    Device(ColumnTable),
}

impl Storage {
    pub fn kind(&self) -> &'static str {
        match self {
            Storage::Soa(_) => "soa",
            Storage::Arrow(_) => "arrow",
            Storage::Device(_) => "device",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Storage::Soa(t) => t.len(),
            Storage::Arrow(b) => b.num_rows(),
            Storage::Device(c) => c.len(),
        }
    }

    pub fn column_names(&self) -> Vec<String> {
        match self {
            Storage::Soa(t) => t
                .schema()
                .columns()
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            Storage::Arrow(b) => b
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            Storage::Device(c) => c.names().into_iter().map(str::to_owned).collect(),
        }
    }

    /// One column as a tensor; Arrow columns with nulls need `fill`, and Arrow booleans
    /// (bits, where tensors take a byte each) `allow_copy`: both are copies.
    pub fn column(
        &self,
        name: &str,
        fill: Option<f64>,
        allow_copy: bool,
    ) -> PyResult<(TensorView, bool)> {
        match self {
            Storage::Soa(t) => t.column_view(name).map(|v| (v, false)).py(),
            Storage::Arrow(b) => {
                let array = b.column_by_name(name).ok_or_else(|| {
                    to_py(zerohop::Error::NoSuchColumn {
                        name: name.to_owned(),
                        columns: self.column_names().join(", "),
                    })
                })?;
                let imported = zerohop::arrow::array_to_tensor(
                    &array.to_data(),
                    &format!("column {name:?}"),
                    ImportOptions { allow_copy, fill },
                )
                .py()?;
                Ok((imported.view, imported.copied))
            }
            Storage::Device(c) => Ok((c.column(name).py()?, false)),
        }
    }

    pub fn map(
        &self,
        map: &TensorMap,
        options: MapOptions,
        fill: Option<f64>,
    ) -> PyResult<Vec<MappedTensor>> {
        match self {
            Storage::Soa(t) => map.apply(t, options).py(),
            Storage::Arrow(b) => map
                .apply_arrow(
                    b,
                    options,
                    ImportOptions {
                        allow_copy: options.allow_copy,
                        fill,
                    },
                )
                .py(),
            Storage::Device(c) => c.map(map, options).py(),
        }
    }

    pub fn slice(&self, start: usize, stop: usize) -> PyResult<Storage> {
        let n = self.len();
        if start > stop || stop > n {
            return Err(PyValueError::new_err(format!(
                "rows {start}..{stop} are outside 0..{n}"
            )));
        }
        Ok(match self {
            Storage::Soa(t) => Storage::Soa(t.slice_rows(start, stop).py()?),
            Storage::Arrow(b) => Storage::Arrow(b.slice(start, stop - start)),
            Storage::Device(c) => Storage::Device(c.slice_rows(start, stop).py()?),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Storage::Soa(t) => t.describe(),
            Storage::Arrow(b) => {
                let mut out = format!("Arrow record batch, {} rows\n", b.num_rows());
                for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                    out += &format!(
                        "  {:<16} {:<28} nulls {:<6} {} bytes\n",
                        f.name(),
                        f.data_type().to_string(),
                        c.null_count(),
                        c.get_array_memory_size()
                    );
                }
                out
            }
            Storage::Device(c) => c.describe(),
        }
    }

    /// This table as a record batch: shared for Arrow tables; for SoA tables, plain columns
    /// are shared and vectors/matrices transposed only with `copy` (see `to_record_batch`).
    pub fn record_batch(&self, copy: bool) -> PyResult<(RecordBatch, Vec<String>)> {
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
            Storage::Device(_) => Err(PyBufferError::new_err(
                "this table lives on a CUDA device; the Arrow C data interface is for host \
                 memory (use __arrow_c_device_array__ / __arrow_c_device_stream__)",
            )),
        }
    }

    pub fn schema_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let schema = match self {
            Storage::Device(c) => Schema::new(
                c.columns()
                    .iter()
                    .map(|(name, v)| device_field(name, v))
                    .collect::<PyResult<Vec<_>>>()?,
            ),
            other => other.record_batch(false)?.0.schema().as_ref().clone(),
        };
        Ok(schema_capsule(py, &schema)?.into_any())
    }

    pub fn array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (batch, _) = self.record_batch(false)?;
        let batch = cast_batch_to_requested(py, requested, batch)?;
        batch_capsules(py, &batch)
    }

    /// The table as a stream; `chunks` (the batches an import arrived in) stay separate.
    pub fn stream_capsule<'py>(
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

    pub fn device_array_capsules<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        match self {
            Storage::Device(c) => {
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

    pub fn device_stream_capsule<'py>(
        &self,
        py: Python<'py>,
        requested: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (data_type, array) = match self {
            Storage::Device(c) => {
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
                storage: Storage::Device(ColumnTable::new(import.columns, legacy).py()?),
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
        return Ok(Storage::Device(
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
