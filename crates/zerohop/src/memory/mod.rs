//! Memory resources: the one interface every allocation in zerohop goes through.
//!
//! A resource hands out raw, aligned, stream-ordered blocks. Policies (pools, limits,
//! statistics) are resources that wrap another resource, so stacks are built by composition.

mod arena;

mod checked;
mod external;
mod failure;
#[cfg(test)]
mod free_checks_tests;
mod limit;
mod live_blocks;
mod log;
mod monotonic;
mod pool;
mod registry;
mod shared;
mod stats;
mod stream;
#[cfg(test)]
mod stream_order_tests;
mod system;
#[cfg(test)]
mod tests;
mod tracking;
mod virtual_space;
#[cfg(test)]
mod virtual_space_tests;

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

pub use arena::{ArenaResource, DEFAULT_CACHED_PER_CLASS};
pub use checked::{checked_allocate, checked_deallocate};
pub use external::{AllocateFn, DeallocateFn, ExternalResource};
pub use failure::{FailureCallback, FailureCallbackResource};
pub use limit::LimitResource;
pub use log::{LogResource, LOG_HEADER};
pub use monotonic::{MonotonicResource, MonotonicUsage, DEFAULT_MONOTONIC_CHUNK};
pub use pool::{
    block_size, PoolConfig, PoolResource, PoolUsage, CLASS_COUNT, CLASS_MAX, CLASS_SIZES,
    POOL_ALIGNMENT,
};
pub use registry::{
    current_resource, framework_allocate, framework_deallocate, make_current,
    reset_current_resource, serve_frameworks, set_current_resource, set_framework_resource,
    take_framework_refusal,
};
pub use shared::{
    attach, handle_for, machine_boot_id, mapped_segments, Attached, SharedHandle, SharedResource,
};
pub use stats::{size_bucket, Statistics, StatsResource, HISTOGRAM_BUCKETS};
pub use stream::{ConsumerStream, CudaStream, Stream, StreamCell, AMBIGUOUS_STREAM};
pub use system::SystemResource;
pub use tracking::{
    contexts_recorded, set_allocation_context, AllocationContext, InvalidFree, LiveAllocation,
    TrackingResource,
};
pub use virtual_space::{AddressSpace, VirtualResource};

use crate::device::Device;
use crate::error::Result;

/// The alignment zerohop allocations get unless asked otherwise: a GPU cache line (CMS SoA
/// default), which also satisfies JAX/XLA and Arrow consumers that want 64-byte alignment.
pub const DEFAULT_ALIGNMENT: usize = 128;

/// A source of memory blocks on one device.
///
/// `allocate` returns a block of at least `bytes` bytes aligned to `align` (a power of two),
/// usable on `stream` at once. `deallocate` gives it back; work already queued on `stream`
/// may still use it, so a resource must not hand it to another stream before that work ends.
pub trait MemoryResource: Send + Sync + fmt::Debug {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>>;

    /// # Safety
    /// `ptr` must come from `allocate` on this resource (or one equal to it) with the same
    /// `bytes` and `align`, and must not be used after this call. Callers that cannot promise
    /// this (a Python or C face passing on an integer) use [`checked_deallocate`].
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream);

    /// The device this resource's memory lives on.
    fn device(&self) -> Device;

    /// Makes work queued on `next` from now on wait for the work queued so far on
    /// `freed_on`: called before a block freed on `freed_on` is handed out for `next`.
    /// Host memory has no stream order, so the default does nothing; adaptors forward to
    /// their upstream, and device resources make `next` wait on an event.
    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        let _ = (freed_on, next);
        Ok(())
    }

    /// `Some(granule)` when this resource hands out chunks of one reserved address range, each
    /// a multiple of `granule` long, placed so that chunks may touch: a pool above may then
    /// merge free memory across chunk boundaries (no fragment is stranded at a chunk's end),
    /// while still giving each chunk back whole. `None` (the default): chunks are unrelated.
    fn contiguous_granule(&self) -> Option<usize> {
        None
    }

    /// Whether memory from `self` may be freed through `other`. Identity by default.
    fn is_equal(&self, other: &dyn MemoryResource) -> bool {
        std::ptr::addr_eq(self as *const Self, other as *const dyn MemoryResource)
    }
}

/// The process-wide host resource used when a caller names none.
pub fn default_host_resource() -> Arc<dyn MemoryResource> {
    static DEFAULT: std::sync::OnceLock<Arc<dyn MemoryResource>> = std::sync::OnceLock::new();
    DEFAULT
        .get_or_init(|| Arc::new(SystemResource::new()))
        .clone()
}
