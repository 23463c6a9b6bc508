//! `Arena`: per-thread caches of small blocks in front of a shared upstream (usually a pool),
//! so threads allocating at once rarely touch a shared lock.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::pool::{block_size, CLASS_COUNT, CLASS_SIZES, POOL_ALIGNMENT};
use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Blocks each thread keeps per size class before handing frees back upstream.
pub const DEFAULT_CACHED_PER_CLASS: usize = 64;
/// Large classes keep fewer blocks: at most this many bytes per class per thread.
const CACHED_BYTES_PER_CLASS: usize = 8 << 20;

#[derive(Debug)]
pub struct ArenaResource {
    id: u64,
    upstream: Arc<dyn MemoryResource>,
    cached_per_class: usize,
}

/// One thread's cached blocks for one arena. Dropped (blocks returned upstream) when the
/// thread exits or on `flush_thread_cache`.
struct ThreadCache {
    arena: u64,
    upstream: Arc<dyn MemoryResource>,
    /// Cached blocks and the stream each was freed on.
    classes: [Vec<(usize, Stream)>; CLASS_COUNT],
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        for (class, blocks) in self.classes.iter_mut().enumerate() {
            let size = CLASS_SIZES[class];
            for (addr, stream) in blocks.drain(..) {
                // SAFETY: cached blocks came from `upstream.allocate(size, POOL_ALIGNMENT)`
                // and are not in use while cached.
                unsafe {
                    self.upstream.deallocate(
                        NonNull::new_unchecked(std::ptr::with_exposed_provenance_mut(addr)),
                        size,
                        POOL_ALIGNMENT,
                        stream,
                    )
                };
            }
        }
    }
}

thread_local! {
    static CACHES: RefCell<Vec<ThreadCache>> = const { RefCell::new(Vec::new()) };
}

impl ArenaResource {
    pub fn new(upstream: Arc<dyn MemoryResource>) -> Self {
        Self::with_cache_size(upstream, DEFAULT_CACHED_PER_CLASS)
    }

    pub fn with_cache_size(upstream: Arc<dyn MemoryResource>, cached_per_class: usize) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        ArenaResource {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            upstream,
            cached_per_class,
        }
    }

    /// Returns this thread's cached blocks upstream.
    pub fn flush_thread_cache(&self) {
        let cache = CACHES
            .try_with(|caches| {
                let mut caches = caches.borrow_mut();
                let at = caches.iter().position(|c| c.arena == self.id)?;
                Some(caches.swap_remove(at))
            })
            .ok()
            .flatten();
        drop(cache);
    }

    fn with_cache<R>(&self, f: impl FnOnce(&mut ThreadCache) -> R) -> Option<R> {
        CACHES
            .try_with(|caches| {
                let mut caches = caches.borrow_mut();
                let at = match caches.iter().position(|c| c.arena == self.id) {
                    Some(at) => at,
                    None => {
                        caches.push(ThreadCache {
                            arena: self.id,
                            upstream: self.upstream.clone(),
                            classes: std::array::from_fn(|_| Vec::new()),
                        });
                        caches.len() - 1
                    }
                };
                f(&mut caches[at])
            })
            .ok()
    }
}

impl MemoryResource for ArenaResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let small = block_size(bytes).and_then(|(size, class)| Some((size, class?)));
        let (size, class) = match small {
            Some(small) if align <= POOL_ALIGNMENT => small,
            _ => return self.upstream.allocate(bytes, align, stream),
        };
        let cached = self
            .with_cache(|cache| cache.classes[class].pop())
            .flatten();
        // A block freed on another stream is reused only after that stream's work (see Pool).
        let cached = match cached {
            Some((addr, freed_on)) if freed_on != stream => {
                match self.upstream.order_reuse(freed_on, stream) {
                    Ok(()) => Some(addr),
                    Err(_) => {
                        self.with_cache(|cache| cache.classes[class].push((addr, freed_on)));
                        None
                    }
                }
            }
            other => other.map(|(addr, _)| addr),
        };
        match cached {
            Some(addr) => {
                NonNull::new(std::ptr::with_exposed_provenance_mut(addr)).ok_or_else(|| {
                    Error::Resource {
                        what: "arena cache".into(),
                        reason: "held a null block".into(),
                    }
                })
            }
            None => self.upstream.allocate(size, POOL_ALIGNMENT, stream),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        let small = block_size(bytes).and_then(|(size, class)| Some((size, class?)));
        let (size, class) = match small {
            Some(small) if align <= POOL_ALIGNMENT => small,
            // SAFETY: large or over-aligned blocks came from upstream with these arguments.
            _ => return unsafe { self.upstream.deallocate(ptr, bytes, align, stream) },
        };
        let addr = ptr.as_ptr().expose_provenance();
        let limit = self
            .cached_per_class
            .min((CACHED_BYTES_PER_CLASS / size).max(1));
        let kept = self
            .with_cache(|cache| {
                let list = &mut cache.classes[class];
                (list.len() < limit)
                    .then(|| list.push((addr, stream)))
                    .is_some()
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: small blocks came from `upstream.allocate(size, POOL_ALIGNMENT)`.
            unsafe { self.upstream.deallocate(ptr, size, POOL_ALIGNMENT, stream) };
        }
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
