//! `Monotonic`: consecutive blocks carved from large chunks, never reused. A chunk goes back
//! upstream once a newer chunk has taken its place and every block carved from it is freed.
//!
//! What it is for: many results handed to another process in shared memory. Over `Shared`, one
//! chunk is one segment, so a consumer maps a few segments for thousands of results instead of
//! one per result (one file descriptor each). And because a block is never handed out twice,
//! the producer may free a result as soon as the consumer has mapped it: the consumer's mapping
//! keeps the pages, and nothing new is ever written over them. A pool would reuse the block.

use std::collections::{BTreeMap, HashMap};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Bytes a chunk has unless a request needs more.
pub const DEFAULT_MONOTONIC_CHUNK: usize = 64 << 20;

#[derive(Debug)]
struct Chunk {
    len: usize,
    align: usize,
    stream: Stream,
    /// Blocks carved from it and not yet freed.
    live: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Every chunk held, by start address.
    chunks: BTreeMap<usize, Chunk>,
    /// The chunk new blocks come from, and the offset of its first free byte.
    current: Option<(usize, usize)>,
    /// Blocks out, with the start of their chunk: a free of anything else (a double free, an
    /// address never handed out) must not count against a chunk, which would then go back
    /// upstream under blocks still in use.
    blocks: HashMap<usize, usize>,
}

#[derive(Debug)]
pub struct MonotonicResource {
    upstream: Arc<dyn MemoryResource>,
    chunk: usize,
    state: Mutex<State>,
}

/// Chunks held and bytes carved from them, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicUsage {
    pub chunks: usize,
    pub live_blocks: usize,
}

impl MonotonicUsage {
    /// The figures by name, as every language's `usage()` reports them.
    pub fn fields(&self) -> Vec<(&'static str, usize)> {
        vec![("chunks", self.chunks), ("live_blocks", self.live_blocks)]
    }
}

impl MonotonicResource {
    /// Chunks of `chunk` bytes (at least one page's worth is sensible) from `upstream`.
    pub fn new(upstream: Arc<dyn MemoryResource>, chunk: usize) -> Result<Self> {
        if chunk == 0 {
            return Err(Error::Resource {
                what: "monotonic chunk size".into(),
                reason: "0 bytes".into(),
            });
        }
        Ok(MonotonicResource {
            upstream,
            chunk,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the bookkeeping half-written (every update is one
        // statement), so a poisoned lock's state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn usage(&self) -> MonotonicUsage {
        let state = self.state();
        MonotonicUsage {
            chunks: state.chunks.len(),
            live_blocks: state.chunks.values().map(|c| c.live).sum(),
        }
    }

    /// Gives `start`'s chunk back upstream.
    fn free_chunk(&self, start: usize, chunk: Chunk) {
        // SAFETY: `start` and the chunk's length and alignment are what `allocate` got from
        // upstream; the chunk has no live blocks and is no longer current, so nothing uses it.
        unsafe {
            self.upstream.deallocate(
                NonNull::new(start as *mut u8).expect("chunks are non-NULL"),
                chunk.len,
                chunk.align,
                chunk.stream,
            )
        }
    }
}

impl MemoryResource for MonotonicResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let too_big = || Error::OutOfMemory {
            requested: bytes,
            device: self.upstream.device(),
            reason: "the size overflows when aligned".into(),
        };
        let bytes = bytes.max(1);
        let mut state = self.state();
        if let Some((start, used)) = state.current {
            let offset = (start + used)
                .checked_next_multiple_of(align)
                .ok_or_else(too_big)?
                - start;
            let chunk = state
                .chunks
                .get_mut(&start)
                .expect("the current chunk is held");
            if offset
                .checked_add(bytes)
                .is_some_and(|end| end <= chunk.len)
            {
                chunk.live += 1;
                state.current = Some((start, offset + bytes));
                state.blocks.insert(start + offset, start);
                return Ok(NonNull::new((start + offset) as *mut u8).expect("inside a chunk"));
            }
        }
        let len = bytes.max(self.chunk);
        let chunk_align = align.max(super::DEFAULT_ALIGNMENT);
        let ptr = self.upstream.allocate(len, chunk_align, stream)?;
        let start = ptr.as_ptr() as usize;
        state.chunks.insert(
            start,
            Chunk {
                len,
                align: chunk_align,
                stream,
                live: 1,
            },
        );
        state.blocks.insert(start, start);
        // The old current chunk retires; with no live blocks it goes back now.
        if let Some((old, _)) = state.current.replace((start, bytes)) {
            if state.chunks.get(&old).is_some_and(|c| c.live == 0) {
                let chunk = state.chunks.remove(&old).expect("just seen");
                drop(state);
                self.free_chunk(old, chunk);
            }
        }
        Ok(ptr)
    }

    /// A free of a block not out (never handed out, or already freed) changes nothing.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, _bytes: usize, _align: usize, _stream: Stream) {
        let addr = ptr.as_ptr() as usize;
        let mut state = self.state();
        let current = state.current.map(|(s, _)| s);
        let Some(start) = state.blocks.remove(&addr) else {
            return;
        };
        let chunk = state
            .chunks
            .get_mut(&start)
            .expect("a chunk is held while blocks of it are out");
        chunk.live -= 1;
        if chunk.live == 0 && current != Some(start) {
            let chunk = state.chunks.remove(&start).expect("just seen");
            drop(state);
            self.free_chunk(start, chunk);
        }
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}

impl Drop for MonotonicResource {
    fn drop(&mut self) {
        // Blocks still out keep their chunk's memory valid only while the resource lives;
        // callers hold an `Arc` to it from every buffer, so at this point none are out.
        let state = std::mem::take(&mut *self.state());
        for (start, chunk) in state.chunks {
            self.free_chunk(start, chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{StatsResource, SystemResource};

    fn counted(chunk: usize) -> (Arc<StatsResource>, MonotonicResource) {
        let stats = Arc::new(StatsResource::new(Arc::new(SystemResource::new())));
        let mono = MonotonicResource::new(stats.clone(), chunk).unwrap();
        (stats, mono)
    }

    #[test]
    fn blocks_are_consecutive_and_never_reused() {
        let (_, mono) = counted(4096);
        let a = mono.allocate(100, 64, Stream::HOST).unwrap();
        let b = mono.allocate(100, 64, Stream::HOST).unwrap();
        assert_eq!(
            b.as_ptr() as usize - a.as_ptr() as usize,
            128,
            "aligned, consecutive"
        );
        // SAFETY: `a` came from this resource with these sizes.
        unsafe { mono.deallocate(a, 100, 64, Stream::HOST) };
        let c = mono.allocate(100, 64, Stream::HOST).unwrap();
        assert_ne!(c, a, "a freed block is not handed out again");
        assert_eq!(
            mono.usage(),
            MonotonicUsage {
                chunks: 1,
                live_blocks: 2
            }
        );
        // SAFETY: as above.
        unsafe {
            mono.deallocate(b, 100, 64, Stream::HOST);
            mono.deallocate(c, 100, 64, Stream::HOST);
        }
    }

    #[test]
    fn a_chunk_goes_back_once_retired_and_empty() {
        let (stats, mono) = counted(1024);
        let first = mono.allocate(600, 8, Stream::HOST).unwrap();
        let second = mono.allocate(600, 8, Stream::HOST).unwrap(); // does not fit: chunk 2
        assert_eq!(stats.statistics().current_count, 2);
        // SAFETY: each block came from this resource with these sizes, freed once.
        unsafe { mono.deallocate(first, 600, 8, Stream::HOST) };
        assert_eq!(
            stats.statistics().current_count,
            1,
            "chunk 1 retired and empty: freed"
        );
        unsafe { mono.deallocate(second, 600, 8, Stream::HOST) };
        assert_eq!(
            stats.statistics().current_count,
            1,
            "the current chunk stays for reuse"
        );
        let big = mono.allocate(5000, 8, Stream::HOST).unwrap(); // its own, larger chunk
        assert_eq!(
            stats.statistics().current_count,
            1,
            "the empty current chunk went back"
        );
        assert_eq!(
            mono.usage(),
            MonotonicUsage {
                chunks: 1,
                live_blocks: 1
            }
        );
        // SAFETY: as above.
        unsafe { mono.deallocate(big, 5000, 8, Stream::HOST) };
        drop(mono);
        assert_eq!(stats.statistics().current_count, 0, "everything given back");
    }

    #[test]
    fn a_zero_chunk_size_is_refused() {
        let up: Arc<dyn MemoryResource> = Arc::new(SystemResource::new());
        assert!(MonotonicResource::new(up, 0).is_err());
    }
}
