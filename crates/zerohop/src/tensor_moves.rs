//! One tensor copied to another device (host to CUDA, CUDA to host, one CUDA device to
//! another): what [`crate::soa::SoaTable::moved_to`] does for a table. The memory between the
//! tensor's lowest and highest element is copied once and the copy keeps the layout (shape,
//! strides, element 0's place in it), as a pickle's span does.

use std::sync::Arc;

use crate::buffer::{Buffer, Owner};
use crate::device::DeviceKind;
use crate::device_calls::{copy_async, order_streams, synchronize};
use crate::error::{Error, Result};
use crate::memory::{MemoryResource, Stream, DEFAULT_ALIGNMENT};
use crate::tensor::{span, TensorView};

impl TensorView {
    /// This tensor copied into memory from `resource` (its device is the target), enqueued on
    /// `stream` when a CUDA device is involved, after the work queued on `produced_on` (the
    /// stream that wrote the data). A copy to host memory is complete when this returns; a
    /// copy to a device is complete for work on `stream`. The copy is as read-only as the
    /// source. Packed dtypes (several elements a byte) are refused.
    pub fn moved_to(
        &self,
        resource: Arc<dyn MemoryResource>,
        stream: Stream,
        produced_on: Stream,
    ) -> Result<TensorView> {
        if !self.dtype().is_byte_addressable() {
            return Err(Error::DType {
                what: "dtype".into(),
                reason: format!("{} packs several elements per byte", self.dtype()),
            });
        }
        let (source, target) = (self.device(), resource.device());
        let cuda_involved = source.kind == DeviceKind::Cuda || target.kind == DeviceKind::Cuda;
        if cuda_involved {
            stream.require_cuda()?;
        }
        // A validated view always has a span that fits in memory.
        let (offset, nbytes) = span(self.shape(), self.strides(), self.dtype().itemsize())
            .and_then(|(o, n)| Some((usize::try_from(o).ok()?, usize::try_from(n).ok()?)))
            .ok_or_else(|| Error::InvalidArgument {
                what: "tensor".into(),
                reason: "its layout spans no addressable memory".into(),
            })?;
        let copy = Buffer::allocate(resource, nbytes.max(1), DEFAULT_ALIGNMENT, stream)?;
        let start = self.data_ptr().wrapping_sub(offset);
        // The source stays alive with the copy until an asynchronous copy has read it.
        let mut keep_source = None;
        if source.is_host_accessible() && target.is_host_accessible() {
            // SAFETY: the span of a live view, and a fresh buffer of at least `nbytes` bytes.
            unsafe { std::ptr::copy_nonoverlapping(start, copy.as_ptr(), nbytes) };
        } else {
            let device = if source.kind == DeviceKind::Cuda {
                source.id
            } else {
                target.id
            };
            if source.kind == DeviceKind::Cuda && produced_on != stream {
                order_streams(source.id, produced_on, stream)?;
            }
            // SAFETY: the span of a live view (kept alive below) and a fresh, distinct buffer
            // of at least `nbytes` bytes.
            unsafe { copy_async(device, copy.as_ptr(), start, nbytes, stream)? };
            if target.is_host_accessible() {
                synchronize(device, stream)?;
            } else {
                keep_source = Some(self.owner().clone());
            }
        }
        let data = copy.as_ptr().wrapping_add(offset);
        let owner: Owner = match keep_source {
            Some(source) => Arc::new((copy, source)),
            None => Arc::new(copy),
        };
        // SAFETY: the copy holds every byte of the span at the source's offsets, so the same
        // layout from `offset` reaches only copied memory, owned by `owner`; it is fresh memory
        // nobody else refers to.
        unsafe {
            TensorView::from_raw_parts(
                data,
                self.dtype(),
                self.shape().to_vec(),
                self.strides().to_vec(),
                target,
                owner,
                self.is_readonly(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::memory::default_host_resource;

    #[test]
    fn a_host_copy_keeps_the_layout_and_the_values_in_new_memory() {
        let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let base = TensorView::from_slice(&values, &[3, 4]).unwrap();
        // Every other column of the last two rows, backwards: a span with element 0 inside it.
        let view = base
            .slice_axis(0, 1, 3, 1)
            .unwrap()
            .slice_axis(1, 0, 4, 2)
            .unwrap()
            .flip(1)
            .unwrap();
        let copy = view
            .moved_to(default_host_resource(), Stream::HOST, Stream::HOST)
            .unwrap();
        assert_eq!(copy.to_vec::<f32>().unwrap(), view.to_vec::<f32>().unwrap());
        assert_eq!(copy.to_vec::<f32>().unwrap(), vec![6.0, 4.0, 10.0, 8.0]);
        assert_eq!(
            (copy.shape(), copy.strides()),
            (view.shape(), view.strides())
        );
        assert_ne!(copy.data_ptr(), view.data_ptr());
        drop(base);
        drop(view);
        assert_eq!(copy.to_vec::<f32>().unwrap(), vec![6.0, 4.0, 10.0, 8.0]);
    }

    #[test]
    fn a_copy_is_as_read_only_as_its_source_and_empty_tensors_copy() {
        let view = TensorView::from_slice(&[1u8, 2, 3], &[3])
            .unwrap()
            .into_readonly();
        let copy = view
            .moved_to(default_host_resource(), Stream::HOST, Stream::HOST)
            .unwrap();
        assert!(copy.is_readonly());
        let empty = TensorView::zeros(DType::F64, &[0, 5]).unwrap();
        let copy = empty
            .moved_to(default_host_resource(), Stream::HOST, Stream::HOST)
            .unwrap();
        assert_eq!(copy.shape(), &[0, 5]);
    }

    #[test]
    fn packed_dtypes_are_refused() {
        let int4 = DType::new(crate::dtype::DTypeCode::Int, 4);
        let bytes = Buffer::zeroed_host(1, 64).unwrap();
        let packed = TensorView::from_buffer(bytes, int4, &[1]).unwrap();
        let err = packed
            .moved_to(default_host_resource(), Stream::HOST, Stream::HOST)
            .unwrap_err();
        assert!(err.to_string().contains("packs several"), "{err}");
    }
}
