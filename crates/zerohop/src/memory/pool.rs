//! `Pool`: large chunks from an upstream resource, carved into blocks and reused.
//!
//! Requests up to 4 MiB are rounded to a size class (at most 25 % larger) and recycled
//! through per-class free lists: O(1) in the common case. Larger ones use coalescing best
//! fit over the chunks: a freed block merges with free neighbours (never across chunks, so
//! whole chunks can go back upstream on `release`). Class blocks are carved by best fit too
//! and return to the coalescing ranges on `release` or when the pool would otherwise fail.
//!
//! Reuse is stream-ordered. Every free block remembers the streams it was freed on (merged
//! ranges remember all of theirs). A request on stream S prefers a block freed on S, which
//! needs nothing: S's own order already puts the new work after the old. A block freed on
//! another stream T is handed to S only after `order_reuse(T, S)` on the upstream resource,
//! which for device memory makes S wait on an event recorded on T — so the block's old work
//! finishes before its new work starts, without blocking the host. Host resources have no
//! streams and make that call a no-op.
//!
//! The pool knows every block it has out, so a free it cannot vouch for (an address it never
//! handed out, a block already free, a size that is not the block's) changes nothing:
//! [`PoolResource::try_deallocate`] says why, and `deallocate` drops it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::live_blocks::LiveBlocks;
use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Every block the pool hands out is aligned to this (a CUDA-friendly granule).
pub const POOL_ALIGNMENT: usize = 256;
/// Requests up to this size are served from size classes; larger ones by best fit.
pub const CLASS_MAX: usize = 4 << 20;
/// Size classes: 256, 512, 768, 1024 B, then four per octave (1.25, 1.5, 1.75, 2 × 2^k)
/// up to [`CLASS_MAX`], so a block wastes at most a quarter of its size.
pub const CLASS_COUNT: usize = 52;
const DEFAULT_GROWTH: usize = 1 << 20;
/// Freed large blocks kept whole per size (see `PoolState::large`).
const LARGE_CACHED: usize = 4;

/// The byte size of each class.
pub const CLASS_SIZES: [usize; CLASS_COUNT] = {
    let mut sizes = [0usize; CLASS_COUNT];
    let mut class = 0;
    while class < CLASS_COUNT {
        sizes[class] = if class < 4 {
            (class + 1) * POOL_ALIGNMENT
        } else {
            let octave = 1usize << (10 + (class - 4) / 4);
            octave + ((class - 4) % 4 + 1) * (octave / 4)
        };
        class += 1;
    }
    sizes
};

const _: () = assert!(CLASS_SIZES[CLASS_COUNT - 1] == CLASS_MAX);

/// The block size a request of `bytes` occupies, and its size class if any.
pub fn block_size(bytes: usize) -> Option<(usize, Option<usize>)> {
    let rounded = bytes.max(1).checked_next_multiple_of(POOL_ALIGNMENT)?;
    if rounded <= 1024 {
        return Some((rounded, Some(rounded / POOL_ALIGNMENT - 1)));
    }
    if rounded > CLASS_MAX {
        return Some((rounded, None));
    }
    // `rounded` lies in (2^k, 2^(k+1)]; classes split that octave into quarters.
    let k = (usize::BITS - 1 - (rounded - 1).leading_zeros()) as usize;
    let step = 1usize << (k - 2);
    let size = rounded.next_multiple_of(step);
    let quarter = (size - (1 << k)) / step;
    Some((size, Some(4 + (k - 10) * 4 + quarter - 1)))
}

/// How a pool is sized.
#[derive(Clone, Debug, Default)]
pub struct PoolConfig {
    /// Bytes reserved from upstream on the first allocation (at least the request).
    pub initial: usize,
    /// Never reserve more than this from upstream (None: grow while upstream gives).
    pub maximum: Option<usize>,
}

impl PoolConfig {
    /// A pool that reserves `initial` bytes first and never more than `maximum` in all,
    /// refused when the maximum is below the initial reservation.
    pub fn checked(initial: usize, maximum: Option<usize>) -> Result<Self> {
        match maximum {
            Some(max) if max < initial => Err(Error::Resource {
                what: "pool maximum".into(),
                reason: format!("({max}) is smaller than initial ({initial})"),
            }),
            _ => Ok(PoolConfig { initial, maximum }),
        }
    }
}

/// What a pool holds right now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes taken from upstream.
    pub reserved: usize,
    /// Bytes handed out in blocks (rounded sizes).
    pub in_use: usize,
    pub chunks: usize,
    /// Free blocks available for reuse (large free ranges plus cached small blocks).
    pub free_blocks: usize,
}

impl PoolUsage {
    /// The figures by name, as every language's `usage()` reports them.
    pub fn fields(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("reserved", self.reserved),
            ("in_use", self.in_use),
            ("chunks", self.chunks),
            ("free_blocks", self.free_blocks),
        ]
    }
}

/// The streams a free block was freed on (empty: fresh from upstream, no pending work).
type Streams = Vec<Stream>;

/// What the live-block table holds for an over-aligned block passed straight upstream (its
/// request is in `PoolState::upstream_blocks`); carved blocks hold their size, a multiple of
/// the granule, so never this.
const UPSTREAM: usize = 1;

struct PoolState {
    /// Upstream allocations: start → size.
    chunks: BTreeMap<usize, usize>,
    free_by_size: BTreeSet<(usize, usize)>,
    free_by_addr: BTreeMap<usize, usize>,
    /// Streams of free ranges that have any (absent: fresh memory).
    range_streams: HashMap<usize, Streams>,
    /// Cached class blocks: address and the stream each was freed on.
    small: [Vec<(usize, Stream)>; CLASS_COUNT],
    /// Large blocks freed recently, kept whole by size (at most `LARGE_CACHED` of each), so a
    /// training loop asking for the same large sizes again skips the split and the merge.
    /// They merge into the free ranges before the pool grows or gives up.
    large: HashMap<usize, Vec<(usize, Stream)>>,
    /// Every block handed out and not yet taken back: what a free is checked against.
    /// Kept to one word per block, so the table stays small in the cache.
    live: LiveBlocks<usize>,
    /// Over-aligned blocks out (rare): the `bytes` and `align` they were asked with.
    upstream_blocks: HashMap<usize, (usize, usize)>,
    reserved: usize,
    in_use: usize,
    /// Upstream's granule when its chunks may touch and merge (see
    /// [`MemoryResource::contiguous_granule`]); None: free ranges stop at chunk boundaries.
    merge_granule: Option<usize>,
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState {
            chunks: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
            free_by_addr: BTreeMap::new(),
            range_streams: HashMap::new(),
            small: std::array::from_fn(|_| Vec::new()),
            large: HashMap::new(),
            live: LiveBlocks::new(0),
            upstream_blocks: HashMap::new(),
            reserved: 0,
            in_use: 0,
            merge_granule: None,
        }
    }
}

fn merge_streams(into: &mut Streams, from: Streams) {
    for stream in from {
        if !into.contains(&stream) {
            into.push(stream);
        }
    }
}

impl PoolState {
    /// The smallest free range of at least `size` bytes, split, with the streams its memory
    /// was freed on.
    fn take_best_fit(&mut self, size: usize) -> Option<(usize, Streams)> {
        let &(found, addr) = self.free_by_size.range((size, 0)..).next()?;
        let streams = self.remove_range(addr, found);
        if found > size {
            self.insert_range(addr + size, found - size, streams.clone());
        }
        Some((addr, streams))
    }

    fn insert_range(&mut self, addr: usize, size: usize, streams: Streams) {
        self.free_by_size.insert((size, addr));
        self.free_by_addr.insert(addr, size);
        if !streams.is_empty() {
            self.range_streams.insert(addr, streams);
        }
    }

    fn remove_range(&mut self, addr: usize, size: usize) -> Streams {
        self.free_by_size.remove(&(size, addr));
        self.free_by_addr.remove(&addr);
        self.range_streams.remove(&addr).unwrap_or_default()
    }

    /// Moves every cached class block back into the coalescing free ranges.
    fn unclass(&mut self) {
        for (class, &size) in CLASS_SIZES.iter().enumerate() {
            for (addr, stream) in std::mem::take(&mut self.small[class]) {
                self.free_range(addr, size, vec![stream]);
            }
        }
        self.merge_large();
    }

    /// Moves the cached large blocks into the coalescing free ranges.
    fn merge_large(&mut self) {
        for (size, blocks) in std::mem::take(&mut self.large) {
            for (addr, stream) in blocks {
                self.free_range(addr, size, vec![stream]);
            }
        }
    }

    /// Keeps a freed large block whole for a request of its size, or merges it.
    fn free_large(&mut self, addr: usize, size: usize, stream: Stream) {
        let cached = self.large.entry(size).or_default();
        if cached.len() < LARGE_CACHED {
            cached.push((addr, stream));
        } else {
            self.free_range(addr, size, vec![stream]);
        }
    }

    /// A cached large block of exactly `size` bytes, preferring one freed on `stream`.
    fn take_large(&mut self, size: usize, stream: Stream) -> Option<(usize, Stream)> {
        let list = self.large.get_mut(&size)?;
        let found = match list.iter().rposition(|&(_, s)| s == stream) {
            Some(i) => list.swap_remove(i),
            None => list.pop()?,
        };
        if list.is_empty() {
            self.large.remove(&size);
        }
        Some(found)
    }

    /// Returns a block to the free ranges, merging with neighbours inside its chunk (or
    /// across chunks whose upstream lets them merge); the merged range remembers every
    /// stream its parts were freed on.
    fn free_range(&mut self, mut addr: usize, mut size: usize, mut streams: Streams) {
        let next = addr + size;
        let across = self.merge_granule.is_some();
        if across || !self.chunks.contains_key(&next) {
            if let Some(&next_size) = self.free_by_addr.get(&next) {
                let theirs = self.remove_range(next, next_size);
                merge_streams(&mut streams, theirs);
                size += next_size;
            }
        }
        if across || !self.chunks.contains_key(&addr) {
            if let Some((&prev, &prev_size)) = self.free_by_addr.range(..addr).next_back() {
                if prev + prev_size == addr {
                    let theirs = self.remove_range(prev, prev_size);
                    merge_streams(&mut streams, theirs);
                    addr = prev;
                    size += prev_size;
                }
            }
        }
        self.insert_range(addr, size, streams);
    }

    /// The length of the free range that ends where the highest chunk ends (0 if none).
    fn free_at_top(&self) -> usize {
        let Some((&top, &top_size)) = self.chunks.iter().next_back() else {
            return 0;
        };
        match self.free_by_addr.range(..top + top_size).next_back() {
            Some((&addr, &size)) if addr + size == top + top_size => size,
            _ => 0,
        }
    }

    /// A cached block of `class`, preferring one freed on `stream` among the most recent.
    fn take_small(&mut self, class: usize, stream: Stream) -> Option<(usize, Stream)> {
        let list = &mut self.small[class];
        let recent = list.len().saturating_sub(8);
        match list[recent..].iter().rposition(|&(_, s)| s == stream) {
            Some(i) => Some(list.swap_remove(recent + i)),
            None => list.pop(),
        }
    }
}

pub struct PoolResource {
    upstream: Arc<dyn MemoryResource>,
    config: PoolConfig,
    state: Mutex<PoolState>,
}

impl std::fmt::Debug for PoolResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolResource")
            .field("upstream", &self.upstream)
            .field("config", &self.config)
            .field("usage", &self.usage())
            .finish()
    }
}

fn to_ptr(addr: usize) -> NonNull<u8> {
    // Addresses in the pool come from upstream pointers whose provenance was exposed when
    // they entered (see `expose`), so rebuilding pointers from them is sound.
    NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(addr))
        .expect("pool addresses are never zero")
}

fn expose(ptr: NonNull<u8>) -> usize {
    ptr.as_ptr().expose_provenance()
}

impl PoolResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, config: PoolConfig) -> Self {
        let state = PoolState {
            merge_granule: upstream.contiguous_granule(),
            ..PoolState::default()
        };
        PoolResource {
            upstream,
            config,
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        // Every critical section leaves the maps consistent before anything can panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn usage(&self) -> PoolUsage {
        let state = self.state();
        PoolUsage {
            reserved: state.reserved,
            in_use: state.in_use,
            chunks: state.chunks.len(),
            free_blocks: state.free_by_addr.len()
                + state.small.iter().map(Vec::len).sum::<usize>()
                + state.large.values().map(Vec::len).sum::<usize>(),
        }
    }

    /// Adds a chunk from upstream so that a free range of `size` bytes exists.
    fn grow(&self, state: &mut PoolState, size: usize) -> Result<()> {
        self.grow_once(state, size, true)?;
        if state.free_by_size.range((size, 0)..).next().is_none() {
            // The chunk did not land next to the top range (upstream filled a hole below
            // it): one more, holding the whole request.
            self.grow_once(state, size, false)?;
        }
        Ok(())
    }

    fn grow_once(&self, state: &mut PoolState, size: usize, join_top: bool) -> Result<()> {
        let wanted = if state.reserved == 0 {
            self.config.initial.max(DEFAULT_GROWTH)
        } else {
            state.reserved.max(DEFAULT_GROWTH)
        };
        let granule = state.merge_granule.unwrap_or(POOL_ALIGNMENT);
        // Merging chunks: the free range at the top of the pool joins the new chunk, which
        // then only has to hold the rest of the request.
        let top = match state.merge_granule {
            Some(_) if join_top => state.free_at_top().min(size),
            _ => 0,
        };
        let needed = size - top;
        let mut chunk = needed.max(wanted);
        if let Some(maximum) = self.config.maximum {
            let room = maximum.saturating_sub(state.reserved) / granule * granule;
            if needed > room {
                return Err(Error::OutOfMemory {
                    requested: size,
                    device: self.upstream.device(),
                    reason: format!(
                        "pool maximum {maximum} bytes reached ({} reserved, {} in use)",
                        state.reserved, state.in_use
                    ),
                });
            }
            chunk = chunk.min(room);
        }
        let needed = needed.next_multiple_of(granule);
        let chunk = chunk.next_multiple_of(granule).max(needed);
        let (ptr, chunk) = match self.upstream.allocate(chunk, POOL_ALIGNMENT, Stream::HOST) {
            Ok(ptr) => (ptr, chunk),
            // A doubling step may be more than upstream can give; the request alone may fit.
            Err(_) if chunk > needed => (
                self.upstream
                    .allocate(needed, POOL_ALIGNMENT, Stream::HOST)?,
                needed,
            ),
            Err(err) => return Err(err),
        };
        let addr = expose(ptr);
        state.chunks.insert(addr, chunk);
        state.reserved += chunk;
        state.free_range(addr, chunk, Vec::new());
        Ok(())
    }

    /// Orders `next` after the work pending on every stream in `freed_on` but itself.
    fn order(&self, freed_on: &[Stream], next: Stream) -> Result<()> {
        for &stream in freed_on.iter().filter(|&&s| s != next) {
            self.upstream.order_reuse(stream, next)?;
        }
        Ok(())
    }

    /// Takes back a block this pool has out, freed with the size and alignment it was asked
    /// for (a size rounding to the same block will do); anything else (an address the pool
    /// never handed out, a block already free, another size) is refused, changing nothing.
    /// Safe: a refused free touches nothing, and an accepted one is of a block the pool owns
    /// (the caller must still not use it afterwards).
    pub fn try_deallocate(
        &self,
        ptr: NonNull<u8>,
        bytes: usize,
        align: usize,
        stream: Stream,
    ) -> Result<()> {
        let addr = expose(ptr);
        let refuse = |reason: String| Error::InvalidFree {
            what: format!("pool free of 0x{addr:x}"),
            reason,
        };
        let mut state = self.state();
        // One lookup on the common path: take the record, and put it back if the free is wrong.
        let Some(held) = state.live.remove(addr) else {
            return Err(refuse(
                "not a block of this pool in use (a double free, or an address it never \
                 handed out)"
                    .into(),
            ));
        };
        let asked = if held == UPSTREAM {
            state.upstream_blocks.get(&addr) == Some(&(bytes, align))
        } else {
            align <= POOL_ALIGNMENT && block_size(bytes).map(|(size, _)| size) == Some(held)
        };
        if !asked {
            state.live.insert(addr, held);
            let is = match state.upstream_blocks.get(&addr) {
                Some((b, a)) if held == UPSTREAM => format!("{b} bytes aligned to {a}"),
                _ => format!("a {held}-byte block"),
            };
            return Err(refuse(format!(
                "freed as {bytes} bytes aligned to {align}, but it is {is}; it stays allocated"
            )));
        }
        match held {
            UPSTREAM => {
                state.upstream_blocks.remove(&addr);
                drop(state);
                // SAFETY: an over-aligned block this pool got from upstream with exactly these
                // arguments (recorded in `allocate`), out until now, and freed once: its record
                // is gone.
                unsafe { self.upstream.deallocate(ptr, bytes, align, stream) };
            }
            size => {
                state.in_use = state.in_use.saturating_sub(size);
                match block_size(size).and_then(|(_, class)| class) {
                    Some(class) => state.small[class].push((addr, stream)),
                    None => state.free_large(addr, size, stream),
                }
            }
        }
        Ok(())
    }

    /// Gives fully free chunks back to upstream; returns the bytes released.
    pub fn release(&self) -> usize {
        let mut state = self.state();
        state.unclass();
        // A chunk is idle when one free range covers it (with merging, that range may reach
        // into its neighbours, which keep their parts).
        let idle: Vec<(usize, usize, usize, usize)> = state
            .chunks
            .iter()
            .filter_map(|(&start, &size)| {
                let (&addr, &free) = state.free_by_addr.range(..=start).next_back()?;
                (addr + free >= start + size).then_some((start, size, addr, free))
            })
            .collect();
        let mut released = 0;
        for (start, size, _, _) in idle {
            // Ranges change as chunks go: look the covering one up again.
            let (&addr, &free) = state
                .free_by_addr
                .range(..=start)
                .next_back()
                .expect("the covering free range stays while its chunks go");
            let streams = state.remove_range(addr, free);
            if start > addr {
                state.insert_range(addr, start - addr, streams.clone());
            }
            if addr + free > start + size {
                state.insert_range(start + size, addr + free - start - size, streams);
            }
            state.chunks.remove(&start);
            state.reserved -= size;
            released += size;
            // SAFETY: the chunk came from `upstream.allocate(size, POOL_ALIGNMENT, HOST)` in
            // `grow`, and it is entirely free, so no block of it is in use.
            unsafe {
                self.upstream
                    .deallocate(to_ptr(start), size, POOL_ALIGNMENT, Stream::HOST)
            };
        }
        released
    }
}

impl MemoryResource for PoolResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        if align > POOL_ALIGNMENT {
            // Rare over-aligned requests go straight upstream (and come back the same way).
            let ptr = self.upstream.allocate(bytes, align, stream)?;
            let mut state = self.state();
            state.live.insert(expose(ptr), UPSTREAM);
            state.upstream_blocks.insert(expose(ptr), (bytes, align));
            return Ok(ptr);
        }
        let (size, class) = block_size(bytes).ok_or_else(|| Error::OutOfMemory {
            requested: bytes,
            device: self.upstream.device(),
            reason: "size overflows when rounded to the pool granule".into(),
        })?;
        let mut state = self.state();
        if let Some(class) = class {
            if let Some((addr, freed_on)) = state.take_small(class, stream) {
                if let Err(err) = self.order(&[freed_on], stream) {
                    state.small[class].push((addr, freed_on));
                    return Err(err);
                }
                state.in_use += size;
                state.live.insert(addr, size);
                return Ok(to_ptr(addr));
            }
        }
        if class.is_none() {
            if let Some((addr, freed_on)) = state.take_large(size, stream) {
                if let Err(err) = self.order(&[freed_on], stream) {
                    state.free_large(addr, size, freed_on);
                    return Err(err);
                }
                state.in_use += size;
                state.live.insert(addr, size);
                return Ok(to_ptr(addr));
            }
        }
        if !state.large.is_empty() {
            // A large size nobody freed lately: the cached blocks merge first, so what was
            // freed is reused before fresh memory is carved or the pool grows.
            state.merge_large();
        }
        let (addr, streams) = match state.take_best_fit(size) {
            Some(found) => found,
            None => match self.grow(&mut state, size) {
                Ok(()) => state
                    .take_best_fit(size)
                    .ok_or_else(|| Error::OutOfMemory {
                        requested: bytes,
                        device: self.upstream.device(),
                        reason: "upstream's new chunk did not make a free range large enough"
                            .into(),
                    })?,
                Err(err) => {
                    // Before failing, merge cached class blocks: together they may fit.
                    state.unclass();
                    state.take_best_fit(size).ok_or(err)?
                }
            },
        };
        if let Err(err) = self.order(&streams, stream) {
            state.free_range(addr, size, streams);
            return Err(err);
        }
        state.in_use += size;
        state.live.insert(addr, size);
        Ok(to_ptr(addr))
    }

    /// A free breaking the contract (see [`PoolResource::try_deallocate`]) changes nothing.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        let _ = self.try_deallocate(ptr, bytes, align, stream);
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}

impl Drop for PoolResource {
    fn drop(&mut self) {
        // Chunks with live blocks stay allocated: someone may still use them (a leak is
        // better than a use-after-free). Free chunks go back.
        self.release();
    }
}
