//! A [`Table`] of any storage through the Arrow interfaces, both ways: the record batch, the
//! schema, the device array and device stream it exports (cast to a consumer's requested
//! type where that is lossless, the copy reported), and the table an Arrow import or a set of
//! tensors becomes. The faces (Python's PyCapsules, a C caller) only wrap these structs.

use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray};
use arrow_schema::{DataType, Field, Schema};

use super::{ColumnTable, Table};
use crate::arrow::{
    arrow_type_of, export_device, tensor_to_array, FFI_ArrowDeviceArray,
    FFI_ArrowDeviceArrayStream, Imported, SyncEvent,
};
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::memory::Stream;
use crate::tensor::TensorView;

fn ffi_error(e: impl std::fmt::Display) -> Error {
    Error::Export(e.to_string())
}

/// `array` cast to `wanted` where arrow-rs does it without loss (int64 → int32 when every
/// value fits, string ↔ large string, dictionary encodings, …): a copy, which the note
/// reports. Anything else is handed over as it is (`requested_schema` is best effort in the
/// Arrow PyCapsule interface), and the consumer sees the data's own type. Without the
/// `arrow-compute` feature every request is answered that way.
#[cfg(feature = "arrow-compute")]
pub fn cast_to_requested(array: ArrayRef, wanted: Option<&DataType>) -> (ArrayRef, Option<String>) {
    let Some(wanted) = wanted else {
        return (array, None);
    };
    if wanted == array.data_type() || !arrow_cast::can_cast_types(array.data_type(), wanted) {
        return (array, None);
    }
    // safe: false makes a value that does not fit an error (safe: true would null it).
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    match arrow_cast::cast_with_options(&array, wanted, &options) {
        Ok(cast) => {
            let note = format!(
                "Arrow data cast from {} to the requested {wanted} (a copy)",
                array.data_type()
            );
            (cast, Some(note))
        }
        Err(_) => (array, None),
    }
}

#[cfg(not(feature = "arrow-compute"))]
pub fn cast_to_requested(array: ArrayRef, _: Option<&DataType>) -> (ArrayRef, Option<String>) {
    (array, None)
}

/// [`cast_to_requested`] for a record batch, as the struct array it is exported as.
pub fn cast_batch_to_requested(
    batch: RecordBatch,
    wanted: Option<&DataType>,
) -> (RecordBatch, Option<String>) {
    if wanted.is_none() {
        return (batch, None);
    }
    let whole: ArrayRef = Arc::new(StructArray::from(batch.clone()));
    let (cast, note) = cast_to_requested(whole, wanted);
    match cast.as_any().downcast_ref::<StructArray>() {
        Some(fields) if note.is_some() => (RecordBatch::from(fields.clone()), note),
        _ => (batch, None),
    }
}

/// A host array on the device interface (device CPU, no event), for consumers that ask for
/// device structs of host data.
pub fn host_device_array(array: FFI_ArrowArray) -> FFI_ArrowDeviceArray {
    FFI_ArrowDeviceArray {
        array,
        device_id: -1,
        device_type: DeviceKind::Cpu as i32,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    }
}

/// The field a device tensor exports as: its dtype, in FixedSizeLists for each axis after
/// the first.
pub fn tensor_field(name: &str, view: &TensorView) -> Result<Field> {
    let mut data_type = arrow_type_of(view.dtype())?;
    for &k in view.shape().iter().skip(1).rev() {
        data_type =
            DataType::FixedSizeList(Arc::new(Field::new("item", data_type, false)), k as i32);
    }
    Ok(Field::new(name, data_type, false))
}

/// Exports device columns with an event recorded on `stream`, their producing stream.
fn device_export(
    columns: &[(String, TensorView)],
    as_batch: bool,
    stream: Stream,
) -> Result<(FFI_ArrowDeviceArray, FFI_ArrowSchema)> {
    let device = columns
        .first()
        .map(|(_, v)| v.device())
        .ok_or_else(|| Error::Export("a table without columns has no device array".into()))?;
    let sync = if device.kind == DeviceKind::Cuda {
        Some(event_on(device.id, stream)?)
    } else {
        None
    };
    export_device(columns, as_batch, sync)
}

#[cfg(feature = "cuda")]
fn event_on(device: i32, stream: Stream) -> Result<SyncEvent> {
    let event = crate::cuda::Event::record(device, stream)?;
    Ok(SyncEvent {
        pointer: event.handle_ptr(),
        owner: Arc::new(event),
    })
}

#[cfg(not(feature = "cuda"))]
fn event_on(device: i32, _: Stream) -> Result<SyncEvent> {
    Err(Error::without_cuda(format!("Arrow data on cuda:{device}")))
}

/// Orders the legacy stream after a CUDA producer's event; the stream imports are ordered on.
#[cfg(feature = "cuda")]
fn after_producer(device: i32, event: *mut std::ffi::c_void) -> Result<Stream> {
    let legacy = crate::cuda::LEGACY_STREAM;
    // SAFETY: the producer's event handle, alive while the imported columns hold its array.
    unsafe { crate::cuda::wait_for_event(device, legacy, event) }?;
    Ok(legacy)
}

#[cfg(not(feature = "cuda"))]
fn after_producer(device: i32, _: *mut std::ffi::c_void) -> Result<Stream> {
    Err(Error::without_cuda(format!("Arrow data on cuda:{device}")))
}

/// A host tensor as one Arrow array ((n,) → primitive, (n, K…) → FixedSizeList) and its
/// unnamed field, cast as `wanted` asks.
pub fn tensor_host_array(
    view: &TensorView,
    wanted: Option<&DataType>,
) -> Result<(ArrayRef, Field, Option<String>)> {
    let exported = tensor_to_array(view, "tensor", false)?;
    let (array, note) = cast_to_requested(exported.array, wanted);
    let field = Field::new("", array.data_type().clone(), false);
    Ok((array, field, note))
}

/// A tensor on the device interface: host tensors as a CPU device array (cast as `wanted`
/// asks), device tensors with an event recorded on `stream`.
pub fn tensor_device_array(
    view: &TensorView,
    stream: Stream,
    wanted: Option<&DataType>,
) -> Result<(FFI_ArrowDeviceArray, FFI_ArrowSchema, Option<String>)> {
    if view.device().is_host_accessible() {
        let (array, field, note) = tensor_host_array(view, wanted)?;
        let schema = FFI_ArrowSchema::try_from(&field).map_err(ffi_error)?;
        let array = host_device_array(FFI_ArrowArray::new(&array.to_data()));
        return Ok((array, schema, note));
    }
    let (array, schema) = device_export(&[(String::new(), view.clone())], false, stream)?;
    Ok((array, schema, None))
}

/// What an import becomes: the table, the columns that were copied, and, when the data
/// arrived in several chunks (concatenated only with `copy`), those chunks, so that a
/// re-export streams them as they came.
pub struct FromImport {
    pub table: Table,
    pub copied: Vec<String>,
    pub chunks: Vec<RecordBatch>,
}

#[cfg(feature = "arrow-compute")]
fn concatenated(schema: &Arc<Schema>, batches: &[RecordBatch]) -> Result<RecordBatch> {
    arrow_select::concat::concat_batches(schema, batches).map_err(|e| Error::Arrow {
        what: "Arrow import".into(),
        reason: format!("concatenating batches: {e}"),
    })
}

#[cfg(not(feature = "arrow-compute"))]
fn concatenated(_: &Arc<Schema>, batches: &[RecordBatch]) -> Result<RecordBatch> {
    Err(Error::Arrow {
        what: "Arrow import".into(),
        reason: format!(
            "joining {} chunks needs zerohop's arrow-compute feature",
            batches.len()
        ),
    })
}

impl Table {
    /// This table as a record batch: shared for Arrow tables; for SoA tables, plain columns
    /// are shared and vectors/matrices transposed only with `copy` (the columns copied are
    /// listed). Device columns have no host batch.
    pub fn record_batch(&self, copy: bool) -> Result<(RecordBatch, Vec<String>)> {
        match self {
            Table::Arrow(b) => Ok((b.clone(), vec![])),
            Table::Soa(t) => {
                let export = t.to_record_batch(copy).map_err(|e| {
                    Error::Export(format!(
                        "{e}. Ask for a copy (table.to_arrow(copy=True) in Python) for an \
                         Arrow copy of this table"
                    ))
                })?;
                Ok((export.batch, export.copied_columns))
            }
            Table::Columns(_) => Err(Error::Export(
                "this table lives on a CUDA device; the Arrow C data interface is for host \
                 memory (use the C device data interface: __arrow_c_device_array__ / \
                 __arrow_c_device_stream__)"
                    .into(),
            )),
        }
    }

    /// The Arrow schema of this table (device columns included).
    pub fn arrow_schema(&self) -> Result<Schema> {
        match self {
            Table::Columns(c) => Ok(Schema::new(
                c.columns()
                    .iter()
                    .map(|(name, v)| tensor_field(name, v))
                    .collect::<Result<Vec<_>>>()?,
            )),
            other => Ok(other.record_batch(false)?.0.schema().as_ref().clone()),
        }
    }

    /// The table on the C device data interface: device columns with an event recorded on
    /// their stream (never cast: the consumer gets their own schema), host data as a CPU
    /// device array cast as `wanted` asks.
    pub fn device_array(
        &self,
        wanted: Option<&DataType>,
    ) -> Result<(FFI_ArrowDeviceArray, FFI_ArrowSchema, Option<String>)> {
        if let Table::Columns(c) = self {
            let (array, schema) = device_export(c.columns(), true, c.stream())?;
            return Ok((array, schema, None));
        }
        let (batch, note) = cast_batch_to_requested(self.record_batch(false)?.0, wanted);
        let schema = FFI_ArrowSchema::try_from(batch.schema().as_ref()).map_err(ffi_error)?;
        let array = FFI_ArrowArray::new(&StructArray::from(batch).to_data());
        Ok((host_device_array(array), schema, note))
    }

    /// The table as a device stream of one batch (see [`Table::device_array`]).
    pub fn device_stream(
        &self,
        wanted: Option<&DataType>,
    ) -> Result<(FFI_ArrowDeviceArrayStream, Option<String>)> {
        let (array, schema, note) = self.device_array(wanted)?;
        let data_type = DataType::try_from(&schema).map_err(ffi_error)?;
        Ok((FFI_ArrowDeviceArrayStream::single(data_type, array), note))
    }

    /// The batches of a host stream: `chunks` (the batches an import arrived in) as they
    /// came, else the table as one batch; each cast as `wanted` asks.
    pub fn stream_batches(
        &self,
        chunks: &[RecordBatch],
        wanted: Option<&DataType>,
    ) -> Result<(Vec<RecordBatch>, Option<String>)> {
        let batches = if chunks.is_empty() {
            vec![self.record_batch(false)?.0]
        } else {
            chunks.to_vec()
        };
        let mut note = None;
        let batches = batches
            .into_iter()
            .map(|b| {
                let (b, n) = cast_batch_to_requested(b, wanted);
                note = note.take().or(n);
                b
            })
            .collect();
        Ok((batches, note))
    }

    /// The table an import becomes: one batch (several concatenated only with `copy`), or
    /// device columns ordered after the producer's event on the legacy stream, as DLPack
    /// imports are.
    pub fn from_import(imported: Imported, copy: bool) -> Result<FromImport> {
        match imported {
            Imported::Host {
                batches,
                schema,
                realigned,
            } => {
                let batch = match batches.len() {
                    0 => RecordBatch::new_empty(schema),
                    1 => batches[0].clone(),
                    _ if copy => concatenated(&schema, &batches)?,
                    n => {
                        return Err(Error::NotContiguous(format!(
                            "the data arrives in {n} chunks, and one tensor per column needs \
                             one contiguous chunk: rechunk first (polars: df.rechunk(); \
                             pyarrow: table.combine_chunks()) or pass copy=True to concatenate"
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
                    table: Table::Arrow(batch),
                    copied,
                    chunks,
                })
            }
            Imported::Device(import) => {
                let stream = if import.device.kind == DeviceKind::Cuda {
                    after_producer(import.device.id, import.sync_event)?
                } else if import.sync_event.is_null() {
                    Stream::LEGACY
                } else {
                    return Err(Error::Arrow {
                        what: "Arrow device array".into(),
                        reason: format!(
                            "a sync event on {}: zerohop synchronises CUDA only",
                            import.device
                        ),
                    });
                };
                Ok(FromImport {
                    table: Table::Columns(ColumnTable::new(import.columns, stream)?),
                    copied: vec![],
                    chunks: vec![],
                })
            }
        }
    }

    /// A table sharing the memory of named tensors: host tensors become Arrow columns, CUDA
    /// tensors adopted columns ordered on `stream`. Nothing is copied; strided tensors are
    /// refused.
    pub fn from_views(views: Vec<(String, TensorView)>, stream: Stream) -> Result<Table> {
        let on_device = views
            .first()
            .is_some_and(|(_, v)| v.device().kind == DeviceKind::Cuda);
        if on_device {
            return Ok(Table::Columns(ColumnTable::new(views, stream)?));
        }
        let mut fields = Vec::new();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        for (name, view) in &views {
            let exported = tensor_to_array(view, &format!("column {name:?}"), false)?;
            fields.push(Field::new(name, exported.array.data_type().clone(), false));
            arrays.push(exported.array);
        }
        let rows = arrays.first().map_or(0, |a| a.len());
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| Error::Schema {
            what: "table columns".into(),
            reason: format!("columns of unequal length: {e}"),
        })?;
        Ok(Table::Arrow(batch))
    }
}
