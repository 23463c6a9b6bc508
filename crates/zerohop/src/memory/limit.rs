//! `Limit`: a hard cap on the bytes outstanding through this adaptor.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Refuses an allocation that would take the bytes in use above `limit`, with a typed error
/// carrying the numbers, instead of letting the process run out of memory.
#[derive(Debug)]
pub struct LimitResource {
    upstream: Arc<dyn MemoryResource>,
    limit: usize,
    in_use: AtomicUsize,
}

impl LimitResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, limit: usize) -> Self {
        LimitResource {
            upstream,
            limit,
            in_use: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The figures by name, as every language's `usage()` reports them.
    pub fn usage_fields(&self) -> Vec<(&'static str, usize)> {
        vec![("in_use", self.in_use()), ("limit", self.limit())]
    }
}

impl MemoryResource for LimitResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let mut current = self.in_use.load(Ordering::Relaxed);
        loop {
            let next = current.checked_add(bytes).filter(|&n| n <= self.limit);
            let Some(next) = next else {
                return Err(Error::LimitExceeded {
                    requested: bytes,
                    in_use: current,
                    limit: self.limit,
                });
            };
            match self.in_use.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.upstream
            .allocate(bytes, align, stream)
            .inspect_err(|_| {
                self.in_use.fetch_sub(bytes, Ordering::AcqRel);
            })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: forwarded under the caller's contract; the block came from `upstream`.
        unsafe { self.upstream.deallocate(ptr, bytes, align, stream) };
        super::stats::take_from(&self.in_use, bytes);
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
