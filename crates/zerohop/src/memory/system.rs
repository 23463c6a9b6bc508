//! Aligned host memory from the global allocator.

use std::alloc::Layout;
use std::ptr::NonNull;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Host memory from Rust's global allocator, aligned to whatever the caller asks.
#[derive(Debug, Default)]
pub struct SystemResource;

impl SystemResource {
    pub fn new() -> Self {
        SystemResource
    }

    /// Zero-byte requests still get a real, unique block so that every pointer handed out is
    /// distinct and freeable the same way.
    fn layout(bytes: usize, align: usize) -> Result<Layout> {
        if !align.is_power_of_two() {
            return Err(Error::Layout {
                what: "alignment".into(),
                reason: format!("{align} is not a power of two"),
            });
        }
        Layout::from_size_align(bytes.max(1), align).map_err(|_| Error::OutOfMemory {
            requested: bytes,
            device: Device::CPU,
            reason: format!("size overflows when rounded up to alignment {align}"),
        })
    }
}

impl MemoryResource for SystemResource {
    fn allocate(&self, bytes: usize, align: usize, _stream: Stream) -> Result<NonNull<u8>> {
        let layout = Self::layout(bytes, align)?;
        // SAFETY: `layout` has a non-zero size (see `layout`).
        let ptr = unsafe { std::alloc::alloc(layout) };
        NonNull::new(ptr).ok_or_else(|| Error::OutOfMemory {
            requested: bytes,
            device: Device::CPU,
            reason: "the system allocator returned NULL".into(),
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, _stream: Stream) {
        // The caller promises `bytes`/`align` are the ones `allocate` accepted, so the layout
        // is valid; a mismatch is a caller bug we refuse to turn into heap corruption.
        let Ok(layout) = Self::layout(bytes, align) else {
            debug_assert!(false, "deallocate with a layout allocate never accepted");
            return;
        };
        // SAFETY: per this method's contract `ptr` came from `allocate` with this layout.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
    }

    fn device(&self) -> Device {
        Device::CPU
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honours_alignment_and_size() {
        let sys = SystemResource::new();
        for align in [1usize, 8, 64, 128, 4096] {
            for bytes in [0usize, 1, 7, 128, 1000] {
                let p = sys.allocate(bytes, align, Stream::HOST).unwrap();
                assert_eq!(p.as_ptr() as usize % align, 0);
                // SAFETY: the block is at least `bytes` long and owned by this test.
                unsafe {
                    std::ptr::write_bytes(p.as_ptr(), 0xAB, bytes);
                    sys.deallocate(p, bytes, align, Stream::HOST);
                }
            }
        }
    }

    #[test]
    fn rejects_bad_alignment_and_huge_sizes() {
        let sys = SystemResource::new();
        assert!(sys.allocate(8, 3, Stream::HOST).is_err());
        let err = sys
            .allocate(usize::MAX - 10, 128, Stream::HOST)
            .unwrap_err();
        assert!(err.to_string().contains("out of memory"), "{err}");
    }

    #[test]
    fn a_resource_equals_itself() {
        let a = SystemResource::new();
        assert!(a.is_equal(&a));
    }
}
