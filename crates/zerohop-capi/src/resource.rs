//! `zh_resource`: where a table's memory comes from. The same resources and adaptors the
//! Python package builds (`zerohop.memory`), so a C++ program and the frameworks it hosts can
//! draw from one pool and be counted by one `Stats`.

use std::ffi::{c_char, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use zerohop::memory::{
    checked_allocate, checked_deallocate, current_resource, framework_allocate,
    framework_deallocate, set_current_resource, PoolConfig, PoolResource, POOL_ALIGNMENT,
};
use zerohop::memory::{StatsResource, SystemResource};
use zerohop::{Device, MemoryResource, Stream};

use crate::status::{give, guard, handle, out_param, release, text, zh_status, Failure, Outcome};

/// A memory resource (opaque): a handle on a shared resource; freeing the handle leaves the
/// resource alive while tables or other handles use it.
pub struct zh_resource {
    pub(crate) inner: Arc<dyn MemoryResource>,
    /// Set when this is a `Stats` adaptor, for `zh_resource_statistics`.
    stats: Option<Arc<StatsResource>>,
}

/// What a `Stats` adaptor has counted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct zh_statistics {
    /// Bytes allocated through the adaptor and not yet freed.
    pub current_bytes: u64,
    /// The most `current_bytes` ever was.
    pub peak_bytes: u64,
    /// Bytes ever allocated through it.
    pub total_bytes: u64,
    /// Live allocations.
    pub current_count: u64,
    /// Allocations ever made.
    pub total_count: u64,
    /// Requests upstream refused.
    pub failed_count: u64,
}

fn plain(inner: Arc<dyn MemoryResource>) -> zh_resource {
    zh_resource { inner, stats: None }
}

/// Host memory from the system allocator (the default host resource).
///
/// # Safety
/// `out` must be writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_system(out: *mut *mut zh_resource) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        give(out, plain(Arc::new(SystemResource::new())));
        Ok(())
    })
}

/// Device memory of CUDA device `device` (cuMemAlloc). `ZH_DEVICE_ERROR` without a driver or
/// GPU, or in a build without the `cuda` feature.
///
/// # Safety
/// `out` must be writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_cuda_device(
    device: i32,
    out: *mut *mut zh_resource,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        give(out, plain(cuda_device(device)?));
        Ok(())
    })
}

#[cfg(feature = "cuda")]
fn cuda_device(device: i32) -> Outcome<Arc<dyn MemoryResource>> {
    if !zerohop::cuda::is_available() {
        return Err(Failure {
            status: zh_status::ZH_DEVICE_ERROR,
            message: format!("cuda:{device}: CUDA is not available (no driver or no GPU)"),
        });
    }
    Ok(Arc::new(zerohop::cuda::CudaDeviceResource::new(device)?))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(device: i32) -> Outcome<Arc<dyn MemoryResource>> {
    Err(Failure {
        status: zh_status::ZH_DEVICE_ERROR,
        message: format!("cuda:{device}: this zerohop was built without the cuda feature"),
    })
}

/// A pool over `upstream`: chunks reserved from it (`initial` bytes at first; never more
/// than `maximum` bytes in all, 0 for no maximum), carved into reusable blocks.
///
/// # Safety
/// `upstream` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_pool(
    upstream: *const zh_resource,
    initial: usize,
    maximum: usize,
    out: *mut *mut zh_resource,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let upstream = unsafe { handle(upstream, "upstream") }?;
        let config = PoolConfig::checked(initial, (maximum != 0).then_some(maximum))?;
        give(
            out,
            plain(Arc::new(PoolResource::new(upstream.inner.clone(), config))),
        );
        Ok(())
    })
}

/// A `Stats` adaptor over `upstream`: counts what passes through (`zh_resource_statistics`).
///
/// # Safety
/// `upstream` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_stats(
    upstream: *const zh_resource,
    out: *mut *mut zh_resource,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let upstream = unsafe { handle(upstream, "upstream") }?;
        let stats = Arc::new(StatsResource::new(upstream.inner.clone()));
        give(
            out,
            zh_resource {
                inner: stats.clone(),
                stats: Some(stats),
            },
        );
        Ok(())
    })
}

/// The counts of a `Stats` adaptor made by `zh_resource_stats`.
///
/// # Safety
/// `resource` must be a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_statistics(
    resource: *const zh_resource,
    out: *mut zh_statistics,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let resource = unsafe { handle(resource, "resource") }?;
        let stats = resource.stats.as_ref().ok_or_else(|| {
            Failure::invalid("resource is not a Stats adaptor (make one with zh_resource_stats)")
        })?;
        let s = stats.statistics();
        // SAFETY: checked non-NULL above.
        unsafe {
            *out = zh_statistics {
                current_bytes: s.current_bytes as u64,
                peak_bytes: s.peak_bytes as u64,
                total_bytes: s.total_bytes,
                current_count: s.current_count as u64,
                total_count: s.total_count,
                failed_count: s.failed_count,
            }
        };
        Ok(())
    })
}

/// The resource zerohop allocates from on `device` ("cpu", "cuda:0", …): the one set with
/// `zh_resource_set_current` (or, in the same library instance, by any other caller), else the
/// default (the system allocator for "cpu", plain device memory for "cuda:N").
///
/// # Safety
/// `device` must be a NUL-terminated string or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_current(
    device: *const c_char,
    out: *mut *mut zh_resource,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let device = parse_device(unsafe { text(device, "device") }?)?;
        let inner = match current_resource(device) {
            Some(r) => r,
            None if device == Device::CPU => Arc::new(SystemResource::new()),
            None => cuda_device(device.id)?,
        };
        give(out, plain(inner));
        Ok(())
    })
}

/// Makes `resource` the one zerohop allocates from on its device, for every caller of this
/// library instance.
///
/// # Safety
/// `resource` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_set_current(resource: *const zh_resource) -> zh_status {
    guard(|| {
        // SAFETY: per the contract.
        let resource = unsafe { handle(resource, "resource") }?;
        set_current_resource(resource.inner.device(), resource.inner.clone());
        Ok(())
    })
}

/// Frees a resource handle (NULL: nothing); the resource lives on while anything uses it.
///
/// # Safety
/// `resource` must come from a `zh_resource_*` call and not be used after this one.
#[no_mangle]
pub unsafe extern "C" fn zh_resource_free(resource: *mut zh_resource) {
    // SAFETY: per the contract.
    unsafe { release(resource) }
}

/// Allocates `bytes` bytes aligned to `align` (a power of two; 0 for 256) from `resource`,
/// ordered on `stream` (0 for none; CUDA stream handles otherwise): the external-allocator
/// entry point a host framework plugs in.
///
/// # Safety
/// `resource` must be a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_allocate(
    resource: *const zh_resource,
    bytes: usize,
    align: usize,
    stream: usize,
    out: *mut *mut c_void,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let resource = unsafe { handle(resource, "resource") }?;
        let align = if align == 0 { POOL_ALIGNMENT } else { align };
        if !align.is_power_of_two() {
            return Err(Failure::invalid(format!(
                "alignment {align} is not a power of two"
            )));
        }
        let ptr = checked_allocate(&resource.inner, bytes, align, on(resource, stream))?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = ptr.as_ptr().cast() };
        Ok(())
    })
}

/// Returns memory from `zh_allocate` on this resource (NULL `ptr`: nothing), with the `bytes`
/// and `align` it was allocated with. Any other pointer, a second free or another size is
/// `ZH_INVALID_ARGUMENT` (the message names the address), and frees nothing.
///
/// # Safety
/// `resource` must be a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_deallocate(
    resource: *const zh_resource,
    ptr: *mut c_void,
    bytes: usize,
    align: usize,
    stream: usize,
) -> zh_status {
    guard(|| {
        // SAFETY: per the contract.
        let resource = unsafe { handle(resource, "resource") }?;
        if ptr.is_null() {
            return Ok(());
        }
        let align = if align == 0 { POOL_ALIGNMENT } else { align };
        checked_deallocate(
            &resource.inner,
            ptr as usize,
            bytes,
            align,
            on(resource, stream),
        )?;
        Ok(())
    })
}

pub(crate) fn parse_device(name: &str) -> Outcome<Device> {
    let device = Device::parse(name).map_err(|e| Failure::invalid(format!("device: {e}")))?;
    Ok(device)
}

/// An allocator entry point in the shape libtorch's pluggable CUDA allocator calls
/// (`torch::cuda::CUDAPluggableAllocator::createCustomAllocator`, also Python's
/// `torch.cuda.memory.CUDAPluggableAllocator`): `size` bytes from the current resource of
/// `cuda:device` (set with `zh_resource_set_current`; device -1 means the host), ordered on
/// `stream`. So a C++ program's libtorch draws from the same zerohop pool as its tables.
/// Returns NULL when no resource is current for the device or it refuses (the message is in
/// `zh_last_error()`).
///
/// # Safety
/// `stream` must be a CUDA stream handle of the device (or NULL, the legacy default stream).
#[no_mangle]
pub unsafe extern "C" fn zh_cuda_malloc(
    size: isize,
    device: i32,
    stream: *mut c_void,
) -> *mut c_void {
    let mut out = std::ptr::null_mut();
    let status = guard(|| {
        out = framework_allocate(size, device, stream as usize)?
            .as_ptr()
            .cast();
        Ok(())
    });
    if status == zh_status::ZH_OK {
        out
    } else {
        std::ptr::null_mut()
    }
}

/// Frees a block of `zh_cuda_malloc` (NULL: nothing), in the shape libtorch's pluggable
/// allocator calls.
///
/// # Safety
/// `ptr` must come from `zh_cuda_malloc(size, device, …)` while the same resource was current
/// for `device`, and must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn zh_cuda_free(
    ptr: *mut c_void,
    size: isize,
    device: i32,
    stream: *mut c_void,
) {
    guard(|| {
        let Some(ptr) = NonNull::new(ptr.cast::<u8>()) else {
            return Ok(());
        };
        // SAFETY: per this function's contract.
        unsafe { framework_deallocate(ptr, size, device, stream as usize) }?;
        Ok(())
    });
}

/// A C caller's stream for `resource`: 0 is none on the host and CUDA's NULL stream (the
/// legacy default stream) on a device, as for framework allocators.
fn on(resource: &zh_resource, stream: usize) -> Stream {
    Stream::from_allocator(resource.inner.device(), stream)
}
