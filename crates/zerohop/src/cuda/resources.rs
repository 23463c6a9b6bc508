//! CUDA memory resources: device (`cuMemAlloc`), stream-ordered (`cuMemAllocAsync` on the
//! device's memory pool), managed (`cuMemAllocManaged`, may exceed device memory) and pinned
//! host (`cuMemHostAlloc`, for copies that overlap the host). All use the primary context.

use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::{result, sys, DriverError};

use super::{bind, driver_error, order_streams, stream_handle};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{MemoryResource, Stream};

/// The CUDA allocators align to at least this.
pub const CUDA_ALIGNMENT: usize = 256;

/// Checks the request, makes `ordinal`'s context current and runs the driver's allocator
/// (`allocate(bytes)` with `bytes` ≥ 1), turning its failure into an out-of-memory error.
fn allocate_with(
    ordinal: i32,
    device: Device,
    bytes: usize,
    align: usize,
    allocate: impl FnOnce(usize) -> std::result::Result<usize, DriverError>,
) -> Result<NonNull<u8>> {
    if align > CUDA_ALIGNMENT {
        return Err(Error::Layout {
            what: "alignment".into(),
            reason: format!("{align} exceeds the {CUDA_ALIGNMENT} bytes CUDA allocations give"),
        });
    }
    bind(ordinal)?;
    let oom = |reason: String| Error::OutOfMemory {
        requested: bytes,
        device,
        reason,
    };
    let address = allocate(bytes.max(1)).map_err(|e| oom(format!("{e:?}")))?;
    NonNull::new(address as *mut u8).ok_or_else(|| oom("the driver returned NULL".into()))
}

/// Frees a block synchronously once the work queued on `stream` (which may still use it) is
/// done. Nothing happens when the context cannot be bound (the process is going down).
///
/// # Safety
/// `free` must release a block of `ordinal`'s context that nothing uses after `stream`'s work.
unsafe fn free_after(
    ordinal: i32,
    stream: Stream,
    free: impl FnOnce() -> std::result::Result<(), DriverError>,
) {
    if bind(ordinal).is_ok() {
        // SAFETY: the stream is the handle the block was used on, per the caller.
        let _ = unsafe { result::stream::synchronize(stream_handle(stream)) };
        let _ = free();
    }
}

/// Device memory from `cuMemAlloc`. A free first lets the freeing stream finish (the driver's
/// free is synchronous anyway); wrap it in a Pool for stream-ordered reuse without waiting.
#[derive(Debug)]
pub struct CudaDeviceResource {
    ordinal: i32,
}

impl CudaDeviceResource {
    pub fn new(ordinal: i32) -> Result<Self> {
        bind(ordinal)?;
        Ok(CudaDeviceResource { ordinal })
    }
}

impl MemoryResource for CudaDeviceResource {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        allocate_with(self.ordinal, self.device(), bytes, align, |n| {
            // SAFETY: the context is current (bound by `allocate_with`); n ≥ 1.
            unsafe { result::malloc_sync(n) }.map(|p| p as usize)
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, stream: Stream) {
        let free = || {
            // SAFETY: the block is this resource's and unused from here on.
            unsafe { result::free_sync(ptr.as_ptr() as sys::CUdeviceptr) }
        };
        // SAFETY: per the trait contract the block came from `allocate` here and was used on
        // `stream`.
        unsafe { free_after(self.ordinal, stream, free) };
    }

    fn device(&self) -> Device {
        Device::cuda(self.ordinal)
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        order_streams(self.ordinal, freed_on, next)
    }
}

/// Stream-ordered device memory: `cuMemAllocAsync`/`cuMemFreeAsync` on the device's default
/// memory pool, whose release threshold is raised so freed memory stays cached for reuse.
#[derive(Debug)]
pub struct CudaAsyncResource {
    ordinal: i32,
}

impl CudaAsyncResource {
    pub fn new(ordinal: i32) -> Result<Self> {
        bind(ordinal)?;
        let dev = result::device::get(ordinal).map_err(|e| driver_error("device", e))?;
        // SAFETY: `dev` came from cuDeviceGet; the attribute value is a u64 as documented.
        unsafe {
            let pool = result::device::get_default_mem_pool(dev)
                .map_err(|e| driver_error("default memory pool", e))?;
            let mut threshold = u64::MAX;
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            )
            .result()
            .map_err(|e| driver_error("memory pool release threshold", e))?;
        }
        Ok(CudaAsyncResource { ordinal })
    }
}

impl MemoryResource for CudaAsyncResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        allocate_with(self.ordinal, self.device(), bytes, align, |n| {
            // SAFETY: the context is current; the stream is a handle the caller vouches for.
            unsafe { result::malloc_async(stream_handle(stream), n) }.map(|p| p as usize)
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, stream: Stream) {
        if bind(self.ordinal).is_ok() {
            // SAFETY: per the trait contract; the free is ordered after `stream`'s work.
            let _ = unsafe {
                result::free_async(ptr.as_ptr() as sys::CUdeviceptr, stream_handle(stream))
            };
        }
    }

    fn device(&self) -> Device {
        Device::cuda(self.ordinal)
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        order_streams(self.ordinal, freed_on, next)
    }
}

/// Managed (unified) memory: one pointer valid on the host and every device, paged on demand,
/// so allocations may exceed the device's memory (oversubscription).
#[derive(Debug)]
pub struct CudaManagedResource {
    ordinal: i32,
}

impl CudaManagedResource {
    pub fn new(ordinal: i32) -> Result<Self> {
        bind(ordinal)?;
        Ok(CudaManagedResource { ordinal })
    }
}

impl MemoryResource for CudaManagedResource {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        allocate_with(self.ordinal, self.device(), bytes, align, |n| {
            // SAFETY: the context is current; n ≥ 1.
            unsafe { result::malloc_managed(n, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .map(|p| p as usize)
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, stream: Stream) {
        let free = || {
            // SAFETY: the block is this resource's and unused from here on.
            unsafe { result::free_sync(ptr.as_ptr() as sys::CUdeviceptr) }
        };
        // SAFETY: as for device memory.
        unsafe { free_after(self.ordinal, stream, free) };
    }

    fn device(&self) -> Device {
        Device::CUDA_MANAGED
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        order_streams(self.ordinal, freed_on, next)
    }
}

/// Page-locked host memory (`cuMemHostAlloc`, portable): host-readable, and the source or
/// target of copies that run asynchronously to the host.
#[derive(Debug)]
pub struct CudaPinnedResource {
    ordinal: i32,
}

impl CudaPinnedResource {
    pub fn new(ordinal: i32) -> Result<Self> {
        bind(ordinal)?;
        Ok(CudaPinnedResource { ordinal })
    }
}

impl MemoryResource for CudaPinnedResource {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        allocate_with(self.ordinal, self.device(), bytes, align, |n| {
            // SAFETY: the context is current; PORTABLE pins the block for every context.
            unsafe { result::malloc_host(n, sys::CU_MEMHOSTALLOC_PORTABLE) }.map(|p| p as usize)
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, stream: Stream) {
        let free = || {
            // SAFETY: the block is this resource's and unused from here on.
            unsafe { result::free_host(ptr.as_ptr() as *mut c_void) }
        };
        // SAFETY: per the trait contract; copies queued on `stream` may still read it.
        unsafe { free_after(self.ordinal, stream, free) };
    }

    fn device(&self) -> Device {
        Device::CUDA_HOST
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        order_streams(self.ordinal, freed_on, next)
    }
}
