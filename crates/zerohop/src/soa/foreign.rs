//! Tables over memory zerohop did not allocate: a buffer a C++ framework filled (CMS's
//! `PortableCollection`s live in the framework's caching allocator), a `cudaMalloc`'d block, a
//! host array, a memory-mapped file. The table keeps the memory's owner alive and drops it when
//! the last view of the memory goes.

use std::ptr::NonNull;

use super::schema::Schema;
use super::table::SoaTable;
use crate::buffer::{Buffer, Owner};
use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::tensor::TensorView;

impl SoaTable {
    /// A table of `rows` rows over `bytes` bytes at `data` on `device`, laid out for `schema`
    /// at `alignment` (the CMS SoA layout; [`crate::soa::Layout`] says where each column is).
    ///
    /// `owner` is dropped when the last table, slice or exported tensor over the memory goes
    /// and, when the memory is refused, before this returns: either way the memory's owner
    /// hears of it exactly once. Refused: a NULL `data`, a buffer smaller than the layout, an
    /// address not aligned for the widest element, a CUDA pointer that is not on `device`.
    ///
    /// # Safety
    /// `data..data + bytes` must be memory on `device` that stays valid, and that nothing frees,
    /// until `owner` is dropped.
    pub unsafe fn wrap(
        schema: Schema,
        rows: usize,
        alignment: usize,
        data: *mut u8,
        bytes: usize,
        device: Device,
        owner: Owner,
    ) -> Result<Self> {
        let Some(ptr) = NonNull::new(data) else {
            return Err(Error::Layout {
                what: "table buffer".into(),
                reason: "the data pointer is NULL".into(),
            });
        };
        check_device(ptr, device)?;
        // SAFETY: the caller's contract; `owner` now travels with the buffer.
        let buffer = unsafe { Buffer::from_foreign(ptr, bytes, device, owner) };
        SoaTable::over_buffer(schema, rows, alignment, buffer, 0, rows)
    }

    /// A table over the bytes of `view`: memory another framework allocated and shared
    /// through DLPack or an array interface, laid out for `schema`, `rows` and `alignment`.
    /// The view's owner (the producer) lives as long as the table and every tensor from it;
    /// a read-only view gives a read-only table. Refused: a view whose bytes are not one
    /// compact range, and whatever [`SoaTable::over_buffer`] refuses (too small, misaligned).
    pub fn over_view(
        schema: Schema,
        rows: usize,
        alignment: usize,
        view: &TensorView,
    ) -> Result<Self> {
        if !view.is_contiguous() {
            return Err(Error::Layout {
                what: "table buffer".into(),
                reason: format!(
                    "a tensor of shape {:?} and strides {:?} is not one compact range of bytes",
                    view.shape(),
                    view.strides()
                ),
            });
        }
        let ptr = match NonNull::new(view.data_ptr()) {
            Some(ptr) => ptr,
            // DLPack lets an empty tensor's data be NULL: no byte is ever read through it, so
            // any address aligned for every column serves (a table of zero rows).
            None if view.nbytes() == 0 => NonNull::<u8>::dangling().with_addr(
                std::num::NonZeroUsize::new(crate::memory::POOL_ALIGNMENT).expect("non-zero"),
            ),
            None => {
                return Err(Error::Layout {
                    what: "table buffer".into(),
                    reason: "the data pointer is NULL".into(),
                })
            }
        };
        // SAFETY: a compact view covers `nbytes` bytes from its data pointer, and its owner
        // keeps them valid; the buffer holds a clone of that owner.
        let buffer = unsafe {
            Buffer::from_foreign(ptr, view.nbytes(), view.device(), view.owner().clone())
        };
        let table = SoaTable::over_buffer(schema, rows, alignment, buffer, 0, rows)?;
        Ok(if view.is_readonly() {
            table.into_readonly()
        } else {
            table
        })
    }
}

/// A CUDA pointer must belong to the device it is said to be on (the driver knows); host
/// memory cannot be checked and is taken as said.
pub(super) fn check_device(ptr: NonNull<u8>, device: Device) -> Result<()> {
    if device.kind != DeviceKind::Cuda {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        let actual = crate::cuda::pointer_device(ptr.as_ptr() as usize)?;
        if actual != device.id {
            return Err(Error::Layout {
                what: "table buffer".into(),
                reason: format!(
                    "{ptr:p} is memory of cuda:{actual}, not of {device} as the caller said"
                ),
            });
        }
        Ok(())
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::CudaUnavailable {
        what: "CUDA memory".into(),
        reason: format!("{ptr:p} on {device}: this build of zerohop has no CUDA support"),
    })
}
