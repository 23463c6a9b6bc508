//! Frees a resource cannot vouch for: a pool and a monotonic resource refuse them without
//! corrupting anything, counters never wrap, and the faces' checked frees name the address.
//! Deterministic, so Miri runs them all.

use std::ptr::NonNull;
use std::sync::Arc;

use super::*;

fn system() -> Arc<dyn MemoryResource> {
    Arc::new(SystemResource::new())
}

fn counted_pool() -> (Arc<StatsResource>, PoolResource) {
    let upstream = Arc::new(StatsResource::new(system()));
    let config = PoolConfig {
        initial: 1 << 20,
        maximum: None,
    };
    (upstream.clone(), PoolResource::new(upstream, config))
}

fn address(addr: usize) -> NonNull<u8> {
    NonNull::new(std::ptr::without_provenance_mut(addr)).unwrap()
}

#[test]
fn a_pool_refuses_an_address_it_never_handed_out() {
    let (_, pool) = counted_pool();
    let held = pool.allocate(64, 8, Stream::HOST).unwrap();
    let before = pool.usage();
    let inside = address(held.as_ptr() as usize + 512);
    for foreign in [address(0x1000), inside] {
        let err = pool
            .try_deallocate(foreign, 64, 8, Stream::HOST)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("0x{:x}", foreign.as_ptr() as usize)),
            "{text}"
        );
        assert!(text.contains("not a block of this pool in use"), "{text}");
        // SAFETY: deliberately breaks the contract: the pool must drop the free.
        unsafe { pool.deallocate(foreign, 64, 8, Stream::HOST) };
    }
    assert_eq!(pool.usage(), before, "refused frees change nothing");
    let next = pool.allocate(64, 8, Stream::HOST).unwrap();
    assert_ne!(
        next.as_ptr() as usize,
        0x1000,
        "the foreign address was never pooled"
    );
    assert_ne!(next, inside);
    pool.try_deallocate(next, 64, 8, Stream::HOST).unwrap();
    pool.try_deallocate(held, 64, 8, Stream::HOST).unwrap();
    assert_eq!(pool.usage().in_use, 0);
}

#[test]
fn a_pool_refuses_a_double_free_and_never_hands_a_block_out_twice() {
    let (_, pool) = counted_pool();
    for bytes in [64, 5 << 20] {
        let p = pool.allocate(bytes, 8, Stream::HOST).unwrap();
        pool.try_deallocate(p, bytes, 8, Stream::HOST).unwrap();
        let err = pool.try_deallocate(p, bytes, 8, Stream::HOST).unwrap_err();
        assert!(err.to_string().contains("a double free"), "{err}");
        // SAFETY: deliberately breaks the contract (a second free): the pool must drop it.
        unsafe { pool.deallocate(p, bytes, 8, Stream::HOST) };
        assert_eq!(pool.usage().in_use, 0, "in use never wraps");
        let a = pool.allocate(bytes, 8, Stream::HOST).unwrap();
        let b = pool.allocate(bytes, 8, Stream::HOST).unwrap();
        assert_ne!(a, b, "{bytes} bytes: one block handed out twice");
        pool.try_deallocate(a, bytes, 8, Stream::HOST).unwrap();
        pool.try_deallocate(b, bytes, 8, Stream::HOST).unwrap();
    }
}

#[test]
fn a_pool_refuses_a_free_of_another_size_and_keeps_the_block() {
    let (_, pool) = counted_pool();
    let p = pool.allocate(64, 8, Stream::HOST).unwrap();
    let err = pool
        .try_deallocate(p, 1 << 20, 8, Stream::HOST)
        .unwrap_err();
    assert!(
        err.to_string().contains("but it is a 256-byte block"),
        "{err}"
    );
    assert_eq!(pool.usage().in_use, 256, "still out");
    // Another request that rounds to the same block is the same block.
    pool.try_deallocate(p, 200, 8, Stream::HOST).unwrap();
    assert_eq!(pool.usage().in_use, 0);
}

#[test]
fn a_pool_vouches_for_over_aligned_blocks_before_passing_them_upstream() {
    let (upstream, pool) = counted_pool();
    let p = pool.allocate(10, 4096, Stream::HOST).unwrap();
    assert_eq!(upstream.statistics().current_count, 1);
    let wrong = pool.try_deallocate(p, 10, 8192, Stream::HOST).unwrap_err();
    assert!(
        wrong.to_string().contains("10 bytes aligned to 4096"),
        "{wrong}"
    );
    pool.try_deallocate(p, 10, 4096, Stream::HOST).unwrap();
    assert_eq!(upstream.statistics().current_count, 0);
    // SAFETY: deliberately breaks the contract: neither free may reach upstream.
    unsafe {
        pool.deallocate(p, 10, 4096, Stream::HOST);
        pool.deallocate(address(0x2000), 10, 4096, Stream::HOST);
    }
    assert_eq!(upstream.statistics().current_count, 0);
    assert_eq!(upstream.statistics().current_bytes, 0);
}

#[test]
fn a_monotonic_resource_drops_frees_of_blocks_not_out() {
    let upstream = Arc::new(StatsResource::new(system()));
    let mono = MonotonicResource::new(upstream.clone(), 1024).unwrap();
    let first = mono.allocate(600, 8, Stream::HOST).unwrap();
    let second = mono.allocate(600, 8, Stream::HOST).unwrap(); // chunk 2; chunk 1 retired
    let kept = mono.allocate(8, 8, Stream::HOST).unwrap(); // also in chunk 2
                                                           // SAFETY: `second` came from this resource, freed once; the rest deliberately break the
                                                           // contract (a double free, foreign addresses) and must change nothing.
    unsafe {
        mono.deallocate(second, 600, 8, Stream::HOST);
        mono.deallocate(second, 600, 8, Stream::HOST);
        mono.deallocate(address(0x1000), 8, 8, Stream::HOST);
        mono.deallocate(address(usize::MAX & !7), 8, 8, Stream::HOST);
    }
    assert_eq!(
        mono.usage(),
        MonotonicUsage {
            chunks: 2,
            live_blocks: 2
        },
        "chunk 1 still holds `first`, chunk 2 `kept`"
    );
    // SAFETY: live blocks of this resource, freed once each.
    unsafe {
        mono.deallocate(first, 600, 8, Stream::HOST);
        mono.deallocate(kept, 8, 8, Stream::HOST);
    }
    drop(mono);
    assert_eq!(upstream.statistics().current_count, 0);
}

#[test]
fn counters_stop_at_zero_when_a_free_breaks_the_contract() {
    let pool = || -> Arc<dyn MemoryResource> {
        Arc::new(PoolResource::new(system(), PoolConfig::default()))
    };
    let stats = StatsResource::new(pool());
    let limit = LimitResource::new(pool(), 1 << 20);
    let p = stats.allocate(64, 8, Stream::HOST).unwrap();
    let q = limit.allocate(64, 8, Stream::HOST).unwrap();
    // SAFETY: each block freed once, then once more on purpose: the pools below refuse the
    // second free, and the counters must not wrap.
    unsafe {
        stats.deallocate(p, 64, 8, Stream::HOST);
        stats.deallocate(p, 64, 8, Stream::HOST);
        limit.deallocate(q, 64, 8, Stream::HOST);
        limit.deallocate(q, 64, 8, Stream::HOST);
    }
    let s = stats.statistics();
    assert_eq!((s.current_bytes, s.current_count), (0, 0));
    assert_eq!(limit.in_use(), 0);
}

#[test]
fn a_checked_free_names_what_it_refuses_and_frees_what_it_vouches_for() {
    let stats = Arc::new(StatsResource::new(system()));
    let resource: Arc<dyn MemoryResource> = stats.clone();
    let other: Arc<dyn MemoryResource> = Arc::new(StatsResource::new(system()));
    let p = checked_allocate(&resource, 100, 64, Stream::HOST).unwrap();
    let at = p.as_ptr() as usize;
    let refused = |r: &Arc<dyn MemoryResource>, addr: usize, bytes, align| {
        checked_deallocate(r, addr, bytes, align, Stream::HOST)
            .unwrap_err()
            .to_string()
    };
    let foreign = refused(&resource, 0x1000, 100, 64);
    assert!(
        foreign.contains("free of 0x1000") && foreign.contains("double free"),
        "{foreign}"
    );
    assert!(refused(&other, at, 100, 64).contains("another resource"));
    assert!(refused(&resource, at, 101, 64).contains("allocated as 100 bytes aligned to 64"));
    assert!(refused(&resource, at, 100, 128).contains("stays allocated"));
    assert_eq!(
        stats.statistics().current_count,
        1,
        "nothing refused reached the resource"
    );
    checked_deallocate(&resource, at, 100, 64, Stream::HOST).unwrap();
    assert_eq!(stats.statistics().current_count, 0);
    assert!(refused(&resource, at, 100, 64).contains("a double free"));
    assert!(refused(&resource, 0, 100, 64).contains("free of 0x0"));
}
