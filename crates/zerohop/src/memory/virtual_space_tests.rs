//! `VirtualResource` and a `Pool` over it, on a host stand-in for CUDA's reserved range (one
//! real host allocation, so Miri checks every byte the blocks are used through), against the
//! same pool over chunks that may not merge.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    AddressSpace, MemoryResource, PoolConfig, PoolResource, StatsResource, Stream, VirtualResource,
};
use crate::device::Device;
use crate::error::Result;
use crate::memory::CudaStream;

const GRANULE: usize = 4096;

/// A reserved range made of one host allocation; "backing" only records the piece, and
/// checks the resource never backs a piece twice or gives back one it did not back.
#[derive(Debug)]
struct HostSpace {
    base: NonNull<u8>,
    length: usize,
    pieces: Mutex<Vec<(usize, usize, u64)>>,
    next_handle: Mutex<u64>,
    released: Arc<AtomicBool>,
}

// SAFETY: the range is plain host memory; the bookkeeping is behind mutexes.
unsafe impl Send for HostSpace {}
// SAFETY: as above.
unsafe impl Sync for HostSpace {}

impl HostSpace {
    fn new(granules: usize) -> Self {
        let length = granules * GRANULE;
        let layout = Layout::from_size_align(length, GRANULE).unwrap();
        // SAFETY: a non-zero size.
        let base = NonNull::new(unsafe { alloc(layout) }).expect("host memory");
        HostSpace {
            base,
            length,
            pieces: Mutex::new(Vec::new()),
            next_handle: Mutex::new(1),
            released: Arc::new(AtomicBool::new(false)),
        }
    }

    fn backed_pieces(&self) -> usize {
        self.pieces.lock().unwrap().len()
    }
}

impl Drop for HostSpace {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.length, GRANULE).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.base.as_ptr(), layout) };
    }
}

impl AddressSpace for HostSpace {
    fn device(&self) -> Device {
        Device::CPU
    }

    fn range(&self) -> (usize, usize) {
        (self.base.as_ptr().expose_provenance(), self.length)
    }

    fn granule(&self) -> usize {
        GRANULE
    }

    unsafe fn back(&self, addr: usize, bytes: usize) -> Result<u64> {
        let (start, length) = self.range();
        assert!(
            addr >= start && addr + bytes <= start + length,
            "inside the range"
        );
        assert!(
            addr.is_multiple_of(GRANULE) && bytes.is_multiple_of(GRANULE),
            "on granules"
        );
        let mut pieces = self.pieces.lock().unwrap();
        for &(a, b, _) in pieces.iter() {
            assert!(addr + bytes <= a || a + b <= addr, "no piece backed twice");
        }
        let mut next = self.next_handle.lock().unwrap();
        *next += 1;
        pieces.push((addr, bytes, *next));
        Ok(*next)
    }

    unsafe fn unback(&self, addr: usize, bytes: usize, handle: u64) {
        let mut pieces = self.pieces.lock().unwrap();
        let at = pieces
            .iter()
            .position(|&p| p == (addr, bytes, handle))
            .expect("only pieces that were backed are given back, whole");
        pieces.remove(at);
    }

    fn release_range(&self) {
        assert!(!self.released.swap(true, Ordering::SeqCst), "released once");
    }

    fn order_reuse(&self, _: Stream, _: Stream) -> Result<()> {
        Ok(())
    }
}

fn write_all(ptr: NonNull<u8>, bytes: usize, value: u8) {
    // SAFETY: a block of `bytes` bytes handed out by the resource under test.
    unsafe { std::ptr::write_bytes(ptr.as_ptr(), value, bytes) };
}

#[test]
fn chunks_fill_the_lowest_free_addresses_and_touch() {
    let space = VirtualResource::new(HostSpace::new(16));
    let base = space.space().range().0;
    let a = space.allocate(3 * GRANULE, 256, Stream::HOST).unwrap();
    let b = space.allocate(1, 256, Stream::HOST).unwrap();
    let c = space.allocate(2 * GRANULE, 256, Stream::HOST).unwrap();
    let addr = |p: NonNull<u8>| p.as_ptr() as usize;
    assert_eq!(
        (addr(a), addr(b), addr(c)),
        (base, base + 3 * GRANULE, base + 4 * GRANULE),
        "each chunk starts where the one before ends (1 byte takes a granule)"
    );
    write_all(a, 3 * GRANULE, 1);
    write_all(b, GRANULE, 2);
    assert_eq!(space.backed_bytes(), 6 * GRANULE);
    assert_eq!(space.contiguous_granule(), Some(GRANULE));

    // SAFETY: `a` came from allocate(3 granules) and is not used again.
    unsafe { space.deallocate(a, 3 * GRANULE, 256, Stream::HOST) };
    let small = space.allocate(2 * GRANULE, 256, Stream::HOST).unwrap();
    assert_eq!(addr(small), base, "the hole at the bottom is filled first");
    let large = space.allocate(4 * GRANULE, 256, Stream::HOST).unwrap();
    assert_eq!(
        addr(large),
        base + 6 * GRANULE,
        "too large for the hole: above the rest"
    );

    let full = space.allocate(8 * GRANULE, 256, Stream::HOST).unwrap_err();
    assert!(
        full.to_string().contains("no free piece of 32768"),
        "{full}"
    );
    for (p, n) in [
        (b, 1),
        (c, 2 * GRANULE),
        (small, 2 * GRANULE),
        (large, 4 * GRANULE),
    ] {
        // SAFETY: each came from allocate(n) above and is not used again.
        unsafe { space.deallocate(p, n, 256, Stream::HOST) };
    }
    assert_eq!(space.space().backed_pieces(), 0);
}

#[test]
fn a_free_that_names_no_backed_piece_changes_nothing() {
    let space = VirtualResource::new(HostSpace::new(4));
    let a = space.allocate(GRANULE, 256, Stream::HOST).unwrap();
    let inside = NonNull::new(a.as_ptr().wrapping_add(256)).unwrap();
    // SAFETY: both frees break the contract on purpose; neither names a backed piece.
    unsafe {
        space.deallocate(inside, GRANULE, 256, Stream::HOST);
        space.deallocate(a, 2 * GRANULE, 256, Stream::HOST);
    }
    assert_eq!(space.backed_bytes(), GRANULE, "still backed");
    let over = space.allocate(64, 2 * GRANULE, Stream::HOST).unwrap_err();
    assert!(over.to_string().contains("granule"), "{over}");
    // SAFETY: `a` came from allocate(GRANULE).
    unsafe { space.deallocate(a, GRANULE, 256, Stream::HOST) };
}

#[test]
fn the_range_is_given_back_only_when_nothing_in_it_is_backed() {
    let space = HostSpace::new(4);
    let released = space.released.clone();
    let resource = VirtualResource::new(space);
    let _still_used = resource.allocate(GRANULE, 256, Stream::HOST).unwrap();
    drop(resource);
    assert!(
        !released.load(Ordering::SeqCst),
        "a live piece keeps the range reserved"
    );

    let space = HostSpace::new(4);
    let released = space.released.clone();
    let resource = VirtualResource::new(space);
    let p = resource.allocate(GRANULE, 256, Stream::HOST).unwrap();
    // SAFETY: `p` came from allocate(GRANULE) and is not used again.
    unsafe { resource.deallocate(p, GRANULE, 256, Stream::HOST) };
    drop(resource);
    assert!(
        released.load(Ordering::SeqCst),
        "nothing backed: the range goes back"
    );
}

/// Blocks of `sizes` (bytes), allocated in turn until the pool refuses: the total.
fn fill(
    pool: &PoolResource,
    sizes: &[usize],
    streams: &[Stream],
) -> (usize, Vec<(NonNull<u8>, usize)>) {
    let mut total = 0;
    let mut out = Vec::new();
    for (i, &size) in sizes.iter().cycle().enumerate() {
        match pool.allocate(size, 256, streams[i % streams.len()]) {
            Ok(ptr) => {
                write_all(ptr, size, i as u8);
                total += size;
                out.push((ptr, size));
            }
            Err(_) => break,
        }
    }
    (total, out)
}

fn free_all(pool: &PoolResource, blocks: Vec<(NonNull<u8>, usize)>, stream: Stream) {
    for (ptr, size) in blocks {
        // SAFETY: each block came from `pool.allocate(size, 256, ..)` and is not used again.
        unsafe { pool.deallocate(ptr, size, 256, stream) };
    }
}

/// rapidsai/rmm#1957's pattern: a pool with an initial size grows towards its maximum in
/// chunks; over unrelated chunks each leaves a fragment too small for the next block, over
/// one reserved range the fragments merge and the pool reaches every byte of its maximum.
#[test]
fn a_pool_over_one_reserved_range_reaches_its_whole_maximum() {
    // Chunks of 1, 1 and 2 MiB (the pool doubles); blocks of 320 KiB leave 64 KiB, 64 KiB
    // and 128 KiB at the chunks' ends.
    let maximum = 1024 * GRANULE;
    let config = PoolConfig::checked(256 * GRANULE, Some(maximum)).unwrap();
    let block = 80 * GRANULE;
    let sizes = [block];

    let merging = PoolResource::new(
        Arc::new(VirtualResource::new(HostSpace::new(1024))),
        config.clone(),
    );
    let (total, blocks) = fill(&merging, &sizes, &[Stream::HOST]);
    let rest = maximum - total;
    assert!(rest < block);
    let last = merging
        .allocate(rest, 256, Stream::HOST)
        .expect("the last fragment fits too");
    write_all(last, rest, 0xEE);
    assert_eq!(
        merging.usage().reserved,
        maximum,
        "every byte of the maximum handed out"
    );
    free_all(&merging, blocks, Stream::HOST);
    free_all(&merging, vec![(last, rest)], Stream::HOST);
    let whole = merging
        .allocate(maximum, 256, Stream::HOST)
        .expect("one block of it all");
    write_all(whole, maximum, 7);
    free_all(&merging, vec![(whole, maximum)], Stream::HOST);

    // The same upstream behind an adaptor that does not promise contiguity: chunks stay
    // apart, and their ends strand fragments (rapidsai/rmm#1957).
    let apart = Arc::new(StatsResource::new(Arc::new(VirtualResource::new(
        HostSpace::new(1024),
    ))));
    let classic = PoolResource::new(apart, config);
    let (classic_total, blocks) = fill(&classic, &sizes, &[Stream::HOST]);
    assert_eq!(classic_total, total);
    assert!(
        classic.allocate(rest, 256, Stream::HOST).is_err(),
        "the fragments lie apart"
    );
    free_all(&classic, blocks, Stream::HOST);
    assert!(
        classic.allocate(maximum, 256, Stream::HOST).is_err(),
        "no chunk holds it all"
    );
}

/// rapidsai/rmm#2039's pattern: allocations alternating over 4 streams, sizes varying, up to
/// 95 % of the maximum, freed and made again: free memory of different streams merges, so
/// no request up to 95 % fails.
#[test]
fn alternating_streams_up_to_95_percent_never_fail() {
    let maximum = 128 * GRANULE;
    let config = PoolConfig::checked(8 * GRANULE, Some(maximum)).unwrap();
    let pool = PoolResource::new(Arc::new(VirtualResource::new(HostSpace::new(128))), config);
    let streams: Vec<Stream> = (10..14)
        .map(|h| Stream::on(CudaStream::from_handle(h).unwrap()))
        .collect();
    let sizes = [
        3 * GRANULE + 256,
        GRANULE / 2,
        7 * GRANULE,
        5 * GRANULE + 4096,
    ];
    let budget = maximum / 100 * 95;
    for round in 0..3 {
        let mut live = Vec::new();
        let mut total = 0;
        let mut i = round;
        while total + sizes[i % sizes.len()] <= budget {
            let size = sizes[i % sizes.len()];
            let stream = streams[i % streams.len()];
            let ptr = pool.allocate(size, 256, stream).unwrap_or_else(|e| {
                panic!("round {round}: {total} bytes in use, {size} more: {e}")
            });
            write_all(ptr, size, i as u8);
            live.push((ptr, size, stream));
            total += size;
            i += 1;
        }
        // Free every other block on its own stream, then the rest on another one.
        for (k, (ptr, size, stream)) in live.into_iter().enumerate() {
            let on = if k % 2 == 0 {
                stream
            } else {
                streams[(k + 1) % 4]
            };
            // SAFETY: from `pool.allocate(size, 256, ..)` above, not used again.
            unsafe { pool.deallocate(ptr, size, 256, on) };
        }
    }
    assert_eq!(pool.usage().in_use, 0);
}

/// `release` (trim) gives back every chunk one free range covers, keeps the parts of that
/// range in chunks still in use, and the pool grows again into the holes.
#[test]
fn release_gives_whole_idle_chunks_back_and_the_pool_grows_again() {
    // Chunks of 1, 1 and 2 MiB; blocks of 192 KiB, some across chunk boundaries.
    let config = PoolConfig::checked(256 * GRANULE, Some(1024 * GRANULE)).unwrap();
    let upstream = Arc::new(VirtualResource::new(HostSpace::new(1024)));
    let pool = PoolResource::new(upstream.clone(), config);
    let sizes = [48 * GRANULE];
    let (_, mut blocks) = fill(&pool, &sizes, &[Stream::HOST]);
    let reserved = pool.usage().reserved;
    assert_eq!((reserved, pool.usage().chunks), (1024 * GRANULE, 3));
    // Keep the first and last blocks (in the first and third chunks); free the rest.
    let last = blocks.pop().unwrap();
    let first = blocks.remove(0);
    free_all(&pool, blocks, Stream::HOST);
    let released = pool.release();
    assert_eq!(
        released,
        256 * GRANULE,
        "the idle chunk in the middle goes back"
    );
    assert_eq!(pool.usage().reserved, reserved - released);
    assert_eq!(upstream.backed_bytes(), reserved - released);
    write_all(first.0, first.1, 1);
    write_all(last.0, last.1, 2);
    // Growing again maps the hole.
    let (again, more) = fill(&pool, &sizes, &[Stream::HOST]);
    assert!(again >= 4 * 48 * GRANULE, "{again} after {released}");
    assert_eq!(pool.usage().reserved, reserved);
    free_all(&pool, more, Stream::HOST);
    free_all(&pool, vec![first, last], Stream::HOST);
    pool.release();
    assert_eq!(upstream.backed_bytes(), 0);
    assert_eq!(upstream.space().backed_pieces(), 0);
}
