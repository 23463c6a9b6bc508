//! The CUDA calls a move between devices makes (`TensorView::moved_to`,
//! `SoaTable::moved_to`), or, in a build without the cuda feature, stand-ins that say so: no
//! CUDA data can exist there, so only a CUDA device named by the caller reaches them.

#[cfg(feature = "cuda")]
pub(crate) use crate::cuda::{copy_async, order_streams, synchronize};

#[cfg(not(feature = "cuda"))]
mod stand_ins {
    use crate::error::{Error, Result};
    use crate::memory::Stream;

    pub(crate) fn order_streams(device: i32, _: Stream, _: Stream) -> Result<()> {
        Err(Error::without_cuda(format!("data on cuda:{device}")))
    }

    pub(crate) fn synchronize(device: i32, _: Stream) -> Result<()> {
        Err(Error::without_cuda(format!("data on cuda:{device}")))
    }

    /// # Safety
    /// As `cuda::copy_async`; nothing is copied here.
    pub(crate) unsafe fn copy_async(
        device: i32,
        _: *mut u8,
        _: *const u8,
        _: usize,
        _: Stream,
    ) -> Result<()> {
        Err(Error::without_cuda(format!(
            "a copy to or from cuda:{device}"
        )))
    }
}

#[cfg(not(feature = "cuda"))]
pub(crate) use stand_ins::{copy_async, order_streams, synchronize};
