//! A resource over another library's C allocator functions, in the shape of torch's
//! pluggable allocator (`void* alloc(ssize_t, int device, cudaStream_t)` and
//! `void free(void*, ssize_t, int device, cudaStream_t)`; device -1 is the host).
//!
//! A second extension module that links its own copy of this crate (the ECG app's) has its
//! own registry of current resources; pointed at zerohop's exported `zerohop_malloc` and
//! `zerohop_free`, its allocations come from whatever resource the user made current in
//! zerohop's Python package (a shared-memory pool, a limit, statistics), as torch's do.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use super::{MemoryResource, Stream, POOL_ALIGNMENT};
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};

/// `void* alloc(ssize_t size, int device, cudaStream_t stream)`.
pub type AllocateFn = unsafe extern "C" fn(isize, c_int, *mut c_void) -> *mut c_void;
/// `void free(void* ptr, ssize_t size, int device, cudaStream_t stream)`.
pub type DeallocateFn = unsafe extern "C" fn(*mut c_void, isize, c_int, *mut c_void);

/// Memory of `device` from a pair of C allocator functions, aligned to [`POOL_ALIGNMENT`].
#[derive(Debug)]
pub struct ExternalResource {
    allocate: AllocateFn,
    deallocate: DeallocateFn,
    device: Device,
}

impl ExternalResource {
    /// # Safety
    /// `allocate` and `deallocate` must behave as their C signatures say for as long as this
    /// resource or any block from it lives: `allocate` returns NULL or `size` bytes aligned
    /// to at least [`POOL_ALIGNMENT`] on `device`, and `deallocate` takes them back.
    pub unsafe fn new(allocate: AllocateFn, deallocate: DeallocateFn, device: Device) -> Self {
        ExternalResource {
            allocate,
            deallocate,
            device,
        }
    }

    fn index(&self) -> c_int {
        match self.device.kind {
            DeviceKind::Cpu => -1,
            _ => self.device.id,
        }
    }
}

impl MemoryResource for ExternalResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        if align > POOL_ALIGNMENT {
            return Err(Error::Layout {
                what: "alignment".into(),
                reason: format!(
                    "{align} bytes: an external allocator promises {POOL_ALIGNMENT} at most"
                ),
            });
        }
        let size = isize::try_from(bytes).map_err(|_| Error::OutOfMemory {
            requested: bytes,
            device: self.device,
            reason: "larger than a signed size".into(),
        })?;
        // SAFETY: the constructor's contract on the function.
        let ptr = unsafe { (self.allocate)(size, self.index(), stream.raw() as *mut c_void) };
        NonNull::new(ptr.cast()).ok_or_else(|| Error::OutOfMemory {
            requested: bytes,
            device: self.device,
            reason: "the external allocator returned NULL".into(),
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, _align: usize, stream: Stream) {
        // SAFETY: `ptr` came from `allocate` with `bytes` (the trait's contract), which fit an
        // isize then; the constructor's contract on the function.
        unsafe {
            (self.deallocate)(
                ptr.as_ptr().cast(),
                bytes as isize,
                self.index(),
                stream.raw() as *mut c_void,
            )
        };
    }

    fn device(&self) -> Device {
        self.device
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicIsize, Ordering};

    use super::*;
    use crate::buffer::Buffer;
    use crate::memory::SystemResource;

    static OUTSTANDING: AtomicIsize = AtomicIsize::new(0);

    fn system() -> SystemResource {
        SystemResource::new()
    }

    unsafe extern "C" fn test_alloc(size: isize, device: c_int, _s: *mut c_void) -> *mut c_void {
        assert_eq!(device, -1);
        if size == 13 {
            return std::ptr::null_mut();
        }
        OUTSTANDING.fetch_add(size, Ordering::SeqCst);
        system()
            .allocate(size as usize, POOL_ALIGNMENT, Stream::HOST)
            .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast())
    }

    unsafe extern "C" fn test_free(ptr: *mut c_void, size: isize, device: c_int, _s: *mut c_void) {
        assert_eq!(device, -1);
        OUTSTANDING.fetch_sub(size, Ordering::SeqCst);
        // SAFETY: `ptr` came from `test_alloc` with `size`.
        unsafe {
            system().deallocate(
                NonNull::new(ptr.cast()).unwrap(),
                size as usize,
                POOL_ALIGNMENT,
                Stream::HOST,
            )
        };
    }

    #[test]
    fn blocks_come_from_and_go_back_to_the_functions() {
        // SAFETY: the test functions keep the C contract.
        let resource = unsafe { ExternalResource::new(test_alloc, test_free, Device::CPU) };
        let resource: std::sync::Arc<dyn MemoryResource> = std::sync::Arc::new(resource);
        let buffer = Buffer::allocate(resource.clone(), 1000, 128, Stream::HOST).unwrap();
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 1000);
        assert_eq!(buffer.as_ptr() as usize % 128, 0);
        drop(buffer);
        assert_eq!(OUTSTANDING.load(Ordering::SeqCst), 0);
        let refused = resource.allocate(13, 64, Stream::HOST).unwrap_err();
        assert!(refused.to_string().contains("NULL"), "{refused}");
        let too_aligned = resource.allocate(8, 4096, Stream::HOST).unwrap_err();
        assert!(too_aligned.to_string().contains("4096"), "{too_aligned}");
    }
}

#[cfg(test)]
mod framework_tests {
    use std::sync::Arc;

    use crate::device::Device;
    use crate::memory::{
        framework_allocate, framework_deallocate, reset_current_resource, set_current_resource,
        set_framework_resource, take_framework_refusal, LimitResource, SystemResource,
        TrackingResource,
    };

    /// A block made while one resource was current goes back to that resource after another
    /// became current (a job switching to shared memory for one stage); a pointer the
    /// allocator never handed out is refused, nothing freed.
    #[test]
    fn a_block_goes_back_to_the_resource_that_made_it() {
        let first = Arc::new(TrackingResource::new(
            Arc::new(SystemResource::new()),
            false,
        ));
        // cuda:7, a slot no other test uses (tests share the process's registry); the
        // registry does not care that system memory stands in for the device's.
        let slot = Device::cuda(7);
        set_current_resource(slot, first.clone());
        let ptr = framework_allocate(4096, 7, 0).unwrap();
        set_current_resource(slot, Arc::new(SystemResource::new()));
        assert_eq!(first.outstanding().len(), 1);
        // SAFETY: `ptr` came from framework_allocate(4096, 7, ..).
        unsafe { framework_deallocate(ptr, 4096, 7, 0) }.unwrap();
        assert!(
            first.outstanding().is_empty(),
            "freed through the resource that made it"
        );
        assert!(first.invalid_frees().is_empty());
        // SAFETY: a second free of the same block: refused before anything is touched.
        let twice = unsafe { framework_deallocate(ptr, 4096, 7, 0) }.unwrap_err();
        assert!(twice.to_string().contains("not a block"), "{twice}");
        reset_current_resource(slot);
    }

    /// A framework that handles a NULL itself learns why from this thread's record: zerohop's
    /// numbers (requested, in use, limit), cleared by the next success so a recovered refusal
    /// is never blamed for a later failure.
    #[test]
    fn a_refusal_is_kept_for_the_thread_until_an_allocation_succeeds() {
        let slot = Device::cuda(6);
        set_current_resource(
            slot,
            Arc::new(LimitResource::new(Arc::new(SystemResource::new()), 1 << 16)),
        );
        assert!(framework_allocate(1 << 20, 6, 0).is_err());
        let elsewhere = std::thread::spawn(take_framework_refusal).join().unwrap();
        assert_eq!(elsewhere, None, "the record is the refusing thread's own");
        let reason = take_framework_refusal().expect("the refusal was recorded");
        assert!(
            reason.contains("1048576") && reason.contains("65536"),
            "{reason}"
        );
        assert_eq!(take_framework_refusal(), None, "taking it clears it");

        assert!(framework_allocate(1 << 20, 6, 0).is_err());
        let ptr = framework_allocate(64, 6, 0).unwrap();
        assert_eq!(
            take_framework_refusal(),
            None,
            "a success clears the record"
        );
        // SAFETY: `ptr` came from framework_allocate(64, 6, ..).
        unsafe { framework_deallocate(ptr, 64, 6, 0) }.unwrap();
        reset_current_resource(slot);
    }

    /// The framework hooks allocate from the framework resource where one is set (torch's
    /// share of a pool), while zerohop's own allocations keep the current resource.
    #[test]
    fn the_framework_resource_takes_the_hooks_and_leaves_the_current_one() {
        let slot = Device::cuda(5);
        let current = Arc::new(TrackingResource::new(
            Arc::new(SystemResource::new()),
            false,
        ));
        let hooks = Arc::new(TrackingResource::new(
            Arc::new(SystemResource::new()),
            false,
        ));
        set_current_resource(slot, current.clone());
        set_framework_resource(slot, Some(hooks.clone()));
        let ptr = framework_allocate(64, 5, 0).unwrap();
        assert_eq!(
            (hooks.outstanding().len(), current.outstanding().len()),
            (1, 0)
        );
        // SAFETY: `ptr` came from framework_allocate(64, 5, ..).
        unsafe { framework_deallocate(ptr, 64, 5, 0) }.unwrap();
        set_framework_resource(slot, None);
        let ptr = framework_allocate(64, 5, 0).unwrap();
        assert_eq!(current.outstanding().len(), 1, "the current resource again");
        // SAFETY: as above.
        unsafe { framework_deallocate(ptr, 64, 5, 0) }.unwrap();
        reset_current_resource(slot);
    }
}
