//! CUDA IPC: device memory handed to another process on the same machine without a copy, and
//! an interprocess event that orders the consumer after the producer's stream.
//!
//! A handle names a whole allocation (`cuIpcGetMemHandle` on its base), so a tensor inside a
//! pool chunk travels as the chunk's handle and an offset. Memory from stream-ordered pools
//! (`cuMemAllocAsync`) has no such handle; exporting it is refused. The producer must keep the
//! memory (and the event) alive until the consumer has opened them: a handle does not hold
//! the allocation, and opening one whose producer freed the memory or exited fails cleanly.
//!
//! When the producer's stream has no work left at export, the handle carries no event: the
//! data is complete, so there is nothing to wait for, and both sides skip the interprocess
//! event's calls (creating, recording and naming it; opening, waiting on and destroying it).

use cudarc::driver::{result, sys};

use super::{bind, device_count, driver_error, stream_handle};
use crate::error::{Error, Result};
use crate::memory::Stream;

/// Bytes of a CUDA IPC memory or event handle.
pub const HANDLE_BYTES: usize = 64;

/// Whether `bytes` at `offset` lie inside an allocation of `size` bytes (no overflow).
pub fn range_fits(offset: usize, bytes: usize, size: usize) -> bool {
    offset.checked_add(bytes).is_some_and(|end| end <= size)
}

fn refused(reason: impl Into<String>) -> Error {
    Error::Resource {
        what: "CUDA IPC".into(),
        reason: reason.into(),
    }
}

/// Refuses a handle made on another machine (or before a reboot of this one), before the
/// driver is asked anything about it.
pub fn check_machine(boot_id: &str) -> Result<()> {
    let here = crate::memory::machine_boot_id().unwrap_or_default();
    if boot_id != here {
        return Err(refused(format!(
            "the handle was made on another machine (or before a reboot): boot id {here:?} \
             here, {boot_id:?} in the handle; CUDA IPC works between processes of one machine \
             only: across machines, send a host copy of the data instead"
        )));
    }
    Ok(())
}

/// What another process needs to map `bytes` at `offset` into an allocation of a device,
/// after waiting on `event`. Plain data: it pickles as bytes and integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpcHandle {
    pub memory: [u8; HANDLE_BYTES],
    /// The producer's interprocess event; `None` when its stream had finished at export.
    pub event: Option<[u8; HANDLE_BYTES]>,
    pub offset: usize,
    pub bytes: usize,
    /// The device's UUID: ordinals differ between processes (CUDA_VISIBLE_DEVICES).
    pub device_uuid: [u8; 16],
    /// The exporting process, which cannot open its own handles.
    pub pid: u32,
    /// The boot id of the machine that made it (empty where it cannot be read): a handle used
    /// on another machine is refused by name, not by a driver error about the handle.
    pub boot_id: String,
}

/// The producer's side of an export: the interprocess event, destroyed on drop. Keep it (and
/// the memory) alive until the consumer has opened the handle.
pub struct ExportedEvent {
    device: i32,
    event: sys::CUevent,
}

// SAFETY: a CUevent is a driver handle usable from any thread once its context is bound;
// Drop binds the device's primary context first.
unsafe impl Send for ExportedEvent {}
// SAFETY: shared references expose nothing.
unsafe impl Sync for ExportedEvent {}

impl Drop for ExportedEvent {
    fn drop(&mut self) {
        if bind(self.device).is_ok() {
            // SAFETY: created in `export`, destroyed once; a consumer's opened copy is its own.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event).result() };
        }
    }
}

fn device_uuid(device: i32) -> Result<[u8; 16]> {
    let dev = result::device::get(device).map_err(|e| driver_error("device", e))?;
    let uuid = result::device::get_uuid(dev).map_err(|e| driver_error("device UUID", e))?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// Whether every operation queued on `stream` has completed. An error counts as work left:
/// the event's calls then report it.
///
/// # Safety
/// `stream` must be a valid stream handle of the bound context (or 1/2 for the default
/// streams).
unsafe fn is_idle(stream: Stream) -> bool {
    // SAFETY: a query of the caller's stream; it changes nothing.
    let status = unsafe { sys::cuStreamQuery(stream_handle(stream)) };
    status == sys::CUresult::CUDA_SUCCESS
}

/// An interprocess event recorded on `stream`, and its handle.
///
/// # Safety
/// As [`is_idle`].
unsafe fn recorded_event(
    device: i32,
    stream: Stream,
) -> Result<([u8; HANDLE_BYTES], ExportedEvent)> {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
        | sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;
    let mut raw: sys::CUevent = std::ptr::null_mut();
    // SAFETY: writes one event handle in the bound context.
    unsafe { sys::cuEventCreate(&mut raw, flags) }
        .result()
        .map_err(|e| driver_error("interprocess event", e))?;
    let exported = ExportedEvent { device, event: raw };
    // SAFETY: a fresh event; the stream is the caller's (see the contract).
    unsafe { sys::cuEventRecord(raw, stream_handle(stream)) }
        .result()
        .map_err(|e| driver_error("event record", e))?;
    let mut event = sys::CUipcEventHandle {
        reserved: [0; HANDLE_BYTES],
    };
    // SAFETY: an interprocess event of this context; writes the handle.
    unsafe { sys::cuIpcGetEventHandle(&mut event, raw) }
        .result()
        .map_err(|e| driver_error("event handle", e))?;
    Ok((event.reserved.map(|b| b as u8), exported))
}

/// Exports `bytes` at `ptr` on `device`, ordered after the work queued on `stream`: by an
/// interprocess event recorded on it, or by none when it has no work left.
///
/// # Safety
/// `ptr..ptr + bytes` must be live device memory of `device`, and `stream` a valid stream
/// handle of its primary context (or 1/2 for the default streams).
pub unsafe fn export(
    device: i32,
    ptr: usize,
    bytes: usize,
    stream: Stream,
) -> Result<(IpcHandle, Option<ExportedEvent>)> {
    bind(device)?;
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: writes two values; the driver validates the pointer.
    unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as sys::CUdeviceptr) }
        .result()
        .map_err(|e| driver_error(&format!("address range of 0x{ptr:x}"), e))?;
    let offset = ptr - base as usize;
    if !range_fits(offset, bytes, size) {
        return Err(refused(format!(
            "{bytes} bytes at 0x{ptr:x} run past their allocation ({size} bytes at 0x{base:x})"
        )));
    }
    let mut memory = sys::CUipcMemHandle {
        reserved: [0; HANDLE_BYTES],
    };
    // SAFETY: `base` is the start of a live allocation (just asked); writes the handle.
    unsafe { sys::cuIpcGetMemHandle(&mut memory, base) }
        .result()
        .map_err(|e| {
            refused(format!(
                "0x{ptr:x} cannot be shared with another process ({e:?}): memory from \
                 stream-ordered pools (cuMemAllocAsync, zerohop.memory.CudaAsync) has no IPC \
                 handle; allocate it with cuMemAlloc (zerohop.memory.CudaDevice, or a Pool \
                 over it)"
            ))
        })?;
    // SAFETY: the caller's stream of the bound context (see the contract).
    let (event, exported) = if unsafe { is_idle(stream) } {
        (None, None)
    } else {
        // SAFETY: as above.
        let (event, exported) = unsafe { recorded_event(device, stream) }?;
        (Some(event), Some(exported))
    };
    let handle = IpcHandle {
        memory: memory.reserved.map(|b| b as u8),
        event,
        offset,
        bytes,
        device_uuid: device_uuid(device)?,
        pid: std::process::id(),
        boot_id: crate::memory::machine_boot_id().unwrap_or_default(),
    };
    Ok((handle, exported))
}

/// Another process's device memory, mapped here; unmapped on drop.
pub struct ImportedMemory {
    device: i32,
    base: sys::CUdeviceptr,
    ptr: usize,
    bytes: usize,
}

// SAFETY: a mapping of device memory; the driver calls work from any thread once the context
// is bound, which Drop does.
unsafe impl Send for ImportedMemory {}
// SAFETY: shared references only read the addresses.
unsafe impl Sync for ImportedMemory {}

impl ImportedMemory {
    pub fn device(&self) -> i32 {
        self.device
    }
    pub fn ptr(&self) -> usize {
        self.ptr
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for ImportedMemory {
    fn drop(&mut self) {
        if bind(self.device).is_ok() {
            // SAFETY: opened once in `import`, closed once here.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.base).result() };
        }
    }
}

/// The local ordinal of the device with `uuid`.
fn device_with_uuid(uuid: &[u8; 16]) -> Result<i32> {
    for ordinal in 0..device_count() as i32 {
        if &device_uuid(ordinal)? == uuid {
            return Ok(ordinal);
        }
    }
    Err(refused(
        "the handle is for a GPU this process cannot see (another machine, or hidden by \
         CUDA_VISIBLE_DEVICES)",
    ))
}

/// Maps the memory `handle` names and makes `stream` wait for the producer's event. Fails
/// cleanly for handles of this process, of a GPU not visible here, or whose producer freed
/// the memory or exited.
pub fn import(handle: &IpcHandle, stream: Stream) -> Result<ImportedMemory> {
    check_machine(&handle.boot_id)?;
    if handle.pid == std::process::id() {
        return Err(refused(
            "the handle was made by this process, which cannot open its own handles; use the \
             tensor itself",
        ));
    }
    let device = device_with_uuid(&handle.device_uuid)?;
    bind(device)?;
    let memory = sys::CUipcMemHandle {
        reserved: handle.memory.map(|b| b as _),
    };
    let mut base: sys::CUdeviceptr = 0;
    // SAFETY: writes one pointer; the driver checks the handle and fails for dead producers.
    unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &mut base,
            memory,
            sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    }
    .result()
    .map_err(|e| {
        refused(format!(
            "the handle could not be opened ({e:?}): its producer (pid {}) freed the memory or \
             exited",
            handle.pid
        ))
    })?;
    // Owned at once, so every refusal below closes the handle again.
    let mut imported = ImportedMemory {
        device,
        base,
        ptr: 0,
        bytes: handle.bytes,
    };
    // The state's offset and length are the sender's word; the mapped allocation's size is
    // the driver's. A view past it would read another allocation of the producer.
    let (mut start, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: writes two values; `base` was just mapped in the bound context.
    unsafe { sys::cuMemGetAddressRange_v2(&mut start, &mut size, base) }
        .result()
        .map_err(|e| driver_error("address range of the opened handle", e))?;
    let room = size.saturating_sub((base as usize).saturating_sub(start as usize));
    let ptr = (base as usize).checked_add(handle.offset);
    match ptr {
        Some(ptr) if range_fits(handle.offset, handle.bytes, room) => imported.ptr = ptr,
        _ => {
            return Err(refused(format!(
                "the handle's range ({} bytes at offset {}) runs past the allocation it maps \
                 ({room} bytes)",
                handle.bytes, handle.offset
            )))
        }
    }
    if let Some(event) = handle.event {
        wait_for(&event, stream)?;
    }
    Ok(imported)
}

/// Makes `stream` wait for the producer's interprocess `event`.
fn wait_for(event: &[u8; HANDLE_BYTES], stream: Stream) -> Result<()> {
    let event = sys::CUipcEventHandle {
        reserved: event.map(|b| b as _),
    };
    let mut raw: sys::CUevent = std::ptr::null_mut();
    // SAFETY: writes one event handle; the driver checks the handle.
    unsafe { sys::cuIpcOpenEventHandle(&mut raw, event) }
        .result()
        .map_err(|e| refused(format!("the producer's event could not be opened ({e:?})")))?;
    // SAFETY: `raw` was just opened in this context; destroying our copy after queuing the
    // wait is allowed (the wait holds what it needs).
    let waited = unsafe {
        let waited = sys::cuStreamWaitEvent(stream_handle(stream), raw, 0).result();
        let _ = sys::cuEventDestroy_v2(raw).result();
        waited
    };
    waited.map_err(|e| driver_error("wait for the producer's event", e))
}

#[cfg(test)]
mod tests {
    use super::range_fits;

    #[test]
    fn a_range_must_end_inside_its_allocation() {
        assert!(range_fits(0, 4096, 4096));
        assert!(range_fits(1024, 3072, 4096));
        assert!(range_fits(4096, 0, 4096), "an empty range at the end");
        assert!(!range_fits(1024, 3073, 4096), "one byte past the end");
        assert!(!range_fits(4097, 0, 4096), "starts past the end");
        assert!(
            !range_fits(usize::MAX, 2, usize::MAX),
            "offset + bytes overflows"
        );
        assert!(!range_fits(8, usize::MAX - 4, usize::MAX));
    }
}
