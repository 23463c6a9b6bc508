//! What an import through any Arrow C interface produces (host batches or device columns),
//! read from the structs a producer hands over: a host stream, a host array, a device array
//! (which may hold host data) or a device stream of one batch.

use std::ffi::CStr;
use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};

use super::{
    import_device, import_host_batch, read_device_stream, schema_data_type, DeviceImport,
    FFI_ArrowDeviceArray, FFI_ArrowDeviceArrayStream,
};
use crate::device::DeviceKind;
use crate::error::{Error, Result};

/// What an import produced.
pub enum Imported {
    /// Host record batches (the producer's chunks), their schema, and the columns arrow-rs
    /// had to copy because the producer's buffers were under-aligned (empty when every
    /// buffer is shared).
    Host {
        batches: Vec<RecordBatch>,
        schema: Arc<Schema>,
        realigned: Vec<String>,
    },
    Device(DeviceImport),
}

fn one_batch(batch: super::HostImport) -> Imported {
    let schema = batch.batch.schema();
    Imported::Host {
        batches: vec![batch.batch],
        schema,
        realigned: batch.realigned,
    }
}

/// Imports a host array described by `schema`.
///
/// # Safety
/// As [`import_host_batch`]: `array` is a live C data interface array whose buffers are as
/// long as its lengths, offsets and type require.
pub unsafe fn import_host_array(
    array: FFI_ArrowArray,
    schema: &FFI_ArrowSchema,
) -> Result<Imported> {
    if schema.release().is_none() {
        return Err(Error::Arrow {
            what: "Arrow import".into(),
            reason: "the arrow_schema was already consumed".into(),
        });
    }
    let (data_type, full) = schema_data_type(schema)?;
    let name = schema.name().unwrap_or("");
    // SAFETY: the caller's promise.
    Ok(one_batch(unsafe {
        import_host_batch(array, &data_type, full.as_ref(), name)
    }?))
}

/// Imports a device array: host data (device CPU) as a batch, device data as columns.
pub fn import_device_array(
    array: FFI_ArrowDeviceArray,
    schema: &FFI_ArrowSchema,
) -> Result<Imported> {
    if array.device_type == DeviceKind::Cpu as i32 {
        let FFI_ArrowDeviceArray { array, .. } = array;
        // SAFETY: a device array on the CPU is a host array under the C data interface,
        // which its producer vouches for.
        return unsafe { import_host_array(array, schema) };
    }
    Ok(Imported::Device(import_device(array, schema)?))
}

/// Imports a device stream, which must hold exactly one batch (`what` names the producer).
pub fn import_device_stream(stream: FFI_ArrowDeviceArrayStream, what: &str) -> Result<Imported> {
    let (schema, mut arrays) = read_device_stream(stream)?;
    if arrays.len() != 1 {
        return Err(Error::Arrow {
            what: "Arrow device stream".into(),
            reason: format!(
                "the device stream of {what} holds {} batches; zerohop imports device streams \
                 of exactly one batch",
                arrays.len()
            ),
        });
    }
    import_device_array(arrays.remove(0), &schema)
}

fn stream_error(stream: &mut FFI_ArrowArrayStream, what: &str, code: i32) -> Error {
    let message = stream
        .get_last_error()
        // SAFETY: the producer's callback on its live stream.
        .map(|f| unsafe { f(stream) })
        .filter(|p| !p.is_null())
        // SAFETY: a NUL-terminated string owned by the producer until its next call.
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    Error::Arrow {
        what: format!("Arrow stream {what}"),
        reason: format!("the producer returned error {code}: {message}"),
    }
}

/// Reads every batch of a host stream, checking each array before arrow-rs sees it; the
/// batches stay the producer's chunks.
pub fn read_host_stream(stream: &mut FFI_ArrowArrayStream) -> Result<Imported> {
    let (Some(get_schema), Some(get_next), Some(_)) =
        (stream.get_schema(), stream.get_next(), stream.release())
    else {
        return Err(Error::Arrow {
            what: "Arrow stream".into(),
            reason: "the arrow_array_stream was already consumed".into(),
        });
    };
    let mut ffi_schema = FFI_ArrowSchema::empty();
    // SAFETY: the producer's callback on its live stream with an empty out struct.
    let code = unsafe { get_schema(stream, &mut ffi_schema) };
    if code != 0 {
        return Err(stream_error(stream, "schema", code));
    }
    let (data_type, full) = schema_data_type(&ffi_schema)?;
    let name = ffi_schema.name().unwrap_or("").to_string();
    let (mut batches, mut realigned) = (Vec::new(), Vec::new());
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
        // SAFETY: an array the producer's stream handed over, vouched for by it.
        let import = unsafe { import_host_batch(array, &data_type, full.as_ref(), &name) }?;
        realigned.extend(import.realigned);
        batches.push(import.batch);
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
    Ok(Imported::Host {
        batches,
        schema,
        realigned,
    })
}
