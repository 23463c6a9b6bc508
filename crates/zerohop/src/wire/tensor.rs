//! The state of a pickled tensor.

use std::sync::Arc;

use super::{aligned, check_len, span};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::TensorView;

/// A tensor as it travels: its layout over a span of `nbytes` bytes whose element 0 lies
/// `offset` bytes in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorState {
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: usize,
    pub nbytes: usize,
    pub readonly: bool,
    /// Whether the tensor was a copy (made by zerohop on request) before it travelled.
    pub is_copied: bool,
}

impl TensorState {
    /// The state of `view` sent with its whole span, strides and all, and the span's start.
    pub fn of(view: &TensorView, is_copied: bool) -> Result<(Self, *mut u8)> {
        let (offset, nbytes) = span(view.shape(), view.strides(), view.dtype().itemsize())
            .ok_or_else(|| Error::Wire("this tensor's layout has no byte span".into()))?;
        // A live view's span fits its address space, so both fit in usize.
        let (offset, nbytes) = (offset as usize, nbytes as usize);
        let state = TensorState {
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
            strides: view.strides().to_vec(),
            offset,
            nbytes,
            readonly: view.is_readonly(),
            is_copied,
        };
        Ok((state, view.data_ptr().wrapping_sub(offset)))
    }

    /// Refuses a layout that is not one, or that reaches outside the `nbytes` of its span.
    pub fn check(&self) -> Result<()> {
        let (shape, strides) = (&self.shape, &self.strides);
        let (low, len) = span(shape, strides, self.dtype.itemsize()).ok_or_else(|| {
            Error::Wire(format!(
                "pickled tensor: shape {shape:?} and strides {strides:?} do not describe a \
                 tensor"
            ))
        })?;
        let offset = self.offset as i128;
        if len == 0 || (offset >= low && offset - low + len <= self.nbytes as i128) {
            return Ok(());
        }
        Err(Error::Wire(format!(
            "pickled tensor: shape {shape:?}, strides {strides:?} of {} at byte {} reach \
             outside its {}-byte buffer",
            self.dtype, self.offset, self.nbytes
        )))
    }

    /// The tensor over the received host `buffer` (kept alive by the view): checked against
    /// it, realigned by a private copy when it arrived misaligned (the flag says so), and
    /// read-only when the state or the buffer is.
    pub fn view_over(&self, buffer: Buffer, writable: bool) -> Result<(TensorView, bool)> {
        self.check()?;
        check_len(&buffer, self.nbytes)?;
        // `offset` is a whole number of elements, so an aligned start aligns every element.
        let (buffer, copied) = aligned(buffer, self.dtype.alignment(), crate::DEFAULT_ALIGNMENT)?;
        let data = buffer.as_ptr().wrapping_add(self.offset);
        // SAFETY: every element the layout reaches lies in `buffer` (`check`: the span from
        // `offset - low` to `offset - low + len` is inside its `nbytes` bytes, which
        // `check_len` holds it to), and the view owns the buffer; data that arrived
        // read-only stays read-only.
        let view = unsafe {
            TensorView::from_raw_parts(
                data,
                self.dtype,
                self.shape.clone(),
                self.strides.clone(),
                Device::CPU,
                Arc::new(buffer),
                self.readonly || !writable,
            )
        }
        .map_err(|e| Error::Wire(format!("pickled tensor: {e}")))?;
        Ok((view, copied))
    }
}
