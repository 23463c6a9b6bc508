//! Fresh, zero-filled tensors on any device zerohop allocates on: what `zerohop.zeros`, the
//! C exchange API's allocator and every face that makes memory for a caller share.

use crate::device::{Device, DeviceKind};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::TensorView;

impl TensorView {
    /// A compact zero-filled tensor on `device`: host memory from the current host resource,
    /// or CUDA memory from the device's current resource (else plain device memory), zeroed
    /// before this returns and produced on the legacy default stream.
    pub fn zeros_on(device: Device, dtype: DType, shape: &[i64]) -> Result<TensorView> {
        match device.kind {
            DeviceKind::Cpu => TensorView::zeros(dtype, shape),
            DeviceKind::Cuda => cuda_zeros(device, dtype, shape),
            _ => Err(Error::Device {
                what: "device".into(),
                reason: format!("zeros on {device}: zerohop allocates on cpu and cuda:N"),
            }),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_zeros(device: Device, dtype: DType, shape: &[i64]) -> Result<TensorView> {
    use crate::buffer::Buffer;
    use crate::cuda::{memset_zero, CudaDeviceResource, CUDA_ALIGNMENT};
    use crate::memory::{current_resource, MemoryResource, Stream};

    let numel = crate::tensor::checked_numel(shape)?;
    let bytes = numel
        .checked_mul(dtype.itemsize())
        .ok_or_else(|| Error::Layout {
            what: "shape".into(),
            reason: format!("{shape:?} of {dtype} holds more bytes than memory can"),
        })?;
    let resource: std::sync::Arc<dyn MemoryResource> = match current_resource(device) {
        Some(r) => r,
        None => std::sync::Arc::new(CudaDeviceResource::new(device.id)?),
    };
    let buffer = Buffer::allocate(resource, bytes, CUDA_ALIGNMENT, Stream::LEGACY)?;
    // SAFETY: a fresh device allocation of `bytes` bytes on `device`.
    unsafe { memset_zero(device.id, buffer.as_ptr(), bytes) }?;
    TensorView::from_buffer(buffer, dtype, shape)
}

#[cfg(not(feature = "cuda"))]
fn cuda_zeros(device: Device, _: DType, _: &[i64]) -> Result<TensorView> {
    Err(Error::without_cuda(format!("zeros on {device}")))
}
