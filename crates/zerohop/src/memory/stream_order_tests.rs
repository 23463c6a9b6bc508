//! The pool's stream-ordered reuse, against an upstream that records the orderings asked of
//! it (host memory standing in for a device: the pool only sees addresses and streams).

use std::num::NonZeroUsize;

use super::CudaStream;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::*;
use crate::device::Device;
use crate::error::{Error, Result};

#[derive(Debug, Default)]
struct Ordering {
    calls: Mutex<Vec<(usize, usize)>>,
    fail: Mutex<bool>,
    system: SystemResource,
}

impl MemoryResource for Ordering {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        self.system.allocate(bytes, align, stream)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: forwarded unchanged from the pool, which got the block from `allocate`.
        unsafe { self.system.deallocate(ptr, bytes, align, stream) }
    }
    fn device(&self) -> Device {
        Device::CPU
    }
    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        if *self.fail.lock().unwrap() {
            return Err(Error::InvalidArgument {
                what: "stream".into(),
                reason: "event failed".into(),
            });
        }
        self.calls
            .lock()
            .unwrap()
            .push((freed_on.raw(), next.raw()));
        Ok(())
    }
}

fn pool() -> (Arc<Ordering>, PoolResource) {
    let upstream = Arc::new(Ordering::default());
    let config = PoolConfig {
        initial: 32 << 20,
        maximum: None,
    };
    let pool = PoolResource::new(upstream.clone(), config);
    (upstream, pool)
}

fn calls(upstream: &Ordering) -> Vec<(usize, usize)> {
    std::mem::take(&mut *upstream.calls.lock().unwrap())
}

const A: Stream = Stream::on(CudaStream::new(NonZeroUsize::new(0xa).unwrap()));
const B: Stream = Stream::on(CudaStream::new(NonZeroUsize::new(0xb).unwrap()));
const C: Stream = Stream::on(CudaStream::new(NonZeroUsize::new(0xc).unwrap()));

#[test]
fn a_block_reused_on_its_own_stream_needs_no_ordering() {
    let (upstream, pool) = pool();
    for bytes in [1000, 8 << 20] {
        let p = pool.allocate(bytes, 256, A).unwrap();
        // SAFETY: allocated just above with these arguments.
        unsafe { pool.deallocate(p, bytes, 256, A) };
        let q = pool.allocate(bytes, 256, A).unwrap();
        assert_eq!(p, q);
        // SAFETY: as above.
        unsafe { pool.deallocate(q, bytes, 256, A) };
    }
    assert!(calls(&upstream).is_empty());
}

#[test]
fn a_block_freed_on_another_stream_is_ordered_first() {
    let (upstream, pool) = pool();
    for bytes in [1000, 8 << 20] {
        let p = pool.allocate(bytes, 256, A).unwrap();
        // SAFETY: allocated just above with these arguments.
        unsafe { pool.deallocate(p, bytes, 256, A) };
        let q = pool.allocate(bytes, 256, B).unwrap();
        assert_eq!(p, q, "the block is reused");
        assert_eq!(
            calls(&upstream),
            vec![(A.raw(), B.raw())],
            "{bytes}: B waits for A"
        );
        // SAFETY: as above.
        unsafe { pool.deallocate(q, bytes, 256, B) };
    }
}

#[test]
fn small_blocks_freed_on_the_same_stream_are_preferred() {
    let (upstream, pool) = pool();
    let a = pool.allocate(512, 256, A).unwrap();
    let b = pool.allocate(512, 256, B).unwrap();
    // SAFETY: both allocated just above with these arguments.
    unsafe {
        pool.deallocate(b, 512, 256, B);
        pool.deallocate(a, 512, 256, A);
    }
    let again = pool.allocate(512, 256, B).unwrap();
    assert_eq!(again, b);
    assert!(calls(&upstream).is_empty(), "B's own block needed no event");
    // SAFETY: allocated just above with these arguments.
    unsafe { pool.deallocate(again, 512, 256, B) };
}

#[test]
fn a_merged_range_waits_for_every_stream_it_was_freed_on() {
    let (upstream, pool) = pool();
    let big = 8 << 20;
    let a = pool.allocate(big, 256, A).unwrap();
    let b = pool.allocate(big, 256, B).unwrap();
    assert_eq!(
        a.as_ptr() as usize + big,
        b.as_ptr() as usize,
        "neighbours in one chunk"
    );
    // SAFETY: both allocated just above with these arguments.
    unsafe {
        pool.deallocate(a, big, 256, A);
        pool.deallocate(b, big, 256, B);
    }
    let both = pool.allocate(2 * big, 256, C).unwrap();
    assert_eq!(both, a);
    let mut seen = calls(&upstream);
    seen.sort();
    assert_eq!(seen, vec![(A.raw(), C.raw()), (B.raw(), C.raw())]);
    // SAFETY: as above.
    unsafe { pool.deallocate(both, 2 * big, 256, C) };
}

#[test]
fn a_failed_ordering_is_an_error_and_loses_nothing() {
    let (upstream, pool) = pool();
    let p = pool.allocate(1000, 256, A).unwrap();
    // SAFETY: allocated just above with these arguments.
    unsafe { pool.deallocate(p, 1000, 256, A) };
    *upstream.fail.lock().unwrap() = true;
    assert!(pool.allocate(1000, 256, B).is_err());
    assert_eq!(pool.usage().in_use, 0);
    *upstream.fail.lock().unwrap() = false;
    let again = pool.allocate(1000, 256, A).unwrap();
    assert_eq!(again, p, "the block is still there");
    // SAFETY: allocated just above with these arguments.
    unsafe { pool.deallocate(again, 1000, 256, A) };
}

#[test]
fn adaptors_pass_orderings_through() {
    let upstream = Arc::new(Ordering::default());
    let stack: Arc<dyn MemoryResource> =
        Arc::new(StatsResource::new(Arc::new(LimitResource::new(
            Arc::new(TrackingResource::new(upstream.clone(), false)),
            1 << 30,
        ))));
    stack.order_reuse(A, B).unwrap();
    assert_eq!(calls(&upstream), vec![(A.raw(), B.raw())]);
}

#[test]
fn the_arena_orders_cached_blocks_too() {
    let upstream = Arc::new(Ordering::default());
    let arena = ArenaResource::new(upstream.clone());
    let p = arena.allocate(512, 256, A).unwrap();
    // SAFETY: allocated just above with these arguments.
    unsafe { arena.deallocate(p, 512, 256, A) };
    let q = arena.allocate(512, 256, B).unwrap();
    assert_eq!(p, q);
    assert_eq!(calls(&upstream), vec![(A.raw(), B.raw())]);
    // SAFETY: as above.
    unsafe { arena.deallocate(q, 512, 256, B) };
    arena.flush_thread_cache();
}
