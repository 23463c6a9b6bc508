//! ndarray views over zerohop memory (feature `ndarray`): a host tensor or an SoA table column
//! as an `ArrayView`/`ArrayViewMut` with its strides, sharing the memory (no copy).
//!
//! ```
//! use zerohop::soa::{Schema, SoaTable};
//! use zerohop::DType;
//!
//! let schema = Schema::builder().vector("p", DType::F32, 3).build().unwrap();
//! let mut table = SoaTable::new(schema, 4).unwrap();
//! table.column_ndarray_mut::<f32>("p").unwrap()[[2, 1]] = 5.0; // row 2, component 1
//! let p = table.column_ndarray::<f32>("p").unwrap();
//! assert_eq!(p.shape(), &[4, 3]);
//! assert_eq!(p.strides(), &[1, 32]); // 4 floats padded to 128 bytes: a pitch of 32
//! assert_eq!(table.component::<f32>("p", 1).unwrap()[2], 5.0); // the same memory
//! ```

use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::soa::SoaTable;
use crate::tensor::TensorView;

/// What ndarray needs to view `view`: the shape with every stride made non-negative (ndarray
/// takes no negative strides at construction), the pointer to the element at the lowest
/// address (dangling-but-aligned for empty arrays), and the axes to invert afterwards so the
/// element order is the tensor's again.
struct Parts<T> {
    shape: ndarray::StrideShape<IxDyn>,
    ptr: *mut T,
    flipped: Vec<usize>,
}

fn parts<T>(view: &TensorView) -> Parts<T> {
    let shape: Vec<usize> = view.shape().iter().map(|&n| n as usize).collect();
    let strides: Vec<usize> = view
        .strides()
        .iter()
        .map(|&s| s.unsigned_abs() as usize)
        .collect();
    let flipped: Vec<usize> = (0..view.ndim())
        .filter(|&i| view.strides()[i] < 0)
        .collect();
    let ptr = if view.numel() == 0 {
        std::ptr::NonNull::<T>::dangling().as_ptr()
    } else {
        // The lowest element: step back along every axis whose stride is negative.
        let back: i64 = flipped
            .iter()
            .map(|&i| (view.shape()[i] - 1) * view.strides()[i])
            .sum();
        // SAFETY: the layout was validated against the owner's memory at construction, so
        // its lowest element lies inside it.
        unsafe { (view.data_ptr() as *mut T).offset(back as isize) }
    };
    Parts {
        shape: IxDyn(&shape).strides(IxDyn(&strides)),
        ptr,
        flipped,
    }
}

impl TensorView {
    /// The elements as an ndarray view with this tensor's shape and strides (host memory,
    /// dtype `T`).
    pub fn as_ndarray<T: Element>(&self) -> Result<ArrayViewD<'_, T>> {
        self.check_typed_host::<T>()?;
        let p = parts::<T>(self);
        // SAFETY: host memory of dtype T, aligned (checked), every element inside the memory
        // the owner keeps alive for the borrow of `self` (validated at construction).
        let mut array = unsafe { ArrayViewD::from_shape_ptr(p.shape, p.ptr) };
        p.flipped.iter().for_each(|&i| array.invert_axis(Axis(i)));
        Ok(array)
    }

    /// The elements as a mutable ndarray view (host memory, dtype `T`, writable tensor).
    ///
    /// # Safety
    /// Nobody else (another view of the same memory, another framework) may read or write
    /// these elements while the array view lives; the view's elements must not overlap each
    /// other (no zero or overlapping strides), which ndarray requires of mutable views.
    pub unsafe fn as_ndarray_mut<T: Element>(&self) -> Result<ArrayViewMutD<'_, T>> {
        if self.is_readonly() {
            return Err(Error::ReadOnly("a mutable ndarray view".into()));
        }
        self.check_typed_host::<T>()?;
        let p = parts::<T>(self);
        // SAFETY: as in `as_ndarray`, plus the caller's exclusivity and no-overlap promise.
        let mut array = unsafe { ArrayViewMutD::from_shape_ptr(p.shape, p.ptr) };
        p.flipped.iter().for_each(|&i| array.invert_axis(Axis(i)));
        Ok(array)
    }
}

impl SoaTable {
    /// Column `name` as an ndarray view: (n,) for a column, (n, K) for a vector, (n, R, C)
    /// for a matrix, with the padding between components in the strides.
    pub fn column_ndarray<T: Element>(&self, name: &str) -> Result<ArrayViewD<'_, T>> {
        let view = self.column_view(name)?;
        view.check_typed_host::<T>()?;
        let p = parts::<T>(&view);
        // SAFETY: the column lies in this table's buffer, which `self` holds for the borrow;
        // host memory of dtype T, aligned (checked); column strides are never negative.
        Ok(unsafe { ArrayViewD::from_shape_ptr(p.shape, p.ptr) })
    }

    /// Column `name` as a mutable ndarray view. Writable tensors exported from this table
    /// share this memory: the same sharing rule as [`SoaTable::column_mut`].
    pub fn column_ndarray_mut<T: Element>(&mut self, name: &str) -> Result<ArrayViewMutD<'_, T>> {
        if self.is_readonly() {
            return Err(Error::ReadOnly(format!(
                "column {name:?} of a read-only table"
            )));
        }
        let view = self.column_view(name)?;
        view.check_typed_host::<T>()?;
        if view.ndim() == 0 {
            return Err(Error::Schema {
                what: "column".into(),
                reason: format!("{name:?} is a table scalar; use SoaTable::set_scalar"),
            });
        }
        let p = parts::<T>(&view);
        // SAFETY: as in `column_ndarray`; `&mut self` excludes other Rust access through this
        // handle, and a column's elements never overlap (positive strides, padded pitch).
        Ok(unsafe { ArrayViewMutD::from_shape_ptr(p.shape, p.ptr) })
    }
}

#[cfg(test)]
mod tests {
    use crate::soa::{ComponentOrder, Schema, SoaTable};
    use crate::{DType, TensorView};

    fn table() -> SoaTable {
        let schema = Schema::builder()
            .column("x", DType::F64)
            .matrix("m", DType::F32, 2, 3, ComponentOrder::ColumnMajor)
            .scalar("k", DType::I32)
            .build()
            .unwrap();
        SoaTable::new(schema, 5).unwrap()
    }

    #[test]
    fn columns_are_strided_views_of_the_table() {
        let mut t = table();
        {
            let mut m = t.column_ndarray_mut::<f32>("m").unwrap();
            assert_eq!(m.shape(), &[5, 2, 3]);
            m[[4, 1, 2]] = 7.0;
        }
        let m = t.column_ndarray::<f32>("m").unwrap();
        // 5 floats padded to 128 bytes: pitch 32; column-major components: (r, c) is c*2 + r.
        assert_eq!(m.strides(), &[1, 32, 64]);
        let component = 2 * 2 + 1;
        assert_eq!(t.component::<f32>("m", component).unwrap()[4], 7.0);
        assert_eq!(
            m.as_ptr() as usize,
            t.column_view("m").unwrap().data_ptr() as usize
        );
    }

    #[test]
    fn wrong_dtype_scalar_and_read_only_are_errors() {
        let mut t = table();
        assert!(t
            .column_ndarray::<f32>("x")
            .unwrap_err()
            .to_string()
            .contains("float64"));
        assert!(t.column_ndarray_mut::<i32>("k").is_err());
        let mut frozen = t.clone().into_readonly();
        assert!(frozen.column_ndarray_mut::<f64>("x").is_err());
        assert_eq!(frozen.column_ndarray::<f64>("x").unwrap().len(), 5);
        t.column_ndarray_mut::<f64>("x").unwrap().fill(1.5);
        assert_eq!(t.column::<f64>("x").unwrap(), &[1.5; 5]);
    }

    #[test]
    fn tensors_with_negative_strides_and_no_elements() {
        let v = TensorView::from_slice(&[1i64, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        let flipped = v.flip(1).unwrap();
        let a = flipped.as_ndarray::<i64>().unwrap();
        assert_eq!([a[[0, 0]], a[[0, 1]], a[[0, 2]], a[[1, 0]]], [3, 2, 1, 6]);
        let empty = TensorView::zeros(DType::F32, &[0, 4]).unwrap();
        assert_eq!(empty.as_ndarray::<f32>().unwrap().shape(), &[0, 4]);
        // SAFETY: `w` is this test's only view of its memory.
        let w = TensorView::zeros(DType::F32, &[3]).unwrap();
        unsafe { w.as_ndarray_mut::<f32>().unwrap().fill(2.0) };
        assert_eq!(w.as_slice::<f32>().unwrap(), &[2.0; 3]);
        let ro = w.clone().into_readonly();
        // SAFETY: refused before any view is made.
        assert!(unsafe { ro.as_ndarray_mut::<f32>() }.is_err());
    }
}
