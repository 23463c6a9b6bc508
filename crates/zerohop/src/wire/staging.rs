//! CUDA data through the host, for pickles bound for another machine. A CUDA IPC handle opens
//! only on the machine that made it, so there the bytes travel instead: the sender copies the
//! span to host memory once the producer's stream has written it, and the receiver copies it
//! back to one of its own devices. One copy each way, which the rebuilt object reports.

use std::sync::Arc;

use super::{check_len, TableState, TensorState};
use crate::buffer::Buffer;
use crate::cuda;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{current_resource, default_host_resource, MemoryResource, Stream};
use crate::soa::SoaTable;
use crate::tensor::TensorView;
use crate::DEFAULT_ALIGNMENT;

/// The `nbytes` bytes at `start` in CUDA `device`'s memory, copied to host memory after the
/// work queued on `stream` before this call (the producer's writes) is done.
///
/// # Safety
/// `start..start + nbytes` must be live memory of `device` until this returns.
pub unsafe fn host_copy(
    device: i32,
    start: *const u8,
    nbytes: usize,
    stream: Stream,
) -> Result<Buffer> {
    let host = Buffer::allocate(default_host_resource(), nbytes, DEFAULT_ALIGNMENT, stream)?;
    // SAFETY: a fresh host buffer of `nbytes` bytes, distinct from the device range, which
    // the caller keeps alive until the synchronisation below.
    unsafe { cuda::copy_async(device, host.as_ptr(), start, nbytes, stream)? };
    cuda::synchronize(device, stream)?;
    Ok(host)
}

/// The device that data staged from `cuda:{sent_from}` returns to on this machine: the same
/// ordinal when this machine has it, else device 0.
pub fn receiving_device(sent_from: i32) -> Result<i32> {
    let count = cuda::device_count();
    if count == 0 {
        return Err(Error::CudaUnavailable {
            what: "a CUDA object pickled for another machine".into(),
            reason: format!(
                "it left cuda:{sent_from} and this machine has no CUDA device to put it back \
                 on; unpickle it where there is one, or pickle a host copy"
            ),
        });
    }
    Ok(match usize::try_from(sent_from) {
        Ok(ordinal) if ordinal < count => sent_from,
        _ => 0,
    })
}

/// The first `nbytes` of `host` copied to CUDA `device`, in memory from the resource current
/// there (else the driver's allocator) aligned to `align`; complete when this returns.
fn device_copy(host: &Buffer, nbytes: usize, device: i32, align: usize) -> Result<Buffer> {
    let resource: Arc<dyn MemoryResource> = match current_resource(Device::cuda(device)) {
        Some(resource) => resource,
        None => Arc::new(cuda::CudaDeviceResource::new(device)?),
    };
    let stream = cuda::LEGACY_STREAM;
    let buffer = Buffer::allocate(resource, nbytes.max(1), align, stream)?;
    // SAFETY: a fresh device buffer of at least `nbytes` bytes; `host` holds `nbytes` bytes
    // (checked by the callers) and outlives the synchronisation below.
    unsafe { cuda::copy_async(device, buffer.as_ptr(), host.as_ptr(), nbytes, stream)? };
    cuda::synchronize(device, stream)?;
    Ok(buffer)
}

impl TensorState {
    /// The tensor over staged host bytes, put back on CUDA `device`: held to the same checks
    /// as [`TensorState::view_over`], then copied; writable unless it left read-only.
    pub fn view_on_device(&self, host: &Buffer, device: i32) -> Result<TensorView> {
        self.check()?;
        check_len(host, self.nbytes)?;
        let buffer = device_copy(host, self.nbytes, device, DEFAULT_ALIGNMENT)?;
        let data = buffer.as_ptr().wrapping_add(self.offset);
        // SAFETY: `check` holds every element the layout reaches inside the span's `nbytes`
        // bytes, which the device buffer (owned by the view) holds; `offset` is a whole number
        // of elements, so the aligned buffer aligns them.
        unsafe {
            TensorView::from_raw_parts(
                data,
                self.dtype,
                self.shape.clone(),
                self.strides.clone(),
                Device::cuda(device),
                Arc::new(buffer),
                self.readonly,
            )
        }
        .map_err(|e| Error::Wire(format!("pickled tensor: {e}")))
    }
}

impl TableState {
    /// The table over staged host bytes, put back on CUDA `device`: checked as
    /// [`TableState::table_over`] checks, then copied at the table's alignment.
    pub fn table_on_device(self, host: &Buffer, device: i32) -> Result<SoaTable> {
        self.check()?;
        check_len(host, self.nbytes)?;
        let align = self.alignment.max(DEFAULT_ALIGNMENT);
        let buffer = device_copy(host, self.nbytes, device, align)?;
        let readonly = self.readonly;
        self.laid_over(buffer, readonly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn without_a_device_nothing_is_restored_and_the_error_says_where_it_came_from() {
        if cuda::is_available() {
            return; // the GPU machine's tests cover the round trip
        }
        let err = receiving_device(1).unwrap_err();
        assert!(matches!(err, Error::CudaUnavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("left cuda:1"), "{err}");
    }

    #[test]
    fn a_state_that_does_not_fit_its_bytes_is_refused_before_any_device_work() {
        let state = TensorState {
            dtype: DType::F32,
            shape: vec![4],
            strides: vec![1],
            offset: 0,
            nbytes: 16,
            readonly: false,
            is_copied: false,
        };
        let short = Buffer::allocate(default_host_resource(), 8, 64, Stream::HOST).unwrap();
        let err = state.view_on_device(&short, 0).unwrap_err();
        assert!(matches!(err, Error::Wire(_)), "{err:?}");
        let outside = TensorState {
            shape: vec![5],
            ..state
        };
        let err = outside.view_on_device(&short, 0).unwrap_err();
        assert!(err.to_string().contains("reach"), "{err}");
    }
}
