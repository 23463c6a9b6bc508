//! Behaviour of every resource and adaptor, alone and stacked. The deterministic tests run
//! under Miri; the property and stress tests are too slow there and run natively.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::*;
use crate::error::Error;
use crate::value::Value;

fn system() -> Arc<dyn MemoryResource> {
    Arc::new(SystemResource::new())
}

/// Fills a block with a pattern and checks it later: overlapping blocks would clobber each
/// other's patterns.
struct Block {
    ptr: NonNull<u8>,
    bytes: usize,
    align: usize,
    tag: u8,
}

// SAFETY: a Block is an exclusively owned allocation; moving it to another thread moves
// that ownership, and every resource here may be freed from any thread.
unsafe impl Send for Block {}

impl Block {
    fn new(resource: &dyn MemoryResource, bytes: usize, align: usize, tag: u8) -> Block {
        let ptr = resource.allocate(bytes, align, Stream::HOST).unwrap();
        assert_eq!(
            ptr.as_ptr() as usize % align,
            0,
            "alignment {align} not honoured"
        );
        // SAFETY: the block is `bytes` long and exclusively ours.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), tag, bytes) };
        Block {
            ptr,
            bytes,
            align,
            tag,
        }
    }

    /// Samples the pattern (both ends and every 4 KiB): enough to catch a block handed out
    /// twice, cheap enough for millions of checks in debug builds.
    fn check(&self) {
        // SAFETY: the block is live and `bytes` long.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.bytes) };
        let ends = bytes.iter().take(64).chain(bytes.iter().rev().take(64));
        let sampled = bytes.iter().step_by(4096);
        assert!(
            ends.chain(sampled).all(|&b| b == self.tag),
            "block was overwritten"
        );
    }

    #[cfg_attr(miri, allow(dead_code))]
    fn range(&self) -> (usize, usize) {
        let start = self.ptr.as_ptr() as usize;
        (start, start + self.bytes)
    }

    fn free(self, resource: &dyn MemoryResource) {
        self.check();
        // SAFETY: allocated from `resource` with these arguments, freed once.
        unsafe { resource.deallocate(self.ptr, self.bytes, self.align, Stream::HOST) };
    }
}

#[test]
fn block_sizes_round_to_classes_and_granules() {
    assert_eq!(block_size(1), Some((256, Some(0))));
    assert_eq!(block_size(256), Some((256, Some(0))));
    assert_eq!(block_size(257), Some((512, Some(1))));
    assert_eq!(block_size(1000), Some((1024, Some(3))));
    assert_eq!(block_size(1025), Some((1280, Some(4))));
    assert_eq!(block_size(2048), Some((2048, Some(7))));
    assert_eq!(block_size(2049), Some((2560, Some(8))));
    assert_eq!(
        block_size(CLASS_MAX),
        Some((CLASS_MAX, Some(CLASS_COUNT - 1)))
    );
    assert_eq!(block_size(CLASS_MAX + 1), Some((CLASS_MAX + 256, None)));
    assert_eq!(block_size(usize::MAX), None);
}

#[test]
fn every_request_fits_its_class_with_at_most_a_quarter_wasted() {
    let mut previous = 0;
    for (class, &size) in CLASS_SIZES.iter().enumerate() {
        assert!(size > previous && size % POOL_ALIGNMENT == 0);
        assert_eq!(block_size(size), Some((size, Some(class))));
        assert_eq!(block_size(previous + 1), Some((size, Some(class))));
        if previous >= 1024 {
            assert!(
                (size - previous - 1) * 4 <= size,
                "class {class} wastes too much"
            );
        }
        previous = size;
    }
}

#[test]
fn pool_reuses_freed_blocks() {
    let config = PoolConfig {
        initial: 16 << 20,
        maximum: None,
    };
    let pool = PoolResource::new(system(), config);
    let a = Block::new(&pool, 100, 64, 1);
    let addr = a.ptr;
    a.free(&pool);
    let b = Block::new(&pool, 200, 64, 2);
    assert_eq!(b.ptr, addr, "a freed small block is handed out again");
    b.free(&pool);
    let big = Block::new(&pool, 5_000_000, 128, 3);
    let big_addr = big.ptr;
    big.free(&pool);
    let again = Block::new(&pool, 4_500_000, 128, 4);
    assert_eq!(again.ptr, big_addr, "best fit reuses the freed large block");
    again.free(&pool);
    assert_eq!(pool.usage().in_use, 0);
    assert_eq!(pool.usage().chunks, 1);
}

#[test]
fn pool_coalesces_neighbours_and_releases_idle_chunks() {
    let config = PoolConfig {
        initial: 32 << 20,
        maximum: None,
    };
    let pool = PoolResource::new(system(), config);
    let blocks: Vec<Block> = (0..4)
        .map(|i| Block::new(&pool, 5_000_000, 256, i))
        .collect();
    let first = blocks[0].ptr;
    let freed_last = blocks[2].ptr;
    // Free in an order that needs merging on both sides.
    let mut blocks = blocks.into_iter().map(Some).collect::<Vec<_>>();
    for i in [1, 3, 0, 2] {
        blocks[i].take().unwrap().free(&pool);
    }
    let usage = pool.usage();
    assert_eq!(usage.in_use, 0);
    assert_eq!(
        usage.free_blocks, 5,
        "the four blocks kept whole for their size, and the chunk's tail"
    );
    let again = Block::new(&pool, 5_000_000, 256, 5);
    assert_eq!(
        again.ptr, freed_last,
        "the block of that size freed last, as it was"
    );
    again.free(&pool);
    // Another size: the cached blocks merge with the tail first, and the request fits there.
    let whole = Block::new(&pool, 20_000_000, 256, 9);
    assert_eq!(
        pool.usage().free_blocks,
        1,
        "all four merged with the chunk's tail"
    );
    assert_eq!(whole.ptr, first);
    whole.free(&pool);
    assert_eq!(pool.release(), usage.reserved);
    assert_eq!(pool.usage(), PoolUsage::default());
}

#[test]
fn pool_maximum_is_a_clear_error() {
    let pool = PoolResource::new(
        system(),
        PoolConfig {
            initial: 0,
            maximum: Some(8 << 20),
        },
    );
    let held = Block::new(&pool, 5 << 20, 256, 1);
    let err = pool.allocate(5 << 20, 256, Stream::HOST).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }));
    assert!(err.to_string().contains("pool maximum 8388608"), "{err}");
    held.free(&pool);
    Block::new(&pool, 5 << 20, 256, 2).free(&pool);
    // Cached class blocks are merged back before the pool gives up.
    let small: Vec<Block> = (0..7).map(|i| Block::new(&pool, 1 << 20, 256, i)).collect();
    small.into_iter().for_each(|b| b.free(&pool));
    Block::new(&pool, 5 << 20, 256, 3).free(&pool);
}

#[test]
fn pool_passes_over_aligned_requests_upstream() {
    let pool = PoolResource::new(system(), PoolConfig::default());
    let b = Block::new(&pool, 10, 4096, 7);
    b.free(&pool);
    assert_eq!(pool.usage().reserved, 0);
}

#[test]
fn limit_refuses_with_the_numbers_and_recovers() {
    let limit = LimitResource::new(system(), 1000);
    let a = Block::new(&limit, 600, 64, 1);
    match limit.allocate(500, 64, Stream::HOST) {
        Err(Error::LimitExceeded {
            requested,
            in_use,
            limit,
        }) => assert_eq!((requested, in_use, limit), (500, 600, 1000)),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert_eq!(limit.in_use(), 600);
    a.free(&limit);
    Block::new(&limit, 1000, 64, 2).free(&limit);
    assert_eq!(limit.in_use(), 0);
}

#[test]
fn stats_count_current_peak_and_sizes() {
    let stats = StatsResource::new(system());
    let a = Block::new(&stats, 100, 8, 1);
    let b = Block::new(&stats, 3000, 8, 2);
    a.free(&stats);
    let s = stats.statistics();
    assert_eq!(
        (s.current_bytes, s.peak_bytes, s.total_bytes),
        (3000, 3100, 3100)
    );
    assert_eq!((s.current_count, s.peak_count, s.total_count), (1, 2, 2));
    assert_eq!(s.histogram[size_bucket(100)], 1);
    assert_eq!(s.histogram[size_bucket(3000)], 1);
    assert_eq!(size_bucket(128), 7);
    assert_eq!(size_bucket(129), 8);
    // The record every face reports: the figures by name, the histogram's non-empty buckets.
    let record = s.record();
    let fields = crate::value::Fields::of(&record, "statistics").unwrap();
    assert_eq!(fields.int::<u64>("peak_bytes", "bytes").unwrap(), 3100);
    assert_eq!(fields.int::<u64>("failed_count", "count").unwrap(), 0);
    let pairs = |v: &Value| match v {
        Value::List(items) => items.len(),
        _ => usize::MAX,
    };
    assert_eq!(pairs(fields.required("histogram").unwrap()), 2);
    b.free(&stats);
    assert_eq!(stats.statistics().current_bytes, 0);
}

#[test]
fn tracking_reports_a_planted_leak() {
    let tracking = TrackingResource::new(system(), false);
    let freed = Block::new(&tracking, 64, 8, 1);
    let leaked = Block::new(&tracking, 4096, 8, 2);
    freed.free(&tracking);
    let live = tracking.outstanding();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].address, leaked.ptr.as_ptr() as usize);
    assert_eq!(live[0].bytes, 4096);
    let record = live[0].record();
    let fields = crate::value::Fields::of(&record, "leak").unwrap();
    assert_eq!(fields.int::<usize>("bytes", "bytes").unwrap(), 4096);
    assert_eq!(fields.required("backtrace").unwrap(), &Value::None);
    let report = tracking.report();
    assert!(
        report.contains("1 allocation(s) outstanding, 4096 bytes"),
        "{report}"
    );
    leaked.free(&tracking);
    assert!(tracking.report().is_empty());
}

#[test]
fn tracking_refuses_double_and_foreign_frees_instead_of_corrupting_the_pool() {
    let pool = Arc::new(PoolResource::new(
        system(),
        PoolConfig {
            initial: 1 << 20,
            maximum: None,
        },
    ));
    let tracking = TrackingResource::new(pool, false);
    let block = Block::new(&tracking, 256, 8, 1);
    let ptr = block.ptr;
    block.free(&tracking);
    // SAFETY: deliberately wrong calls; the tracker must drop them, not pass them on.
    unsafe {
        tracking.deallocate(ptr, 256, 8, Stream::HOST);
        tracking.deallocate(
            NonNull::new(std::ptr::without_provenance_mut(0x7000)).unwrap(),
            64,
            8,
            Stream::HOST,
        );
    }
    let invalid = tracking.invalid_frees();
    assert_eq!(invalid.len(), 2);
    assert_eq!(invalid[0].address, ptr.as_ptr() as usize);
    assert_eq!(invalid[0].allocated_bytes, None);
    let record = invalid[0].record();
    let fields = crate::value::Fields::of(&record, "refused free").unwrap();
    assert_eq!(
        fields.int::<usize>("address", "address").unwrap(),
        ptr.as_ptr() as usize
    );
    assert_eq!(fields.required("allocated_bytes").unwrap(), &Value::None);
    assert!(tracking.report().contains("invalid free of"));
    // Had the double free reached the pool, these two would share an address.
    let a = Block::new(&tracking, 256, 8, 2);
    let b = Block::new(&tracking, 256, 8, 3);
    assert_ne!(a.ptr, b.ptr);
    a.free(&tracking);
    b.free(&tracking);
    // A wrong size is reported, and the block is freed with its real size.
    let c = Block::new(&tracking, 512, 8, 4);
    // SAFETY: a live allocation of this tracker, freed once (with a wrong size on purpose).
    unsafe { tracking.deallocate(c.ptr, 100, 8, Stream::HOST) };
    assert_eq!(tracking.invalid_frees()[2].allocated_bytes, Some(512));
    assert!(tracking.outstanding().is_empty());
}

#[test]
#[cfg_attr(miri, ignore = "backtrace capture is slow and unsupported under Miri")]
fn tracking_captures_where_the_leak_was_made() {
    fn plant_leak(tracking: &TrackingResource) -> Block {
        Block::new(tracking, 32, 8, 3)
    }
    let tracking = TrackingResource::new(system(), true);
    let leaked = plant_leak(&tracking);
    let report = tracking.report();
    assert!(report.contains("plant_leak"), "backtrace missing: {report}");
    leaked.free(&tracking);
}

#[test]
#[cfg_attr(miri, ignore = "backtrace capture is slow and unsupported under Miri")]
fn tracking_records_the_embedding_programs_context() {
    fn caller_line() -> Option<String> {
        Some("pipeline.py:42 in load".into())
    }
    // The first source wins process-wide; another test may not have installed one first.
    assert!(super::set_allocation_context(caller_line));
    assert!(
        !super::set_allocation_context(|| None),
        "second source refused"
    );
    let quiet = TrackingResource::new(system(), false);
    let unrecorded = Block::new(&quiet, 16, 8, 1);
    assert_eq!(
        quiet.outstanding()[0].context,
        None,
        "off without backtraces"
    );
    unrecorded.free(&quiet);
    let tracking = TrackingResource::new(system(), true);
    assert!(
        super::contexts_recorded(),
        "a live recording tracker is announced"
    );
    let leaked = Block::new(&tracking, 32, 8, 3);
    assert_eq!(
        tracking.outstanding()[0].context.as_deref(),
        Some("pipeline.py:42 in load")
    );
    let report = tracking.report();
    assert!(
        report.contains("requested at:\n      pipeline.py:42 in load"),
        "{report}"
    );
    leaked.free(&tracking);
}

#[test]
#[cfg_attr(miri, ignore = "file I/O is isolated under Miri")]
fn log_writes_parseable_csv() {
    let path = std::env::temp_dir().join(format!("zerohop-log-{}.csv", std::process::id()));
    let log = LogResource::new(system(), &path).unwrap();
    let a = Block::new(&log, 123, 8, 1);
    let addr = a.ptr.as_ptr() as usize;
    a.free(&log);
    log.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(LOG_HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2);
    for (row, action) in rows.iter().zip(["allocate", "free"]) {
        assert_eq!(row.len(), 6);
        row[0].parse::<u128>().unwrap();
        assert_eq!(row[2], action);
        assert_eq!(
            usize::from_str_radix(row[3].trim_start_matches("0x"), 16).unwrap(),
            addr
        );
        assert_eq!(row[4], "123");
    }
    assert!(LogResource::new(system(), std::path::Path::new("/nonexistent/dir/x.csv")).is_err());
}

#[test]
fn failure_callback_may_free_memory_and_retry() {
    let limit = Arc::new(LimitResource::new(system(), 1000));
    let hog = Block::new(&*limit, 900, 8, 1);
    let hog = std::sync::Mutex::new(Some(hog));
    let calls = Arc::new(AtomicU32::new(0));
    let (limit2, calls2) = (limit.clone(), calls.clone());
    let retrying = FailureCallbackResource::new(
        limit.clone(),
        Box::new(move |_bytes| {
            calls2.fetch_add(1, Ordering::SeqCst);
            match hog.lock().unwrap().take() {
                Some(block) => {
                    block.free(&*limit2);
                    true
                }
                None => false,
            }
        }),
    );
    let b = Block::new(&retrying, 500, 8, 2);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "freed by the callback, then retried"
    );
    let gave_up = retrying.allocate(900, 8, Stream::HOST).unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(gave_up.to_string().contains("900"), "{gave_up}");
    b.free(&retrying);
}

/// The callback says retry but frees nothing: one retry, then the error, never a loop.
#[test]
fn a_failure_callback_that_frees_nothing_gets_one_retry() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let stubborn = FailureCallbackResource::new(
        Arc::new(LimitResource::new(system(), 100)),
        Box::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            true
        }),
    );
    let err = stubborn.allocate(500, 8, Stream::HOST).unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let text = err.to_string();
    assert!(
        text.contains("500") && text.contains("of 100 bytes"),
        "{text}"
    );
}

/// A callback that allocates through the same resource (and fails) gets a plain refusal, not
/// a second callback; one that panics counts as giving up. The resource works afterwards.
#[test]
fn a_failure_callback_that_allocates_or_panics_leaves_the_resource_usable() {
    // A weak handle: the resource must not own itself through its callback.
    let inner: Arc<std::sync::OnceLock<std::sync::Weak<FailureCallbackResource>>> = Arc::default();
    let (handle, calls) = (inner.clone(), Arc::new(AtomicU32::new(0)));
    let counted = calls.clone();
    let nested = Arc::new(FailureCallbackResource::new(
        Arc::new(LimitResource::new(system(), 100)),
        Box::new(move |bytes| {
            counted.fetch_add(1, Ordering::SeqCst);
            let own = handle.get().and_then(|w| w.upgrade()).expect("set below");
            assert!(
                own.allocate(bytes, 8, Stream::HOST).is_err(),
                "refused plainly"
            );
            false
        }),
    ));
    inner.set(Arc::downgrade(&nested)).unwrap();
    assert!(nested.allocate(500, 8, Stream::HOST).is_err());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no callback inside the callback"
    );
    let ok = nested.allocate(50, 8, Stream::HOST).unwrap();
    // SAFETY: allocated just above with these arguments.
    unsafe { nested.deallocate(ok, 50, 8, Stream::HOST) };

    let panicking = FailureCallbackResource::new(
        Arc::new(LimitResource::new(system(), 100)),
        Box::new(|_| panic!("a callback bug")),
    );
    let err = panicking.allocate(500, 8, Stream::HOST).unwrap_err();
    assert!(err.to_string().contains("requested 500"), "{err}");
    let ok = panicking.allocate(50, 8, Stream::HOST).unwrap();
    // SAFETY: allocated just above with these arguments.
    unsafe { panicking.deallocate(ok, 50, 8, Stream::HOST) };
}

#[test]
fn arena_caches_per_thread_and_flushes_upstream() {
    let stats = Arc::new(StatsResource::new(system()));
    let arena = ArenaResource::with_cache_size(stats.clone(), 2);
    let blocks: Vec<Block> = (0..4).map(|i| Block::new(&arena, 100, 64, i)).collect();
    for b in blocks {
        b.free(&arena);
    }
    assert_eq!(
        stats.statistics().current_count,
        2,
        "two cached, two returned"
    );
    let again = Block::new(&arena, 200, 64, 5);
    assert_eq!(stats.statistics().total_count, 4, "served from the cache");
    again.free(&arena);
    arena.flush_thread_cache();
    assert_eq!(stats.statistics().current_count, 0);
    let large = Block::new(&arena, CLASS_MAX + 1, 64, 6);
    large.free(&arena);
    assert_eq!(stats.statistics().current_count, 0);
}

#[test]
fn registry_has_a_host_default_and_swaps() {
    use crate::device::Device;
    assert!(current_resource(Device::cuda(7)).is_none());
    let host = current_resource(Device::CPU).unwrap();
    assert_eq!(host.device(), Device::CPU);
    let stats: Arc<dyn MemoryResource> = Arc::new(StatsResource::new(system()));
    let cuda7 = Device::cuda(7);
    assert!(set_current_resource(cuda7, stats.clone()).is_none());
    assert!(current_resource(cuda7).unwrap().is_equal(&*stats));
    reset_current_resource(cuda7);
    assert!(current_resource(cuda7).is_none());
}

#[test]
fn a_full_stack_composes() {
    let tracking = Arc::new(TrackingResource::new(system(), false));
    let pool = Arc::new(PoolResource::new(tracking.clone(), PoolConfig::default()));
    let stats = Arc::new(StatsResource::new(pool.clone()));
    let limit = LimitResource::new(stats.clone(), 1 << 22);
    let blocks: Vec<Block> = (0..20)
        .map(|i| Block::new(&limit, 1000 * i + 1, 64, i as u8))
        .collect();
    assert_eq!(
        tracking.outstanding().len(),
        1,
        "the pool took one chunk upstream"
    );
    for b in blocks {
        b.free(&limit);
    }
    assert_eq!(stats.statistics().current_bytes, 0);
    pool.release();
    assert!(tracking.report().is_empty());
}

#[cfg(not(miri))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { bytes: usize, align_pow: u32 },
        Free(usize),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => (prop_oneof![1usize..512, 512usize..70_000, 70_000usize..2_000_000], 0u32..10)
                .prop_map(|(bytes, align_pow)| Op::Alloc { bytes, align_pow }),
            2 => any::<usize>().prop_map(Op::Free),
        ];
        proptest::collection::vec(op, 1..200)
    }

    fn run(resource: &dyn MemoryResource, ops: &[Op]) {
        let mut live: Vec<Block> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Alloc { bytes, align_pow } => {
                    live.push(Block::new(resource, bytes, 1 << align_pow, i as u8));
                }
                Op::Free(pick) if !live.is_empty() => {
                    let at = pick % live.len();
                    live.swap_remove(at).free(resource);
                }
                Op::Free(_) => {}
            }
            // No overlap between any two live blocks.
            let mut ranges: Vec<_> = live.iter().map(Block::range).collect();
            ranges.sort_unstable();
            assert!(
                ranges.windows(2).all(|w| w[0].1 <= w[1].0),
                "live blocks overlap"
            );
        }
        for b in live {
            b.free(resource);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn pool_random_sequences(ops in ops()) {
            let tracking = Arc::new(TrackingResource::new(system(), false));
            let pool = PoolResource::new(tracking.clone(), PoolConfig::default());
            let stats = StatsResource::new(Arc::new(pool));
            run(&stats, &ops);
            let s = stats.statistics();
            prop_assert_eq!(s.current_bytes, 0);
            prop_assert_eq!(s.current_count, 0);
            prop_assert!(s.peak_bytes as u64 <= s.total_bytes);
            drop(stats);
            prop_assert!(tracking.report().is_empty(), "pool returned everything upstream");
        }

        #[test]
        fn arena_random_sequences(ops in ops()) {
            let stats = Arc::new(StatsResource::new(system()));
            let arena = ArenaResource::new(stats.clone());
            run(&arena, &ops);
            arena.flush_thread_cache();
            prop_assert_eq!(stats.statistics().current_bytes, 0);
        }
    }

    #[test]
    fn eight_threads_lose_no_block() {
        let tracking = Arc::new(TrackingResource::new(system(), false));
        let pool = Arc::new(PoolResource::new(tracking.clone(), PoolConfig::default()));
        let arena = Arc::new(ArenaResource::new(pool.clone()));
        let stats = Arc::new(StatsResource::new(arena.clone()));
        std::thread::scope(|scope| {
            for t in 0..8u8 {
                let stats = stats.clone();
                let arena = arena.clone();
                scope.spawn(move || {
                    let mut live = Vec::new();
                    let mut seed = t as usize + 1;
                    for i in 0..4000usize {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let bytes = [16, 300, 5000, 70_000, 300_000][(seed >> 33) % 5] + i % 7;
                        live.push(Block::new(&*stats, bytes, 64, t));
                        if live.len() > 32 || (seed >> 40).is_multiple_of(3) {
                            let at = (seed >> 20) % live.len();
                            live.swap_remove(at).free(&*stats);
                        }
                    }
                    for b in live {
                        b.free(&*stats);
                    }
                    arena.flush_thread_cache();
                });
            }
        });
        assert_eq!(stats.statistics().current_count, 0);
        assert_eq!(pool.usage().in_use, 0);
        pool.release();
        assert!(tracking.report().is_empty());
    }
}

#[test]
fn stream_zero_is_refused_as_a_cuda_stream_in_the_words_every_face_uses() {
    let err = Stream::cuda(0).unwrap_err();
    assert!(matches!(err, crate::Error::Stream { .. }), "{err:?}");
    assert!(err.to_string().contains(super::AMBIGUOUS_STREAM), "{err}");
    assert_eq!(Stream::cuda(1).unwrap(), Stream::LEGACY);
    assert_eq!(Stream::cuda(0xdead_beef).unwrap().raw(), 0xdead_beef);
}
