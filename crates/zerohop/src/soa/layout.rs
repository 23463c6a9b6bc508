//! Where each column lives in the table's one buffer (the CMS SoA layout): columns in
//! declaration order; each column, and each component of a vector or matrix, padded to the
//! alignment.

use std::fmt;

use super::schema::{ColumnKind, Schema};
use super::table::matrix_strides;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The alignment of every column unless asked otherwise: an NVIDIA GPU cache line.
pub const SOA_DEFAULT_ALIGNMENT: usize = 128;

/// One column's place in the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnLayout {
    pub name: String,
    pub dtype: DType,
    pub kind: ColumnKind,
    /// Byte offset of component 0 from the start of the buffer.
    pub offset: usize,
    /// Elements from one component to the next (per-row values of one component are
    /// contiguous). For a table scalar, the elements it reserves.
    pub pitch: usize,
    /// Bytes the column occupies, padding included.
    pub size: usize,
    /// Bytes of padding inside `size`.
    pub padding: usize,
}

/// The tensor a column of a table (or a row window of one) is, in elements: a table scalar is
/// 0-d; a column (n,); a `vector[K]` (n, K) with strides (1, pitch); a `matrix[R, C]`
/// (n, R, C) with strides following its component order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDims {
    pub ndim: usize,
    pub shape: [i64; 3],
    pub strides: [i64; 3],
}

impl ColumnDims {
    pub fn shape(&self) -> &[i64] {
        &self.shape[..self.ndim]
    }
    pub fn strides(&self) -> &[i64] {
        &self.strides[..self.ndim]
    }
}

impl ColumnLayout {
    /// The column's tensor over `rows` rows. `rows` is at most the layout's, which
    /// [`Layout::new`] kept within an `i64`.
    pub fn dims(&self, rows: usize) -> ColumnDims {
        let n = rows as i64;
        let s = self.pitch as i64;
        let (ndim, shape, strides) = match self.kind {
            ColumnKind::TableScalar => (0, [0; 3], [0; 3]),
            ColumnKind::Column => (1, [n, 0, 0], [1, 0, 0]),
            ColumnKind::Vector(k) => (2, [n, k as i64, 0], [1, s, 0]),
            ColumnKind::Matrix { rows, cols, .. } => {
                let (rs, cs) = matrix_strides(self.kind, s);
                (3, [n, rows as i64, cols as i64], [1, rs, cs])
            }
        };
        ColumnDims {
            ndim,
            shape,
            strides,
        }
    }
}

/// The byte-exact layout of a table of `rows` rows (its capacity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub rows: usize,
    pub alignment: usize,
    pub columns: Vec<ColumnLayout>,
    pub total_bytes: usize,
}

fn overflow(what: &str) -> Error {
    Error::Layout {
        what: "table size".into(),
        reason: format!("{what} overflows the address space"),
    }
}

impl Layout {
    pub fn new(schema: &Schema, rows: usize, alignment: usize) -> Result<Self> {
        let widest = schema
            .columns()
            .iter()
            .map(|c| c.dtype.itemsize())
            .max()
            .unwrap_or(1);
        if !alignment.is_power_of_two() || alignment < widest {
            return Err(Error::Layout {
                what: "alignment".into(),
                reason: format!(
                    "{alignment} must be a power of two no smaller than the widest element \
                     ({widest} bytes)"
                ),
            });
        }
        // Tensor dimensions are i64 (DLPack, torch, NumPy): a row count above that would only
        // fail later, as a "negative" shape.
        if i64::try_from(rows).is_err() {
            return Err(Error::Layout {
                what: "rows".into(),
                reason: format!(
                    "{rows} is more than a tensor dimension holds ({})",
                    i64::MAX
                ),
            });
        }
        let mut offset = 0usize;
        let mut columns = Vec::with_capacity(schema.columns().len());
        for spec in schema.columns() {
            let item = spec.dtype.itemsize();
            let (pitch_bytes, count, data_bytes) = match spec.kind {
                ColumnKind::TableScalar => (item.next_multiple_of(alignment), 1, item),
                kind => {
                    let one = rows
                        .checked_mul(item)
                        .and_then(|b| b.checked_next_multiple_of(alignment))
                        .ok_or_else(|| overflow(&spec.name))?;
                    // Never more than `one * components`, whose overflow is checked below.
                    let data = (rows * item).saturating_mul(kind.components());
                    (one, kind.components(), data)
                }
            };
            let size = pitch_bytes
                .checked_mul(count)
                .ok_or_else(|| overflow(&spec.name))?;
            columns.push(ColumnLayout {
                name: spec.name.clone(),
                dtype: spec.dtype,
                kind: spec.kind,
                offset,
                pitch: pitch_bytes / item,
                size,
                padding: size - data_bytes,
            });
            offset = offset
                .checked_add(size)
                .ok_or_else(|| overflow(&spec.name))?;
        }
        if isize::try_from(offset).is_err() {
            return Err(overflow("the table"));
        }
        Ok(Layout {
            rows,
            alignment,
            columns,
            total_bytes: offset,
        })
    }

    pub fn column(&self, index: usize) -> &ColumnLayout {
        &self.columns[index]
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "SoA layout: {} rows, alignment {} B, {} bytes",
            self.rows, self.alignment, self.total_bytes
        )?;
        writeln!(
            f,
            "  {:<16} {:<10} {:<28} {:>10} {:>10} {:>8} {:>8}",
            "column", "dtype", "kind", "offset", "size", "padding", "pitch"
        )?;
        for c in &self.columns {
            writeln!(
                f,
                "  {:<16} {:<10} {:<28} {:>10} {:>10} {:>8} {:>8}",
                c.name,
                c.dtype.to_string(),
                c.kind.to_string(),
                c.offset,
                c.size,
                c.padding,
                c.pitch
            )?;
        }
        Ok(())
    }
}
