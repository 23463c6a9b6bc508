//! `ArrowDeviceArrayStream`: the device interface's stream of record batches. zerohop's
//! streams hold a single batch; imports read any number.

use std::ffi::{c_char, c_int, c_void, CString};

use arrow_array::ffi::FFI_ArrowSchema;
use arrow_schema::DataType;

use super::device::FFI_ArrowDeviceArray;
use crate::error::{Error, Result};

/// `struct ArrowDeviceArrayStream` of the C device data interface.
#[repr(C)]
pub struct FFI_ArrowDeviceArrayStream {
    pub device_type: i32,
    pub get_schema: Option<unsafe extern "C" fn(*mut Self, *mut FFI_ArrowSchema) -> c_int>,
    pub get_next: Option<unsafe extern "C" fn(*mut Self, *mut FFI_ArrowDeviceArray) -> c_int>,
    pub get_last_error: Option<unsafe extern "C" fn(*mut Self) -> *const c_char>,
    pub release: Option<unsafe extern "C" fn(*mut Self)>,
    pub private_data: *mut c_void,
}

// SAFETY: the stream is moved between threads as a whole; the C interface forbids concurrent
// calls, and its private data (a schema type and one exported array) is Send.
unsafe impl Send for FFI_ArrowDeviceArrayStream {}

impl FFI_ArrowDeviceArrayStream {
    /// A released stream, for a producer to fill in.
    pub fn empty() -> Self {
        FFI_ArrowDeviceArrayStream {
            device_type: 0,
            get_schema: None,
            get_next: None,
            get_last_error: None,
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }

    /// A stream yielding `array` (of `data_type`) once, then the end.
    pub fn single(data_type: DataType, array: FFI_ArrowDeviceArray) -> Self {
        let private = Box::new(StreamState {
            data_type,
            pending: Some(array),
            last_error: None,
        });
        FFI_ArrowDeviceArrayStream {
            device_type: private.pending.as_ref().map_or(1, |a| a.device_type),
            get_schema: Some(stream_get_schema),
            get_next: Some(stream_get_next),
            get_last_error: Some(stream_last_error),
            release: Some(stream_release),
            private_data: Box::into_raw(private).cast(),
        }
    }
}

impl Drop for FFI_ArrowDeviceArrayStream {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: a live stream is released exactly once; release marks it released.
            unsafe { release(self) };
        }
    }
}

struct StreamState {
    data_type: DataType,
    pending: Option<FFI_ArrowDeviceArray>,
    last_error: Option<CString>,
}

/// # Safety
/// `stream` must be a live stream made by [`FFI_ArrowDeviceArrayStream::single`].
unsafe fn state<'a>(stream: *mut FFI_ArrowDeviceArrayStream) -> &'a mut StreamState {
    // SAFETY: per the contract, private_data is our boxed state.
    unsafe { &mut *(*stream).private_data.cast::<StreamState>() }
}

unsafe extern "C" fn stream_get_schema(
    stream: *mut FFI_ArrowDeviceArrayStream,
    out: *mut FFI_ArrowSchema,
) -> c_int {
    // SAFETY: the consumer calls this on our live stream with a writable out struct.
    let state = unsafe { state(stream) };
    match FFI_ArrowSchema::try_from(&state.data_type) {
        Ok(schema) => {
            // SAFETY: `out` is consumer-allocated, uninitialised or released: overwrite it.
            unsafe { std::ptr::write(out, schema) };
            0
        }
        Err(e) => {
            state.last_error = CString::new(e.to_string()).ok();
            22 // EINVAL
        }
    }
}

unsafe extern "C" fn stream_get_next(
    stream: *mut FFI_ArrowDeviceArrayStream,
    out: *mut FFI_ArrowDeviceArray,
) -> c_int {
    // SAFETY: as in `stream_get_schema`.
    let state = unsafe { state(stream) };
    let next = state
        .pending
        .take()
        .unwrap_or_else(FFI_ArrowDeviceArray::empty);
    // SAFETY: as in `stream_get_schema`; a released array marks the end of the stream.
    unsafe { std::ptr::write(out, next) };
    0
}

unsafe extern "C" fn stream_last_error(stream: *mut FFI_ArrowDeviceArrayStream) -> *const c_char {
    // SAFETY: as in `stream_get_schema`.
    let state = unsafe { state(stream) };
    state
        .last_error
        .as_ref()
        .map_or(std::ptr::null(), |e| e.as_ptr())
}

unsafe extern "C" fn stream_release(stream: *mut FFI_ArrowDeviceArrayStream) {
    if stream.is_null() {
        return;
    }
    // SAFETY: our live stream; the state box is freed exactly once, then marked released.
    unsafe {
        drop(Box::from_raw((*stream).private_data.cast::<StreamState>()));
        (*stream).private_data = std::ptr::null_mut();
        (*stream).release = None;
    }
}

/// Reads every batch of a foreign device stream: its schema, then arrays until a released
/// one. Errors carry the producer's message.
pub fn read_device_stream(
    mut stream: FFI_ArrowDeviceArrayStream,
) -> Result<(FFI_ArrowSchema, Vec<FFI_ArrowDeviceArray>)> {
    let failed = |stream: &mut FFI_ArrowDeviceArrayStream, what: &str, code: c_int| {
        let message = stream
            .get_last_error
            // SAFETY: the producer's callback on its own live stream.
            .map(|f| unsafe { f(stream) })
            .filter(|p| !p.is_null())
            // SAFETY: a NUL-terminated string the producer keeps until the next call.
            .map(|p| {
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        Error::Arrow {
            what: format!("Arrow device stream {what}"),
            reason: format!("the producer returned error {code}: {message}"),
        }
    };
    let (Some(get_schema), Some(get_next), Some(_)) =
        (stream.get_schema, stream.get_next, stream.release)
    else {
        return Err(Error::Arrow {
            what: "Arrow device stream".into(),
            reason: "is released or lacks callbacks".into(),
        });
    };
    let mut schema = FFI_ArrowSchema::empty();
    // SAFETY: the producer's callback with our live stream and an empty out struct.
    let code = unsafe { get_schema(&mut stream, &mut schema) };
    if code != 0 {
        return Err(failed(&mut stream, "schema", code));
    }
    let mut arrays = Vec::new();
    loop {
        let mut array = FFI_ArrowDeviceArray::empty();
        // SAFETY: as above.
        let code = unsafe { get_next(&mut stream, &mut array) };
        if code != 0 {
            return Err(failed(&mut stream, "batch", code));
        }
        if array.array.is_released() {
            break;
        }
        arrays.push(array);
        if arrays.len() > 1 << 20 {
            return Err(Error::Arrow {
                what: "Arrow device stream".into(),
                reason: "yields more than a million batches".into(),
            });
        }
    }
    Ok((schema, arrays))
}
