//! `VirtualResource`: one range of addresses reserved up front and backed with physical
//! memory chunk by chunk as it is asked for (CUDA's virtual memory management:
//! `cuMemAddressReserve` once, then `cuMemCreate` + `cuMemMap` per chunk).
//!
//! Chunks are placed at the lowest free addresses of the range, so they touch: a `Pool` over
//! this resource merges free memory across chunk boundaries and can grow to every byte of
//! its maximum (a pool over unrelated `cuMemAlloc` chunks strands a fragment at the end of
//! each), and giving a chunk back (`Pool::release`) unmaps exactly what was mapped. What
//! backs the range is an [`AddressSpace`]; the placement and the bookkeeping are here, where
//! host tests and Miri reach them.

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// A reserved address range whose pieces can be backed with memory and given back.
pub trait AddressSpace: Send + Sync + fmt::Debug {
    fn device(&self) -> Device;

    /// The reserved range: its first address and its length, a multiple of the granule.
    fn range(&self) -> (usize, usize);

    /// Backing is mapped in multiples of this (a power of two).
    fn granule(&self) -> usize;

    /// Backs `[addr, addr + bytes)` with memory and returns a handle for [`Self::unback`].
    ///
    /// # Safety
    /// The piece lies inside [`Self::range`], starts and ends on granules, and no part of it
    /// is backed.
    unsafe fn back(&self, addr: usize, bytes: usize) -> Result<u64>;

    /// Gives back the memory of a piece: work queued on any stream may still use it, so the
    /// space lets that work finish first.
    ///
    /// # Safety
    /// `addr`, `bytes` and `handle` are exactly one piece [`Self::back`] returned, and nothing
    /// uses its memory after this call.
    unsafe fn unback(&self, addr: usize, bytes: usize, handle: u64);

    /// Gives the reserved range back; called once, when nothing in it is backed.
    fn release_range(&self);

    /// See [`MemoryResource::order_reuse`].
    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()>;
}

/// Chunks of one reserved range, backed as they are asked for.
pub struct VirtualResource<S: AddressSpace> {
    space: S,
    /// Backed pieces: start → (length, handle).
    backed: Mutex<BTreeMap<usize, (usize, u64)>>,
}

impl<S: AddressSpace> fmt::Debug for VirtualResource<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualResource")
            .field("space", &self.space)
            .field("backed_bytes", &self.backed_bytes())
            .finish()
    }
}

impl<S: AddressSpace> VirtualResource<S> {
    pub fn new(space: S) -> Self {
        VirtualResource {
            space,
            backed: Mutex::new(BTreeMap::new()),
        }
    }

    fn backed(&self) -> MutexGuard<'_, BTreeMap<usize, (usize, u64)>> {
        // The map is only changed after the driver call succeeded: never half updated.
        self.backed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes backed with memory now.
    pub fn backed_bytes(&self) -> usize {
        self.backed().values().map(|&(bytes, _)| bytes).sum()
    }

    /// The reserved range's length.
    pub fn reserved_bytes(&self) -> usize {
        self.space.range().1
    }

    pub fn space(&self) -> &S {
        &self.space
    }

    /// The lowest unbacked piece of at least `bytes` bytes.
    fn lowest_gap(
        backed: &BTreeMap<usize, (usize, u64)>,
        range: (usize, usize),
        bytes: usize,
    ) -> Option<usize> {
        let (start, length) = range;
        let end = start + length;
        let mut cursor = start;
        for (&piece, &(piece_bytes, _)) in backed.iter() {
            if piece - cursor >= bytes {
                return Some(cursor);
            }
            cursor = piece + piece_bytes;
        }
        (end - cursor >= bytes).then_some(cursor)
    }
}

impl<S: AddressSpace> MemoryResource for VirtualResource<S> {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        let granule = self.space.granule();
        if align > granule {
            return Err(Error::Layout {
                what: "alignment".into(),
                reason: format!("{align} exceeds the {granule}-byte granule of the reserved range"),
            });
        }
        let (start, length) = self.space.range();
        let oom = |reason: String| Error::OutOfMemory {
            requested: bytes,
            device: self.space.device(),
            reason,
        };
        let rounded = bytes
            .max(1)
            .checked_next_multiple_of(granule)
            .ok_or_else(|| oom("the size overflows when rounded to the granule".into()))?;
        let mut backed = self.backed();
        let Some(addr) = Self::lowest_gap(&backed, (start, length), rounded) else {
            let used: usize = backed.values().map(|&(b, _)| b).sum();
            return Err(oom(format!(
                "the reserved range of {length} bytes has no free piece of {rounded} bytes \
                 ({used} bytes backed)"
            )));
        };
        // SAFETY: `addr..addr + rounded` is inside the range, granule aligned (the range
        // starts on a granule and every piece is a multiple of it), and unbacked (a gap).
        let handle = unsafe { self.space.back(addr, rounded) }?;
        backed.insert(addr, (rounded, handle));
        Ok(
            NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(addr))
                .expect("a reserved range never starts at zero"),
        )
    }

    /// A free that does not name a backed piece with its size changes nothing.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, _align: usize, _stream: Stream) {
        let addr = ptr.as_ptr().expose_provenance();
        let mut backed = self.backed();
        let rounded = bytes.max(1).checked_next_multiple_of(self.space.granule());
        let Some(&(piece_bytes, handle)) = backed.get(&addr) else {
            return;
        };
        if Some(piece_bytes) != rounded {
            return;
        }
        backed.remove(&addr);
        // SAFETY: a piece `back` returned, freed by its owner (this function's contract).
        unsafe { self.space.unback(addr, piece_bytes, handle) };
    }

    fn device(&self) -> Device {
        self.space.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.space.order_reuse(freed_on, next)
    }

    fn contiguous_granule(&self) -> Option<usize> {
        Some(self.space.granule())
    }
}

impl<S: AddressSpace> Drop for VirtualResource<S> {
    fn drop(&mut self) {
        // Pieces still backed belong to blocks someone may use: the range stays reserved (a
        // leak is better than a use-after-free).
        if self.backed().is_empty() {
            self.space.release_range();
        }
    }
}
