//! A tensor's shape and strides in one value: inline for up to four dimensions (every tensor a
//! tensor map makes: rows, columns, matrix rows and columns), so making a view allocates
//! nothing; on the heap beyond that.

/// Dimensions kept inline.
const INLINE: usize = 4;

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Dims {
    /// `values[..n]` is the shape, `values[INLINE..INLINE + n]` the strides.
    Inline { n: u8, values: [i64; 2 * INLINE] },
    /// The shape, then the strides (each half the length).
    Heap(Box<[i64]>),
}

impl Dims {
    /// `shape` and `strides` of equal length (the caller validates; a longer `strides` is cut).
    pub(crate) fn new(shape: &[i64], strides: &[i64]) -> Dims {
        let n = shape.len();
        debug_assert_eq!(n, strides.len());
        if n <= INLINE {
            let mut values = [0; 2 * INLINE];
            values[..n].copy_from_slice(shape);
            values[INLINE..INLINE + n].copy_from_slice(&strides[..n]);
            Dims::Inline { n: n as u8, values }
        } else {
            Dims::Heap(shape.iter().chain(&strides[..n]).copied().collect())
        }
    }

    pub(crate) fn ndim(&self) -> usize {
        match self {
            Dims::Inline { n, .. } => *n as usize,
            Dims::Heap(values) => values.len() / 2,
        }
    }

    pub(crate) fn shape(&self) -> &[i64] {
        let n = self.ndim();
        match self {
            Dims::Inline { values, .. } => &values[..n],
            Dims::Heap(values) => &values[..n],
        }
    }

    pub(crate) fn strides(&self) -> &[i64] {
        let n = self.ndim();
        match self {
            Dims::Inline { values, .. } => &values[INLINE..INLINE + n],
            Dims::Heap(values) => &values[n..],
        }
    }

    /// Shape and strides, mutably, for in-place edits that keep the dimension count.
    pub(crate) fn parts_mut(&mut self) -> (&mut [i64], &mut [i64]) {
        let n = self.ndim();
        match self {
            Dims::Inline { values, .. } => {
                let (shape, strides) = values.split_at_mut(INLINE);
                (&mut shape[..n], &mut strides[..n])
            }
            Dims::Heap(values) => values.split_at_mut(n),
        }
    }

    /// The same dimensions without `axis`.
    pub(crate) fn without(&self, axis: usize) -> Dims {
        let keep = |values: &[i64]| -> Vec<i64> {
            let mut v = values.to_vec();
            v.remove(axis);
            v
        };
        Dims::new(&keep(self.shape()), &keep(self.strides()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_dims_behave_alike() {
        for n in 0..=7usize {
            let shape: Vec<i64> = (0..n as i64).map(|i| i + 2).collect();
            let strides: Vec<i64> = (0..n as i64).map(|i| -(i * 10) - 1).collect();
            let mut dims = Dims::new(&shape, &strides);
            assert_eq!(matches!(dims, Dims::Inline { .. }), n <= INLINE);
            assert_eq!(
                (dims.ndim(), dims.shape(), dims.strides()),
                (n, &shape[..], &strides[..])
            );
            if n == 0 {
                continue;
            }
            let (s, st) = dims.parts_mut();
            s.swap(0, n - 1);
            st[0] = 99;
            assert_eq!(dims.shape()[0], shape[n - 1]);
            assert_eq!(dims.strides()[0], 99);
            let fewer = dims.without(0);
            assert_eq!(fewer.ndim(), n - 1);
            assert_eq!(fewer.shape(), &dims.shape()[1..]);
            assert_eq!(fewer.strides(), &dims.strides()[1..]);
            assert!(dims.clone() == dims);
        }
    }
}
