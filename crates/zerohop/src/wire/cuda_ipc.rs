//! CUDA memory in a pickle: the `cuda_ipc` entry of a state (a memory handle, an offset and an
//! interprocess event, never the bytes), and the mapping a receiver on the same machine makes
//! of it, ordered after the producer's stream.
//!
//! The producer must keep the memory alive until the consumer has unpickled it (a handle does
//! not hold the allocation). It keeps the events of its most recent exports, which consumers
//! open; older ones are destroyed. A state whose `event` is None was exported from a stream
//! with no work left: the consumer has nothing to wait for.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::buffer::Buffer;
use crate::cuda::ipc::{self, ExportedEvent, IpcHandle, HANDLE_BYTES};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::Stream;
use crate::value::{DictBuilder, Fields, Value};

/// Events of the most recent exports, kept until consumers are likely to have opened them.
const KEPT_EVENTS: usize = 4096;
static EXPORTED: Mutex<VecDeque<ExportedEvent>> = Mutex::new(VecDeque::new());

/// The `cuda_ipc` entry for `len` bytes of device memory from `start`, exported after the
/// work queued on `stream`.
///
/// # Safety
/// `start..start + len` must be live memory of CUDA `device` that stays allocated while the
/// caller's object lives, produced on `stream`.
pub unsafe fn export(device: i32, start: usize, len: usize, stream: Stream) -> Result<Value> {
    // SAFETY: guaranteed by the caller.
    let (handle, event) = unsafe { ipc::export(device, start, len, stream) }?;
    if let Some(event) = event {
        let mut kept = EXPORTED.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT_EVENTS {
            kept.pop_front();
        }
        kept.push_back(event);
    }
    let event = handle
        .event
        .map_or(Value::None, |e| Value::Bytes(e.to_vec()));
    Ok(DictBuilder::new()
        .set("memory", Value::Bytes(handle.memory.to_vec()))
        .set("event", event)
        .set("offset", Value::count(handle.offset))
        .set("bytes", Value::count(handle.bytes))
        .set("device_uuid", Value::Bytes(handle.device_uuid.to_vec()))
        .set("pid", Value::int(handle.pid))
        .set("boot_id", Value::str(handle.boot_id))
        .build())
}

/// The handle in a state's `cuda_ipc` entry, every field checked.
pub fn handle_of(fields: &Fields<'_>) -> Result<IpcHandle> {
    Ok(IpcHandle {
        memory: fields.bytes::<HANDLE_BYTES>("memory")?,
        event: match fields.required("event")? {
            Value::None => None,
            _ => Some(fields.bytes::<HANDLE_BYTES>("event")?),
        },
        offset: fields.int("offset", "a byte offset")?,
        bytes: fields.int("bytes", "a byte count")?,
        device_uuid: fields.bytes::<16>("device_uuid")?,
        pid: fields.int("pid", "a process id")?,
        boot_id: fields.str("boot_id", "a string")?.to_owned(),
    })
}

/// The producer's device memory `handle` names, mapped: a buffer of `nbytes` bytes, ordered
/// after the producer's stream on the legacy stream.
pub fn import(handle: &IpcHandle, nbytes: usize, what: &str) -> Result<Buffer> {
    if handle.bytes != nbytes {
        return Err(Error::Wire(format!(
            "pickled CUDA {what}: the handle maps {} bytes, the layout needs {nbytes}",
            handle.bytes
        )));
    }
    let mapped = ipc::import(handle, crate::cuda::LEGACY_STREAM)?;
    let device = Device::cuda(mapped.device());
    let ptr = NonNull::new(mapped.ptr() as *mut u8)
        .ok_or_else(|| Error::Wire(format!("pickled CUDA {what}: the mapping is NULL")))?;
    // SAFETY: `nbytes` bytes from `ptr` are the mapped device memory, which `mapped` keeps
    // open (and the buffer keeps `mapped`).
    Ok(unsafe { Buffer::from_foreign(ptr, nbytes, device, Arc::new(mapped)) })
}
