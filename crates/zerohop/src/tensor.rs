//! `TensorView`: a typed, strided window onto memory that someone keeps alive.
//!
//! Strides are in elements, as in DLPack. `data` points at element `[0, …, 0]`: offsets are
//! folded into the pointer, never carried beside it.

use std::fmt;
use std::sync::Arc;

use crate::buffer::{Buffer, Owner};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::memory::DEFAULT_ALIGNMENT;
use crate::tensor_dims::Dims;

/// The most dimensions a tensor may have (NumPy's limit); guards against hostile `ndim`.
pub const MAX_NDIM: usize = 64;

/// A strided view of elements of one dtype on one device.
#[derive(Clone)]
pub struct TensorView {
    data: *mut u8,
    dtype: DType,
    dims: Dims,
    device: Device,
    owner: Owner,
    readonly: bool,
}

// SAFETY: the view holds an address plus an owner that is Send + Sync; the memory stays valid
// while `owner` lives. Element access from several threads is governed by the unsafe mutable
// accessors, which put the aliasing obligation on the caller.
unsafe impl Send for TensorView {}
// SAFETY: see `Send`; `&TensorView` only permits reads through safe methods.
unsafe impl Sync for TensorView {}

/// Row-major strides, in elements, for a compact tensor of `shape`.
pub fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (stride, &extent) in strides.iter_mut().zip(shape).rev() {
        *stride = step;
        step = step.saturating_mul(extent.max(1));
    }
    strides
}

/// (bytes from the span's start to element 0, bytes of the span) of a strided layout: the
/// memory between its lowest and highest element. Zero elements span nothing; `None` for a
/// layout that is not one (negative extents, ranks that differ, overflow).
pub fn span(shape: &[i64], strides: &[i64], itemsize: usize) -> Option<(i128, i128)> {
    if shape.len() != strides.len() || shape.iter().any(|&n| n < 0) {
        return None;
    }
    if shape.contains(&0) {
        return Some((0, 0));
    }
    // Checked throughout: a hostile state may hold 64 axes of extent and stride near 2^63.
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::from(n - 1).checked_mul(i128::from(s))?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let item = i128::try_from(itemsize).ok()?;
    let len = high.checked_sub(low)?.checked_add(1)?.checked_mul(item)?;
    Some((low.checked_neg()?.checked_mul(item)?, len))
}

/// Number of elements, refusing negative extents and overflow.
pub fn checked_numel(shape: &[i64]) -> Result<usize> {
    shape
        .iter()
        .enumerate()
        .try_fold(1usize, |acc, (axis, &n)| {
            if n < 0 {
                return Err(Error::InvalidTensor(format!(
                    "shape[{axis}] = {n} is negative (shape {shape:?})"
                )));
            }
            acc.checked_mul(n as usize).ok_or_else(|| {
                Error::InvalidTensor(format!(
                    "shape {shape:?} has more elements than fit in memory"
                ))
            })
        })
}

/// Checks that `shape`/`strides` describe a span of memory that can exist: no negative
/// extents, no arithmetic overflow, a byte span that fits `isize` and ends below
/// [`crate::gate::ADDRESS_LIMIT`], and a non-NULL pointer whenever there is at least one
/// element. Returns the element count.
pub fn validate_layout(
    data: *const u8,
    dtype: DType,
    shape: &[i64],
    strides: &[i64],
) -> Result<usize> {
    if shape.len() != strides.len() {
        return Err(Error::InvalidTensor(format!(
            "shape {shape:?} and strides {strides:?} differ in length"
        )));
    }
    if shape.len() > MAX_NDIM {
        return Err(Error::InvalidTensor(format!(
            "ndim {} exceeds the limit of {MAX_NDIM}",
            shape.len()
        )));
    }
    let numel = checked_numel(shape)?;
    if numel == 0 {
        return Ok(0);
    }
    // Even a broadcast (stride-0) view must have a byte count every consumer can compute.
    if numel
        .checked_mul(dtype.itemsize())
        .is_none_or(|bytes| isize::try_from(bytes).is_err())
    {
        return Err(Error::InvalidTensor(format!(
            "shape {shape:?} of {dtype} holds more bytes than the address space"
        )));
    }
    if data.is_null() {
        return Err(Error::InvalidTensor(format!(
            "data pointer is NULL but shape {shape:?} holds {numel} elements"
        )));
    }
    // Every consumer (NumPy aside) reads elements through typed pointers, for which an
    // unaligned address is undefined behaviour, so such data is refused rather than shared.
    if !(data as usize).is_multiple_of(dtype.alignment()) {
        return Err(Error::InvalidTensor(format!(
            "data pointer {data:p} is not aligned to the {}-byte alignment {dtype} needs",
            dtype.alignment()
        )));
    }
    let overflow = || {
        Error::InvalidTensor(format!(
            "strides {strides:?} with shape {shape:?} reach beyond the address space"
        ))
    };
    let (mut lowest, mut highest) = (0i64, 0i64);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = (n - 1).checked_mul(s).ok_or_else(overflow)?;
        if reach < 0 {
            lowest = lowest.checked_add(reach).ok_or_else(overflow)?;
        } else {
            highest = highest.checked_add(reach).ok_or_else(overflow)?;
        }
    }
    let item = dtype.itemsize() as i64;
    let span_elems = highest
        .checked_sub(lowest)
        .and_then(|d| d.checked_add(1))
        .ok_or_else(overflow)?;
    let span_bytes = span_elems.checked_mul(item).ok_or_else(overflow)?;
    let low_bytes = lowest.checked_mul(item).ok_or_else(overflow)?;
    let high_bytes = highest.checked_mul(item).ok_or_else(overflow)?;
    let addr = data as usize as i128;
    if isize::try_from(span_bytes).is_err()
        || addr + (low_bytes as i128) < 0
        || addr + (high_bytes as i128) + item as i128 > crate::gate::ADDRESS_LIMIT as i128
    {
        return Err(overflow());
    }
    Ok(numel)
}

/// Calls `f` with the element offset of every index, in row-major order.
pub(crate) fn for_each_offset(shape: &[i64], strides: &[i64], mut f: impl FnMut(i64)) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0i64; shape.len()];
    let mut offset = 0i64;
    loop {
        f(offset);
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            offset += strides[axis];
            if index[axis] < shape[axis] {
                break;
            }
            offset -= strides[axis] * shape[axis];
            index[axis] = 0;
        }
    }
}

impl TensorView {
    /// A compact row-major tensor over the start of `buffer`.
    pub fn from_buffer(buffer: Buffer, dtype: DType, shape: &[i64]) -> Result<Self> {
        let numel = checked_numel(shape)?;
        let needed = numel.checked_mul(dtype.itemsize()).ok_or_else(|| {
            Error::InvalidTensor(format!("shape {shape:?} of {dtype} overflows a byte count"))
        })?;
        if needed > buffer.len() {
            return Err(Error::Layout {
                what: "shape".into(),
                reason: format!(
                    "{shape:?} of {dtype} needs {needed} bytes, the buffer has {}",
                    buffer.len()
                ),
            });
        }
        let strides = compact_strides(shape);
        validate_layout(buffer.as_ptr(), dtype, shape, &strides)?;
        Ok(TensorView {
            data: buffer.as_ptr(),
            dtype,
            dims: Dims::new(shape, &strides),
            device: buffer.device(),
            owner: Arc::new(buffer),
            readonly: false,
        })
    }

    /// A zero-filled, compact host tensor in fresh memory from the current host resource,
    /// 128-byte aligned: every host tensor zerohop creates starts here.
    pub fn zeros(dtype: DType, shape: &[i64]) -> Result<Self> {
        let numel = checked_numel(shape)?;
        let bytes = numel.checked_mul(dtype.itemsize()).ok_or_else(|| {
            Error::InvalidTensor(format!("shape {shape:?} of {dtype} overflows a byte count"))
        })?;
        Self::from_buffer(Buffer::zeroed_host(bytes, DEFAULT_ALIGNMENT)?, dtype, shape)
    }

    /// Copies `values` into a new 128-byte-aligned host buffer shaped `shape`.
    pub fn from_slice<T: Element>(values: &[T], shape: &[i64]) -> Result<Self> {
        let numel = checked_numel(shape)?;
        if numel != values.len() {
            return Err(Error::Layout {
                what: "shape".into(),
                reason: format!("{shape:?} holds {numel} elements, {} given", values.len()),
            });
        }
        let out = Self::zeros(T::DTYPE, shape)?;
        // SAFETY: the fresh tensor holds exactly `values.len()` elements of T and does not
        // overlap `values`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr() as *const u8,
                out.data,
                std::mem::size_of_val(values),
            )
        };
        Ok(out)
    }

    /// Builds a view from raw parts after validating the layout.
    ///
    /// # Safety
    /// Every element the layout reaches must stay valid memory on `device` while `owner`
    /// lives, and if `readonly` is false nobody else may assume the memory is immutable.
    pub unsafe fn from_raw_parts(
        data: *mut u8,
        dtype: DType,
        shape: Vec<i64>,
        strides: Vec<i64>,
        device: Device,
        owner: Owner,
        readonly: bool,
    ) -> Result<Self> {
        // SAFETY: the caller's contract, passed on.
        unsafe { Self::from_raw_dims(data, dtype, &shape, &strides, device, owner, readonly) }
    }

    /// [`TensorView::from_raw_parts`] over borrowed shape and strides: nothing is allocated
    /// for up to four dimensions (the per-event path of tensor maps).
    ///
    /// # Safety
    /// As [`TensorView::from_raw_parts`].
    pub(crate) unsafe fn from_raw_dims(
        data: *mut u8,
        dtype: DType,
        shape: &[i64],
        strides: &[i64],
        device: Device,
        owner: Owner,
        readonly: bool,
    ) -> Result<Self> {
        validate_layout(data, dtype, shape, strides)?;
        Ok(TensorView {
            data,
            dtype,
            dims: Dims::new(shape, strides),
            device,
            owner,
            readonly,
        })
    }

    pub fn data_ptr(&self) -> *mut u8 {
        self.data
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[i64] {
        self.dims.shape()
    }
    pub fn strides(&self) -> &[i64] {
        self.dims.strides()
    }
    pub fn ndim(&self) -> usize {
        self.dims.ndim()
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn owner(&self) -> &Owner {
        &self.owner
    }
    pub fn is_readonly(&self) -> bool {
        self.readonly
    }
    pub fn numel(&self) -> usize {
        // Validated at construction, so the product cannot overflow.
        self.shape().iter().map(|&n| n as usize).product()
    }
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.itemsize()
    }

    /// The same view, marked read-only.
    pub fn into_readonly(mut self) -> Self {
        self.readonly = true;
        self
    }

    /// The same view without the read-only mark, for a consumer that cannot be told about
    /// the mark but never writes (JAX, whose arrays are immutable, takes only legacy DLPack).
    ///
    /// # Safety
    /// Nothing may write through the returned view or anything exported from it.
    pub unsafe fn assume_never_written(mut self) -> Self {
        self.readonly = false;
        self
    }

    /// A compact copy in fresh memory that belongs to the caller alone, so it is writable
    /// whatever this view is (NumPy's `copy()` behaves the same).
    pub fn private_copy(&self) -> Result<TensorView> {
        let mut out = self.contiguous_copy()?;
        out.readonly = false;
        Ok(out)
    }

    /// Row-major compact, ignoring axes of extent 1 (whose stride is meaningless).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1i64;
        for (&n, &s) in self.shape().iter().zip(self.strides()).rev() {
            if n != 1 && s != expected {
                return false;
            }
            expected *= n;
        }
        true
    }

    /// Compact up to a permutation of the axes (e.g. a transposed compact tensor): no
    /// padding, no broadcasting. This is what JAX accepts without a copy.
    pub fn is_dense(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut axes: Vec<(i64, i64)> = self
            .shape()
            .iter()
            .zip(self.strides())
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        axes.sort_unstable();
        let mut expected = 1i64;
        for (stride, extent) in axes {
            if stride != expected {
                return false;
            }
            expected *= extent;
        }
        true
    }

    pub fn has_negative_strides(&self) -> bool {
        self.strides()
            .iter()
            .zip(self.shape())
            .any(|(&s, &n)| s < 0 && n > 1)
    }

    fn check_axis(&self, axis: usize) -> Result<()> {
        if axis >= self.ndim() {
            return Err(Error::Layout {
                what: "axis".into(),
                reason: format!("{axis} is out of range for a {}-d tensor", self.ndim()),
            });
        }
        Ok(())
    }

    /// Elements `start, start+step, …` below `stop` along `axis` (`step` ≥ 1), sharing memory.
    pub fn slice_axis(&self, axis: usize, start: i64, stop: i64, step: i64) -> Result<Self> {
        self.check_axis(axis)?;
        let extent = self.shape()[axis];
        if step < 1 || start < 0 || stop < start || stop > extent {
            return Err(Error::Layout {
                what: "slice".into(),
                reason: format!("{start}..{stop} step {step} on axis {axis} of extent {extent}"),
            });
        }
        let mut out = self.clone();
        let len = (stop - start + step - 1) / step;
        let stride = self.strides()[axis];
        let (shape, strides) = out.dims.parts_mut();
        shape[axis] = len;
        strides[axis] = stride * step;
        if len > 0 {
            let bytes = start * stride * self.dtype.itemsize() as i64;
            out.data = self.data.wrapping_offset(bytes as isize);
        }
        Ok(out)
    }

    /// Reverses `axis`, giving a negative stride, as NumPy's `[::-1]` does.
    pub fn flip(&self, axis: usize) -> Result<Self> {
        self.check_axis(axis)?;
        let mut out = self.clone();
        let (n, stride) = (self.shape()[axis], self.strides()[axis]);
        if n > 1 {
            let bytes = (n - 1) * stride * self.dtype.itemsize() as i64;
            out.data = self.data.wrapping_offset(bytes as isize);
        }
        out.dims.parts_mut().1[axis] = -stride;
        Ok(out)
    }

    /// Swaps two axes without moving data.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Self> {
        self.check_axis(a)?;
        self.check_axis(b)?;
        let mut out = self.clone();
        let (shape, strides) = out.dims.parts_mut();
        shape.swap(a, b);
        strides.swap(a, b);
        Ok(out)
    }

    /// The sub-tensor at `index` along `axis`, one dimension fewer, sharing memory.
    pub fn select(&self, axis: usize, index: i64) -> Result<Self> {
        let mut out = self.slice_axis(axis, index, index + 1, 1)?;
        out.dims = out.dims.without(axis);
        Ok(out)
    }

    /// A new axis of extent 1 at `axis` (0 ..= ndim), sharing memory: a column (n,) seen as
    /// (n, 1). The new stride is what a compact tensor would have there, so compact stays
    /// compact.
    pub fn unsqueeze(&self, axis: usize) -> Result<Self> {
        let ndim = self.ndim();
        if axis > ndim || ndim >= MAX_NDIM {
            return Err(Error::Layout {
                what: "axis".into(),
                reason: format!("cannot add axis {axis} to a {ndim}-d tensor"),
            });
        }
        let (mut shape, mut strides) = ([0i64; MAX_NDIM], [0i64; MAX_NDIM]);
        shape[..axis].copy_from_slice(&self.shape()[..axis]);
        strides[..axis].copy_from_slice(&self.strides()[..axis]);
        shape[axis] = 1;
        // An extent-1 axis is never stepped along, so its stride reaches no memory.
        strides[axis] = match axis {
            a if a == ndim => 1,
            a => self.shape()[a].saturating_mul(self.strides()[a]),
        };
        shape[axis + 1..=ndim].copy_from_slice(&self.shape()[axis..]);
        strides[axis + 1..=ndim].copy_from_slice(&self.strides()[axis..]);
        let mut out = self.clone();
        out.dims = Dims::new(&shape[..=ndim], &strides[..=ndim]);
        Ok(out)
    }

    pub(crate) fn check_typed_host<T: Element>(&self) -> Result<()> {
        if !self.device.is_host_accessible() {
            return Err(Error::NotHostAccessible {
                device: self.device,
            });
        }
        if self.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch {
                actual: self.dtype.to_string(),
                requested: T::DTYPE.to_string(),
            });
        }
        if self.numel() > 0 && !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::Layout {
                what: "data pointer".into(),
                reason: format!(
                    "{:p} is not aligned to {} bytes for {}",
                    self.data,
                    std::mem::align_of::<T>(),
                    T::DTYPE
                ),
            });
        }
        Ok(())
    }

    fn check_compact_typed_host<T: Element>(&self) -> Result<()> {
        self.check_typed_host::<T>()?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous(format!(
                "shape {:?} strides {:?}",
                self.shape(),
                self.strides()
            )));
        }
        Ok(())
    }

    /// The elements as a slice, for compact host tensors.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_compact_typed_host::<T>()?;
        if self.numel() == 0 {
            return Ok(&[]);
        }
        // SAFETY: host-accessible, dtype and alignment checked, compact layout validated at
        // construction, memory kept alive by `self.owner` for the borrow of `self`.
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const T, self.numel()) })
    }

    /// The elements as a mutable slice, for compact writable host tensors.
    ///
    /// # Safety
    /// Nobody else (another view of the same memory, another framework) may read or write
    /// these elements while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice<T: Element>(&self) -> Result<&mut [T]> {
        if self.readonly {
            return Err(Error::ReadOnly("as_mut_slice on a read-only tensor".into()));
        }
        self.check_compact_typed_host::<T>()?;
        if self.numel() == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as in `as_slice`, plus: the memory is writable (not read-only) and the
        // caller guarantees exclusive access. The slice derives from the raw `data` pointer,
        // not from a shared borrow.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut T, self.numel()) })
    }

    /// Copies the elements out in row-major order, whatever the strides.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_typed_host::<T>()?;
        let mut out = Vec::with_capacity(self.numel());
        let base = self.data as *const T;
        for_each_offset(self.shape(), self.strides(), |offset| {
            // SAFETY: every offset the layout produces was validated to lie inside memory the
            // owner keeps alive; alignment was checked above and strides are whole elements.
            out.push(unsafe { base.offset(offset as isize).read() });
        });
        Ok(out)
    }

    /// Copies `src`'s elements into this view (same dtype and shape, any strides).
    ///
    /// # Safety
    /// Nobody else may read or write this view's elements during the call, and the two
    /// views must not overlap.
    pub unsafe fn copy_from(&self, src: &TensorView) -> Result<()> {
        if self.readonly {
            return Err(Error::ReadOnly("copy into a read-only tensor".into()));
        }
        for t in [self, src] {
            if !t.device.is_host_accessible() {
                return Err(Error::NotHostAccessible { device: t.device });
            }
        }
        if self.dtype != src.dtype || self.shape() != src.shape() {
            return Err(Error::Layout {
                what: "copy source".into(),
                reason: format!(
                    "{} {:?} does not match the destination {} {:?}",
                    src.dtype,
                    src.shape(),
                    self.dtype,
                    self.shape()
                ),
            });
        }
        let item = self.dtype.itemsize() as isize;
        let mut src_offsets = Vec::with_capacity(src.numel());
        for_each_offset(src.shape(), src.strides(), |o| src_offsets.push(o));
        let mut next = src_offsets.into_iter();
        let (dst, from) = (self.data, src.data as *const u8);
        for_each_offset(self.shape(), self.strides(), |o| {
            let s = next.next().expect("same shape, same element count");
            // SAFETY: both offsets lie inside validated layouts; the caller rules out
            // overlap and concurrent access.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    from.offset(s as isize * item),
                    dst.offset(o as isize * item),
                    item as usize,
                )
            };
        });
        Ok(())
    }

    /// A compact row-major host copy, for consumers that cannot take this layout.
    pub fn contiguous_copy(&self) -> Result<TensorView> {
        if !self.device.is_host_accessible() {
            return Err(Error::NotHostAccessible {
                device: self.device,
            });
        }
        if !self.dtype.is_byte_addressable() {
            return Err(Error::DType {
                what: "dtype".into(),
                reason: format!("{} packs several elements per byte", self.dtype),
            });
        }
        let item = self.dtype.itemsize();
        let mut out = TensorView::zeros(self.dtype, self.shape())?;
        let mut dst = out.data;
        let src = self.data as *const u8;
        for_each_offset(self.shape(), self.strides(), |offset| {
            // SAFETY: source offsets lie inside the validated layout; the destination walks a
            // fresh buffer of exactly numel * item bytes, one element per visited offset.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.offset(offset as isize * item as isize),
                    dst,
                    item,
                );
                dst = dst.add(item);
            }
        });
        out.readonly = self.readonly;
        Ok(out)
    }
}

impl fmt::Debug for TensorView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorView")
            .field("data", &self.data)
            .field("dtype", &self.dtype.to_string())
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("device", &self.device.to_string())
            .field("readonly", &self.readonly)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(shape: &[i64]) -> TensorView {
        let n = checked_numel(shape).unwrap();
        let values: Vec<i32> = (0..n as i32).collect();
        TensorView::from_slice(&values, shape).unwrap()
    }

    #[test]
    fn compact_tensor_reads_back() {
        let t = iota(&[2, 3]);
        assert_eq!(t.strides(), &[3, 1]);
        assert!(t.is_contiguous());
        assert_eq!(t.as_slice::<i32>().unwrap(), &[0, 1, 2, 3, 4, 5]);
        assert_eq!(t.data_ptr() as usize % DEFAULT_ALIGNMENT, 0);
        assert!(t.as_slice::<f32>().is_err());
    }

    #[test]
    fn transposed_and_stepped_views_share_memory() {
        let t = iota(&[2, 3]);
        let tt = t.transpose(0, 1).unwrap();
        assert_eq!(tt.shape(), &[3, 2]);
        assert_eq!(tt.data_ptr(), t.data_ptr());
        assert!(!tt.is_contiguous());
        assert_eq!(tt.to_vec::<i32>().unwrap(), vec![0, 3, 1, 4, 2, 5]);
        let stepped = t.slice_axis(1, 0, 3, 2).unwrap();
        assert_eq!(stepped.to_vec::<i32>().unwrap(), vec![0, 2, 3, 5]);
        let row = t.slice_axis(0, 1, 2, 1).unwrap();
        assert_eq!(row.data_ptr() as usize - t.data_ptr() as usize, 12);
        assert!(row.as_slice::<i32>().is_ok());
        assert!(t.slice_axis(1, 2, 5, 1).is_err());
        assert!(t.slice_axis(3, 0, 1, 1).is_err());
    }

    #[test]
    fn a_unit_axis_goes_anywhere_and_keeps_compact_compact() {
        let t = iota(&[2, 3]);
        for (axis, shape, strides) in [
            (0, [1, 2, 3], [6, 3, 1]),
            (1, [2, 1, 3], [3, 3, 1]),
            (2, [2, 3, 1], [3, 1, 1]),
        ] {
            let u = t.unsqueeze(axis).unwrap();
            assert_eq!(
                (u.shape(), u.strides()),
                (&shape[..], &strides[..]),
                "{axis}"
            );
            assert!(u.is_contiguous() && u.data_ptr() == t.data_ptr(), "{axis}");
            assert_eq!(u.to_vec::<i32>().unwrap(), t.to_vec::<i32>().unwrap());
        }
        assert!(t.unsqueeze(3).is_err());
        let column = iota(&[4]).slice_axis(0, 0, 4, 2).unwrap();
        let u = column.unsqueeze(1).unwrap();
        assert_eq!((u.shape(), u.strides()), (&[2, 1][..], &[2, 1][..]));
        assert_eq!(u.to_vec::<i32>().unwrap(), [0, 2]);
    }

    #[test]
    fn zeros_are_aligned_compact_and_checked() {
        let z = TensorView::zeros(DType::F64, &[3, 2]).unwrap();
        assert_eq!((z.shape(), z.strides()), (&[3i64, 2][..], &[2i64, 1][..]));
        assert_eq!(z.data_ptr() as usize % DEFAULT_ALIGNMENT, 0);
        assert_eq!(z.to_vec::<f64>().unwrap(), vec![0.0; 6]);
        let err = TensorView::zeros(DType::F64, &[1 << 61, 2]).unwrap_err();
        assert!(err.to_string().contains("overflows a byte count"), "{err}");
        assert!(TensorView::zeros(DType::F32, &[-1]).is_err());
    }

    #[test]
    fn dense_means_compact_up_to_a_permutation() {
        let t = iota(&[3, 4]);
        assert!(t.is_dense());
        assert!(t.transpose(0, 1).unwrap().is_dense());
        assert!(!t.slice_axis(1, 0, 4, 2).unwrap().is_dense());
        assert!(!t.flip(0).unwrap().is_dense());
        assert!(iota(&[0, 5]).is_dense());
    }

    #[test]
    fn flipped_views_have_negative_strides_and_copy_compactly() {
        let t = iota(&[4]);
        let f = t.flip(0).unwrap();
        assert!(f.has_negative_strides());
        assert_eq!(f.to_vec::<i32>().unwrap(), vec![3, 2, 1, 0]);
        let c = f.contiguous_copy().unwrap();
        assert_ne!(c.data_ptr(), t.data_ptr());
        assert_eq!(c.as_slice::<i32>().unwrap(), &[3, 2, 1, 0]);
    }

    #[test]
    fn zero_d_and_empty_tensors() {
        let scalar = iota(&[]);
        assert_eq!(scalar.numel(), 1);
        assert_eq!(scalar.as_slice::<i32>().unwrap(), &[0]);
        let empty = iota(&[3, 0]);
        assert_eq!(empty.numel(), 0);
        assert!(empty.is_contiguous());
        assert!(empty.as_slice::<i32>().unwrap().is_empty());
        assert!(empty
            .contiguous_copy()
            .unwrap()
            .to_vec::<i32>()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn layout_validation_rejects_impossible_tensors() {
        let p = std::ptr::without_provenance::<u8>(0x1000);
        assert!(validate_layout(p, DType::F32, &[-1], &[1]).is_err());
        assert!(validate_layout(std::ptr::null(), DType::F32, &[2], &[1]).is_err());
        assert_eq!(
            validate_layout(std::ptr::null(), DType::F32, &[0, 5], &[5, 1]).unwrap(),
            0
        );
        assert!(validate_layout(p, DType::F32, &[i64::MAX, 2], &[1, 1]).is_err());
        assert!(validate_layout(p, DType::F32, &[3], &[i64::MAX / 2]).is_err());
        let low = std::ptr::without_provenance::<u8>(0x4);
        assert!(
            validate_layout(low, DType::F32, &[2], &[-2]).is_err(),
            "reaches below address 0"
        );
        assert!(validate_layout(p, DType::F32, &[2], &[-1]).is_ok());
        assert!(validate_layout(p, DType::F32, &[2, 2], &[1]).is_err());
        let odd = p.wrapping_add(1);
        let err = validate_layout(odd, DType::F32, &[2], &[1]).unwrap_err();
        assert!(err.to_string().contains("4-byte alignment"), "{err}");
        assert!(validate_layout(odd, DType::U8, &[2], &[1]).is_ok());
        assert!(
            validate_layout(odd, DType::F32, &[0], &[1]).is_ok(),
            "nothing to read"
        );
        let c64 = p.wrapping_add(4);
        assert!(
            validate_layout(c64, DType::C64, &[1], &[1]).is_ok(),
            "two f32 parts"
        );
        assert!(validate_layout(c64, DType::C128, &[1], &[1]).is_err());
        let deep = vec![1i64; MAX_NDIM + 1];
        assert!(validate_layout(p, DType::F32, &deep, &deep).is_err());
    }

    #[test]
    fn writes_through_mutable_slices_are_seen_by_views() {
        let t = iota(&[3]);
        // SAFETY: this test holds the only view.
        unsafe { t.as_mut_slice::<i32>().unwrap()[1] = 42 };
        assert_eq!(t.to_vec::<i32>().unwrap(), vec![0, 42, 2]);
        let ro = t.clone().into_readonly();
        // SAFETY: the call must refuse before handing out a slice.
        assert!(unsafe { ro.as_mut_slice::<i32>() }.is_err());
    }

    #[test]
    fn a_private_copy_is_writable_and_a_plain_copy_keeps_the_mark() {
        let ro = iota(&[3]).into_readonly();
        assert!(ro.contiguous_copy().unwrap().is_readonly());
        let mine = ro.private_copy().unwrap();
        assert!(!mine.is_readonly() && mine.data_ptr() != ro.data_ptr());
        // SAFETY: the copy is private to this test.
        unsafe { mine.as_mut_slice::<i32>().unwrap()[0] = 9 };
        assert_eq!(ro.to_vec::<i32>().unwrap(), vec![0, 1, 2]);
        // SAFETY: nothing writes through the alias; it only reads.
        let alias = unsafe { ro.clone().assume_never_written() };
        assert!(!alias.is_readonly() && alias.data_ptr() == ro.data_ptr());
    }

    #[test]
    fn offsets_visit_every_element_in_row_major_order() {
        let mut seen = vec![];
        for_each_offset(&[2, 2], &[1, 10], |o| seen.push(o));
        assert_eq!(seen, vec![0, 10, 1, 11]);
        let mut none = 0;
        for_each_offset(&[2, 0], &[1, 1], |_| none += 1);
        assert_eq!(none, 0);
    }
}
