//! CUDA through cudarc's driver bindings, loaded at run time (feature `cuda`): availability,
//! the devices' primary contexts (the ones PyTorch, CuPy and JAX use, so their pointers are
//! valid here), device memory resources, and stream ordering with events.
//!
//! DLPack stream values are used as CUDA driver stream handles: 1 is the legacy default
//! stream (`CU_STREAM_LEGACY`), 2 the per-thread default stream (`CU_STREAM_PER_THREAD`),
//! anything larger a `CUstream`.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};
use crate::memory::Stream;

mod capture;
pub mod ipc;
mod resources;
mod virtual_memory;
pub use capture::{capture_of, order_streams, Capture};
pub use resources::{
    CudaAsyncResource, CudaDeviceResource, CudaManagedResource, CudaPinnedResource, CUDA_ALIGNMENT,
};
pub use virtual_memory::{cuda_virtual, CudaAddressSpace, CudaVirtualResource};

/// The legacy default stream as DLPack and the CUDA array interface number it.
pub const LEGACY_STREAM: Stream = Stream::LEGACY;

pub(crate) fn driver_error(what: &str, err: result::DriverError) -> Error {
    // The description comes from the driver, which is loaded whenever a call could fail.
    // SAFETY: only asks the loader whether libcuda can be opened.
    let description = if unsafe { sys::is_culib_present() } {
        err.error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        String::new()
    };
    Error::Cuda {
        call: what.into(),
        code: err.0 as i32,
        name: format!("{:?}", err.0),
        description,
    }
}

/// True when libcuda loads, initialises and reports at least one device.
pub fn is_available() -> bool {
    device_count() > 0
}

/// Devices the driver reports (0 without a driver or GPU).
pub fn device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        // SAFETY: only asks the loader whether libcuda can be opened.
        if !unsafe { sys::is_culib_present() } {
            return 0;
        }
        if result::init().is_err() {
            return 0;
        }
        result::device::get_count()
            .map(|n| n.max(0) as usize)
            .unwrap_or(0)
    })
}

/// Makes device `ordinal`'s primary context current on this thread (retained once per
/// device for the life of the process).
pub fn bind(ordinal: i32) -> Result<()> {
    const MAX_DEVICES: usize = 64;
    static CONTEXTS: OnceLock<Vec<OnceLock<usize>>> = OnceLock::new();
    let count = device_count();
    if count == 0 {
        return Err(Error::CudaUnavailable {
            what: "CUDA device".into(),
            reason: format!("cuda:{ordinal} does not exist (0 device(s) visible)"),
        });
    }
    if ordinal < 0 || ordinal as usize >= count {
        return Err(Error::Device {
            what: "CUDA device".into(),
            reason: format!("cuda:{ordinal} does not exist ({count} device(s) visible)"),
        });
    }
    let slots = CONTEXTS.get_or_init(|| (0..MAX_DEVICES).map(|_| OnceLock::new()).collect());
    let slot = slots.get(ordinal as usize).ok_or_else(|| Error::Device {
        what: "CUDA device".into(),
        reason: format!("cuda:{ordinal} is beyond the {MAX_DEVICES} devices zerohop handles"),
    })?;
    let ctx = match slot.get() {
        Some(&ctx) => ctx,
        None => {
            let dev = result::device::get(ordinal).map_err(|e| driver_error("device", e))?;
            // SAFETY: `dev` came from cuDeviceGet; the retained context lives for the process.
            let ctx = unsafe { result::primary_ctx::retain(dev) }
                .map_err(|e| driver_error("primary context", e))?;
            *slot.get_or_init(|| ctx as usize)
        }
    };
    // SAFETY: `ctx` is a retained primary context, never released.
    unsafe { result::ctx::set_current(ctx as sys::CUcontext) }
        .map_err(|e| driver_error("set context", e))
}

pub(crate) fn stream_handle(stream: Stream) -> sys::CUstream {
    stream.raw() as sys::CUstream
}

/// Blocks the host until `stream` has finished its queued work.
pub fn synchronize(device: i32, stream: Stream) -> Result<()> {
    bind(device)?;
    // SAFETY: a handle the caller vouches for.
    unsafe { result::stream::synchronize(stream_handle(stream)) }
        .map_err(|e| driver_error("stream synchronize", e))
}

/// The device a CUDA pointer belongs to (the CUDA array interface carries none).
pub fn pointer_device(ptr: usize) -> Result<i32> {
    if !is_available() {
        return Err(Error::CudaUnavailable {
            what: "CUDA pointer".into(),
            reason: format!("0x{ptr:x}: CUDA is not available on this machine (no driver or GPU)"),
        });
    }
    let mut ordinal: i32 = -1;
    // SAFETY: writes one int; the driver validates the pointer and reports errors.
    unsafe {
        sys::cuPointerGetAttribute(
            &mut ordinal as *mut i32 as *mut c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr as sys::CUdeviceptr,
        )
        .result()
    }
    // A pointer the driver does not know is the caller's mistake, not the driver's failure.
    .map_err(|e| Error::Device {
        what: "CUDA pointer".into(),
        reason: format!("0x{ptr:x} is not memory the CUDA driver knows ({e:?})"),
    })?;
    Ok(ordinal)
}

/// Sets `bytes` bytes at `ptr` on `device` to zero (synchronously).
///
/// # Safety
/// `ptr..ptr+bytes` must be device memory of `device`.
pub unsafe fn memset_zero(device: i32, ptr: *mut u8, bytes: usize) -> Result<()> {
    bind(device)?;
    // SAFETY: per the caller's contract.
    unsafe { result::memset_d8_sync(ptr as sys::CUdeviceptr, 0, bytes) }
        .map_err(|e| driver_error("memset", e))
}

/// An event recorded on a stream, destroyed on drop. Its handle lives in a box so a pointer
/// to it (`cudaEvent_t*`, what the Arrow device interface's `sync_event` wants) stays put.
pub struct Event {
    device: i32,
    handle: Box<sys::CUevent>,
}

// SAFETY: a CUevent is a driver handle usable from any thread once its context is bound;
// every use here binds the device's primary context first.
unsafe impl Send for Event {}
// SAFETY: shared access only reads the handle's address.
unsafe impl Sync for Event {}

impl Event {
    /// Records an event on `stream` of `device` after the work queued there so far.
    pub fn record(device: i32, stream: Stream) -> Result<Self> {
        bind(device)?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| driver_error("event", e))?;
        let made = Event {
            device,
            handle: Box::new(event),
        };
        // SAFETY: a fresh event; the stream is a handle the caller vouches for.
        unsafe { result::event::record(event, stream_handle(stream)) }
            .map_err(|e| driver_error("event record", e))?;
        Ok(made)
    }

    /// Points to the event handle, valid while `self` lives.
    pub fn handle_ptr(&self) -> *mut c_void {
        &*self.handle as *const sys::CUevent as *mut c_void
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if bind(self.device).is_ok() {
            // SAFETY: created in `record`, destroyed once; pending waits keep it alive in the
            // driver until they are satisfied.
            let _ = unsafe { result::event::destroy(*self.handle) };
        }
    }
}

/// A timing event recorded on a stream: the difference of two, once both have completed,
/// is the GPU time between them. Stage timings use these instead of synchronising the
/// stream after every stage, which would serialise the host with the device.
pub struct TimingEvent {
    device: i32,
    handle: sys::CUevent,
}

// SAFETY: as for `Event`: a driver handle, used only with the device's context bound.
unsafe impl Send for TimingEvent {}

impl TimingEvent {
    /// Records a timing event on `stream` of `device` after the work queued there so far.
    pub fn record(device: i32, stream: Stream) -> Result<Self> {
        bind(device)?;
        let handle = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| driver_error("timing event", e))?;
        let made = TimingEvent { device, handle };
        // SAFETY: a fresh event; the stream is a handle the caller vouches for.
        unsafe { result::event::record(handle, stream_handle(stream)) }
            .map_err(|e| driver_error("timing event record", e))?;
        Ok(made)
    }

    /// Blocks the host until the work before this event has finished.
    pub fn wait(&self) -> Result<()> {
        bind(self.device)?;
        // SAFETY: a live event created in `record`.
        unsafe { result::event::synchronize(self.handle) }
            .map_err(|e| driver_error("timing event synchronize", e))
    }

    /// Seconds of GPU time from `self` to `later`; both must have completed (`wait` on the
    /// later one), else the driver reports "not ready".
    pub fn seconds_until(&self, later: &TimingEvent) -> Result<f64> {
        bind(self.device)?;
        // SAFETY: two live events of the same context, both recorded.
        let ms = unsafe { result::event::elapsed(self.handle, later.handle) }
            .map_err(|e| driver_error("timing event elapsed", e))?;
        Ok(f64::from(ms) / 1e3)
    }
}

impl Drop for TimingEvent {
    fn drop(&mut self) {
        if bind(self.device).is_ok() {
            // SAFETY: created in `record`, destroyed once.
            let _ = unsafe { result::event::destroy(self.handle) };
        }
    }
}

/// Makes `stream` on `device` wait for the event `event_ptr` points to (a `cudaEvent_t*`,
/// as the Arrow device interface passes it). NULL means "ready": nothing to wait for.
///
/// # Safety
/// A non-NULL `event_ptr` must point to a live event handle of `device`'s context.
pub unsafe fn wait_for_event(device: i32, stream: Stream, event_ptr: *mut c_void) -> Result<()> {
    if event_ptr.is_null() {
        return Ok(());
    }
    bind(device)?;
    // SAFETY: per the caller's contract.
    unsafe {
        let event = *(event_ptr as *const sys::CUevent);
        result::stream::wait_event(
            stream_handle(stream),
            event,
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
    }
    .map_err(|e| driver_error("stream wait on a sync event", e))
}

/// Copies `bytes` from `src` to `dst` asynchronously on `stream` of `device` (any direction:
/// unified addressing tells the driver where each pointer lives). From pinned host memory the
/// copy overlaps the host; from pageable memory the driver stages it and the call returns
/// once the data is in flight.
///
/// # Safety
/// Both ranges must be valid for `bytes` bytes until the stream reaches the copy, and must not
/// overlap.
pub unsafe fn copy_async(
    device: i32,
    dst: *mut u8,
    src: *const u8,
    bytes: usize,
    stream: Stream,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    bind(device)?;
    // SAFETY: per the caller's contract.
    unsafe {
        sys::cuMemcpyAsync(
            dst as sys::CUdeviceptr,
            src as sys::CUdeviceptr,
            bytes,
            stream_handle(stream),
        )
        .result()
    }
    .map_err(|e| driver_error("memcpy", e))
}

/// Free and total memory of `device`, in bytes.
pub fn memory_info(device: i32) -> Result<(usize, usize)> {
    bind(device)?;
    result::mem_get_info().map_err(|e| driver_error("memory info", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_driver_call_is_a_cuda_error_with_its_code() {
        let err = driver_error(
            "memset",
            result::DriverError(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        );
        let Error::Cuda {
            call, code, name, ..
        } = &err
        else {
            panic!("not a CUDA error: {err:?}");
        };
        assert_eq!((call.as_str(), *code), ("memset", 700));
        assert_eq!(name, "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert!(
            err.to_string()
                .starts_with("CUDA memset failed: CUDA_ERROR_ILLEGAL_ADDRESS (CUresult 700)"),
            "{err}"
        );
    }

    #[test]
    fn a_machine_without_a_gpu_is_cuda_unavailable_and_a_missing_ordinal_a_bad_argument() {
        if device_count() == 0 {
            let err = bind(0).unwrap_err();
            assert!(matches!(err, Error::CudaUnavailable { .. }), "{err:?}");
            assert!(err
                .to_string()
                .contains("cuda:0 does not exist (0 device(s) visible)"));
            let err = pointer_device(0xdead_0000).unwrap_err();
            assert!(matches!(err, Error::CudaUnavailable { .. }), "{err:?}");
        } else {
            let err = bind(device_count() as i32).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        }
    }
}
