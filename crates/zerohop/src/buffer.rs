//! `Buffer`: one reference-counted block of memory that knows how to give itself back.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{CudaStream, MemoryResource, Stream};

/// Anything that keeps memory alive. Dropping the last clone releases the memory.
pub type Owner = Arc<dyn Any + Send + Sync>;

enum Origin {
    /// Allocated by zerohop from a resource; returned to it on drop.
    Resource {
        resource: Arc<dyn MemoryResource>,
        align: usize,
        stream: Stream,
    },
    /// Memory somebody else owns; `_owner` keeps it alive and releases it when dropped.
    Foreign { _owner: Owner },
}

/// The most consumer streams one block remembers; beyond it the oldest is forgotten (a
/// block handed to more streams than this at once is rare, and forgetting one only loses the
/// ordering of its free, never the data it was given).
const MAX_CONSUMERS: usize = 8;

struct Inner {
    ptr: NonNull<u8>,
    len: usize,
    device: Device,
    origin: Origin,
    /// CUDA streams that were handed this block (`Buffer::note_consumer`): its free waits for
    /// the work they had queued by then.
    consumers: Mutex<Vec<CudaStream>>,
}

// SAFETY: `Inner` only stores the address of a block; the block itself is owned (through the
// resource or the foreign owner, both Send + Sync) and freed exactly once in Drop, which may
// happen on any thread because resources and owners are Send + Sync.
unsafe impl Send for Inner {}
// SAFETY: shared access hands out only the address; reads and writes through it are governed
// by the unsafe accessors that document their own aliasing rules.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Origin::Resource {
            resource,
            align,
            stream,
        } = &self.origin
        {
            self.order_free_after_consumers(*stream);
            // SAFETY: `ptr` came from `resource.allocate(len, align, stream)` in
            // `Buffer::allocate`, and this is the only place it is freed.
            unsafe { resource.deallocate(self.ptr, self.len, *align, *stream) };
        }
    }
}

/// A reference-counted allocation tagged with its device and its owner.
impl Inner {
    /// Makes the stream the block is freed on wait for the work its consumers queued before
    /// now (no host wait): a pool may then hand the block out again at once. A consumer
    /// capturing a CUDA graph cannot be waited for from outside; the graph's owner keeps such
    /// memory alive, as with any graph input.
    fn order_free_after_consumers(&self, freed_on: Stream) {
        let consumers =
            std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|p| p.into_inner()));
        #[cfg(feature = "cuda")]
        if freed_on.cuda_stream().is_some() {
            for consumer in consumers {
                // A failure (a capture in the way) cannot be reported from a free; the block
                // is freed as it would have been without the consumer's stream.
                let _ = crate::cuda::order_streams(self.device.id, Stream::on(consumer), freed_on);
            }
        }
        #[cfg(not(feature = "cuda"))]
        let _ = (consumers, freed_on);
    }

    fn note_consumer(&self, stream: CudaStream) {
        match &self.origin {
            Origin::Resource { .. } => {
                let mut seen = self.consumers.lock().unwrap_or_else(|p| p.into_inner());
                if !seen.contains(&stream) {
                    if seen.len() == MAX_CONSUMERS {
                        seen.remove(0);
                    }
                    seen.push(stream);
                }
            }
            Origin::Foreign { _owner } => Buffer::note_consumer(_owner, stream),
        }
    }
}

#[derive(Clone)]
pub struct Buffer {
    inner: Arc<Inner>,
}

impl Buffer {
    /// Allocates `len` bytes aligned to `align` from `resource`, usable on `stream`.
    pub fn allocate(
        resource: Arc<dyn MemoryResource>,
        len: usize,
        align: usize,
        stream: Stream,
    ) -> Result<Self> {
        let ptr = resource.allocate(len, align, stream)?;
        Ok(Buffer {
            inner: Arc::new(Inner {
                ptr,
                len,
                device: resource.device(),
                origin: Origin::Resource {
                    resource,
                    align,
                    stream,
                },
                consumers: Mutex::default(),
            }),
        })
    }

    /// Allocates zero-filled host memory from the current host resource.
    pub fn zeroed_host(len: usize, align: usize) -> Result<Self> {
        let resource = crate::memory::current_resource(Device::CPU)
            .unwrap_or_else(crate::memory::default_host_resource);
        let buf = Self::allocate(resource, len, align, Stream::HOST)?;
        // SAFETY: the block is `len` bytes of host memory that nothing else references yet.
        unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, len) };
        Ok(buf)
    }

    /// Wraps memory owned by someone else. `owner` is dropped when the last clone goes.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid on `device` for as long as `owner` is alive.
    pub unsafe fn from_foreign(ptr: NonNull<u8>, len: usize, device: Device, owner: Owner) -> Self {
        Buffer {
            inner: Arc::new(Inner {
                ptr,
                len,
                device,
                origin: Origin::Foreign { _owner: owner },
                consumers: Mutex::default(),
            }),
        }
    }

    /// An owner that keeps this buffer's memory alive: the buffer's own reference count, so
    /// handing one to each of many views allocates nothing.
    /// Notes that work queued on `stream` reads or writes the memory `owner` keeps alive, when
    /// that memory is a zerohop block (or a slice of one): the block's free is then ordered
    /// after that work. Other owners (a framework's tensor, a capsule) free their memory by
    /// their own rules, so nothing is noted for them.
    pub fn note_consumer(owner: &Owner, stream: CudaStream) {
        // Views keep a block alive either by its inner part (`Buffer::owner`) or by a whole
        // `Buffer` (`TensorView::from_buffer`).
        if let Some(inner) = owner.downcast_ref::<Inner>() {
            inner.note_consumer(stream);
        } else if let Some(buffer) = owner.downcast_ref::<Buffer>() {
            buffer.inner.note_consumer(stream);
        }
    }

    /// The CUDA streams noted for this block and not yet ordered (for tests).
    pub fn consumers(&self) -> Vec<CudaStream> {
        self.inner
            .consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn owner(&self) -> Owner {
        self.inner.clone()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// The bytes, when they live in host-accessible memory.
    ///
    /// # Safety
    /// No one may write to the buffer while the returned slice is alive.
    pub unsafe fn as_host_bytes(&self) -> Result<&[u8]> {
        if !self.device().is_host_accessible() {
            return Err(Error::NotHostAccessible {
                device: self.device(),
            });
        }
        // SAFETY: the block is `len` readable bytes while `self` lives; the caller rules out
        // concurrent writers.
        Ok(unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) })
    }

    /// How many handles share this allocation (for tests and leak reports).
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.inner.ptr)
            .field("len", &self.inner.len)
            .field("device", &self.inner.device)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn allocation_is_aligned_zeroed_and_shared() {
        let buf = Buffer::zeroed_host(1000, 128).unwrap();
        assert_eq!(buf.as_ptr() as usize % 128, 0);
        assert_eq!(buf.len(), 1000);
        // SAFETY: no writer exists.
        assert!(unsafe { buf.as_host_bytes() }
            .unwrap()
            .iter()
            .all(|&b| b == 0));
        let other = buf.clone();
        assert_eq!(buf.ref_count(), 2);
        assert_eq!(other.as_ptr(), buf.as_ptr());
    }

    #[test]
    fn foreign_owner_is_released_once_with_the_last_handle() {
        struct Counted(Arc<AtomicUsize>, #[allow(dead_code)] Vec<u8>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let mut bytes = vec![1u8, 2, 3];
        let ptr = NonNull::new(bytes.as_mut_ptr()).unwrap();
        let owner: Owner = Arc::new(Counted(drops.clone(), bytes));
        // SAFETY: the Vec's heap block moves into `owner` unchanged and lives as long as it.
        let buf = unsafe { Buffer::from_foreign(ptr, 3, Device::CPU, owner) };
        let second = buf.clone();
        drop(buf);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        // SAFETY: no writer exists.
        assert_eq!(unsafe { second.as_host_bytes() }.unwrap(), &[1, 2, 3]);
        drop(second);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn device_memory_is_not_readable_from_the_host() {
        let owner: Owner = Arc::new(());
        // SAFETY: the pointer is never dereferenced; the buffer only carries it.
        let buf = unsafe { Buffer::from_foreign(NonNull::dangling(), 16, Device::cuda(0), owner) };
        // SAFETY: the call must fail before touching memory.
        assert!(unsafe { buf.as_host_bytes() }.is_err());
    }

    #[test]
    fn buffers_can_be_freed_on_another_thread() {
        let buf = Buffer::zeroed_host(64, 64).unwrap();
        std::thread::spawn(move || drop(buf)).join().unwrap();
    }
}
