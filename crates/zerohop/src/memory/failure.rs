//! `FailureCallback`: when an allocation fails, ask a callback to free memory and retry.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::Result;

/// Called with the failed request size and the attempt number (0, 1, …); returns true to
/// retry (after freeing something), false to give up and return the error.
pub type FailureCallback = Box<dyn Fn(usize, u32) -> bool + Send + Sync>;

pub struct FailureCallbackResource {
    upstream: Arc<dyn MemoryResource>,
    callback: FailureCallback,
}

impl FailureCallbackResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, callback: FailureCallback) -> Self {
        FailureCallbackResource { upstream, callback }
    }
}

impl fmt::Debug for FailureCallbackResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureCallbackResource")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl MemoryResource for FailureCallbackResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let mut attempt = 0u32;
        loop {
            match self.upstream.allocate(bytes, align, stream) {
                Ok(ptr) => return Ok(ptr),
                Err(err) => {
                    if !(self.callback)(bytes, attempt) {
                        return Err(err);
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.upstream.deallocate(ptr, bytes, align, stream) };
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
