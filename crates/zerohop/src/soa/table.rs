//! `SoaTable`: one aligned buffer holding every column of a schema, with typed access and
//! zero-copy row slices.

use std::sync::Arc;

use super::layout::{Layout, SOA_DEFAULT_ALIGNMENT};
use super::schema::{ColumnKind, Schema};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::memory::{current_resource, MemoryResource, Stream};
use crate::tensor::TensorView;

/// A structure-of-arrays table. Cloning shares the memory (it is a view, like `TensorView`).
#[derive(Clone, Debug)]
pub struct SoaTable {
    schema: Arc<Schema>,
    layout: Arc<Layout>,
    buffer: Buffer,
    /// First row of this view within the buffer (row slices share the buffer).
    first_row: usize,
    len: usize,
    readonly: bool,
    /// The source of an asynchronous copy this table was made by, kept alive so the copy
    /// never reads freed memory (see `copy_to`).
    _copy_source: Option<Buffer>,
}

impl SoaTable {
    /// A zero-filled table of `rows` rows in host memory from the current host resource,
    /// aligned to 128 bytes.
    pub fn new(schema: Schema, rows: usize) -> Result<Self> {
        let resource = current_resource(Device::CPU).expect("the host always has a resource");
        Self::with_options(schema, rows, SOA_DEFAULT_ALIGNMENT, resource)
    }

    /// A table of `rows` rows aligned to `alignment`, allocated from `resource` (zero-filled
    /// when the memory is host-accessible).
    pub fn with_options(
        schema: Schema,
        rows: usize,
        alignment: usize,
        resource: Arc<dyn MemoryResource>,
    ) -> Result<Self> {
        // SAFETY: zero_fill below initialises every byte (host or device) or the table is
        // dropped with the error, unread.
        let table =
            unsafe { Self::new_uninit_in(schema, rows, alignment, resource, Stream::HOST) }?;
        zero_fill(&table.buffer, table.layout.total_bytes)?;
        Ok(table)
    }

    /// A host table of `rows` rows from the current host resource whose memory is *not*
    /// initialised: for producers that write every element anyway (a CSV reader), saving a
    /// pass over memory that would only be overwritten.
    ///
    /// # Safety
    /// Every element of every column must be written before anything reads it or the table
    /// is shared (padding between columns is never read through the table).
    pub unsafe fn new_uninit(schema: Schema, rows: usize) -> Result<Self> {
        let resource = current_resource(Device::CPU).expect("the host always has a resource");
        // SAFETY: the caller's contract, passed on.
        unsafe { Self::new_uninit_in(schema, rows, SOA_DEFAULT_ALIGNMENT, resource, Stream::HOST) }
    }

    /// A table of `rows` rows from `resource` (device memory too) whose memory is *not*
    /// initialised, allocated in `stream`'s order: for producers that write every element on
    /// that stream anyway (the GPU CSV reader).
    ///
    /// # Safety
    /// As [`SoaTable::new_uninit`]: every element of every column must be written before
    /// anything reads it or the table is shared.
    pub unsafe fn new_uninit_in(
        schema: Schema,
        rows: usize,
        alignment: usize,
        resource: Arc<dyn MemoryResource>,
        stream: Stream,
    ) -> Result<Self> {
        let layout = Layout::new(&schema, rows, alignment)?;
        // The buffer itself is always cache-line aligned, even when columns pack tightly
        // (alignment = element size), so consumers that want aligned starts get them.
        let base_alignment = alignment.max(crate::memory::DEFAULT_ALIGNMENT);
        let buffer = Buffer::allocate(resource, layout.total_bytes, base_alignment, stream)?;
        Ok(SoaTable {
            schema: Arc::new(schema),
            layout: Arc::new(layout),
            buffer,
            first_row: 0,
            len: rows,
            readonly: false,
            _copy_source: None,
        })
    }

    /// A table over memory that already holds one (received from another process): `buffer`
    /// is laid out for `schema`, `rows` and `alignment`, and the view covers rows
    /// `first_row..first_row + len`. Refuses a buffer smaller than the layout or whose start
    /// is not aligned for the widest element, and a row window outside the table.
    pub fn over_buffer(
        schema: Schema,
        rows: usize,
        alignment: usize,
        buffer: Buffer,
        first_row: usize,
        len: usize,
    ) -> Result<Self> {
        let layout = Layout::new(&schema, rows, alignment)?;
        if buffer.len() < layout.total_bytes {
            return Err(Error::Layout {
                what: "table buffer".into(),
                reason: format!(
                    "{} bytes, but {rows} rows of this schema at alignment {alignment} take {}",
                    buffer.len(),
                    layout.total_bytes
                ),
            });
        }
        let element_alignment = layout
            .columns
            .iter()
            .map(|c| c.dtype.alignment())
            .max()
            .unwrap_or(1);
        if !(buffer.as_ptr() as usize).is_multiple_of(element_alignment) {
            return Err(Error::Layout {
                what: "table buffer".into(),
                reason: format!(
                    "address {:p} is not aligned to the {element_alignment} bytes its columns need",
                    buffer.as_ptr()
                ),
            });
        }
        if first_row.checked_add(len).is_none_or(|end| end > rows) {
            return Err(Error::Layout {
                what: "row range".into(),
                reason: format!("{first_row}+{len} is outside a table of {rows} rows"),
            });
        }
        Ok(SoaTable {
            schema: Arc::new(schema),
            layout: Arc::new(layout),
            buffer,
            first_row,
            len,
            readonly: false,
            _copy_source: None,
        })
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn first_row(&self) -> usize {
        self.first_row
    }
    pub fn device(&self) -> Device {
        self.buffer.device()
    }
    pub fn is_readonly(&self) -> bool {
        self.readonly
    }

    /// The same table, refusing writes through it and exporting with DLPack's READ_ONLY flag.
    pub fn into_readonly(mut self) -> Self {
        self.readonly = true;
        self
    }

    /// The layout printed as a table: offset, size, padding and pitch of every column.
    pub fn describe(&self) -> String {
        let mut text = self.layout.to_string();
        if self.first_row != 0 || self.len != self.layout.rows {
            text.push_str(&format!(
                "  view: rows {}..{} (guaranteed alignment {} B)\n",
                self.first_row,
                self.first_row + self.len,
                self.alignment()
            ));
        }
        text
    }

    /// Address of component `component`, row 0 of this view, of column `index`.
    pub(crate) fn component_ptr(&self, index: usize, component: usize) -> *mut u8 {
        let col = self.layout.column(index);
        let item = col.dtype.itemsize();
        let row = if col.kind == ColumnKind::TableScalar {
            0
        } else {
            self.first_row
        };
        let elements = component * col.pitch + row;
        // Inside the buffer: the layout reserved `pitch` elements per component.
        self.buffer
            .as_ptr()
            .wrapping_add(col.offset + elements * item)
    }

    /// The alignment every column start of this view is guaranteed to have. Equal to the
    /// layout's alignment for the whole table; a row slice starting at a row that breaks it
    /// is still valid and reports the smaller alignment it really has.
    pub fn alignment(&self) -> usize {
        let mut align = self.layout.alignment;
        for (i, col) in self.layout.columns.iter().enumerate() {
            if col.kind == ColumnKind::TableScalar {
                continue;
            }
            let addr = self.component_ptr(i, 0) as usize;
            align = align.min(1 << addr.trailing_zeros().min(63));
        }
        align
    }

    /// A new table of `rows` rows (same schema and alignment, current host resource) holding
    /// a copy of this view's first `keep` rows: how growable tables grow.
    pub fn regrown(&self, rows: usize, keep: usize) -> Result<SoaTable> {
        if keep > self.len || keep > rows {
            return Err(Error::Layout {
                what: "rows to keep".into(),
                reason: format!("{keep} exceeds the old ({}) or new ({rows}) size", self.len),
            });
        }
        let resource = current_resource(Device::CPU).expect("the host always has a resource");
        let mut grown = SoaTable::with_options(
            (*self.schema).clone(),
            rows,
            self.layout.alignment,
            resource,
        )?;
        grown.readonly = self.readonly;
        for (index, col) in self.layout.columns.iter().enumerate() {
            let (count, per) = match col.kind {
                ColumnKind::TableScalar => (1, 1),
                kind => (kind.components(), keep),
            };
            let bytes = per * col.dtype.itemsize();
            for component in 0..count {
                // SAFETY: both tables are host tables with this column; `per` elements fit
                // in both (keep ≤ len, keep ≤ rows) and the buffers are distinct.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.component_ptr(index, component),
                        grown.component_ptr(index, component),
                        bytes,
                    )
                };
            }
        }
        Ok(grown)
    }

    /// The same table in memory from `resource` (another device, pinned host memory, …):
    /// one copy of the whole buffer, the layout unchanged, enqueued on `stream` when a device
    /// is involved (asynchronous from pinned host memory; from pageable memory the driver
    /// stages it). The copy keeps this view's row window. Work on `stream` sees the data; other
    /// streams must be ordered after it.
    pub fn copy_to(&self, resource: Arc<dyn MemoryResource>, stream: Stream) -> Result<SoaTable> {
        let base_alignment = self.layout.alignment.max(crate::memory::DEFAULT_ALIGNMENT);
        let bytes = self.layout.total_bytes;
        let buffer = Buffer::allocate(resource, bytes, base_alignment, stream)?;
        let (from, to) = (self.buffer.device(), buffer.device());
        let copy_source = if from.is_host_accessible() && to.is_host_accessible() {
            // SAFETY: two distinct buffers of at least `bytes` host-accessible bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.buffer.as_ptr(), buffer.as_ptr(), bytes) };
            None
        } else {
            copy_between_devices(&self.buffer, &buffer, bytes, stream)?;
            Some(self.buffer.clone())
        };
        Ok(SoaTable {
            schema: self.schema.clone(),
            layout: self.layout.clone(),
            buffer,
            first_row: self.first_row,
            len: self.len,
            readonly: self.readonly,
            _copy_source: copy_source,
        })
    }

    /// Rows `start..end` of this table, sharing its memory.
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<SoaTable> {
        check_row_range(start, end, self.len)?;
        let mut out = self.clone();
        out.first_row = self.first_row + start;
        out.len = end - start;
        Ok(out)
    }

    /// A zero-copy tensor of one column: a table scalar is 0-d; a column is (n,); a
    /// `vector[K]` is (n, K) with strides (1, pitch); a `matrix[R, C]` is (n, R, C) with strides
    /// following its component order.
    pub fn column_view(&self, name: &str) -> Result<TensorView> {
        let index = self.schema.index_of(name)?;
        let col = self.layout.column(index);
        let dims = col.dims(self.len);
        self.view_of(
            self.component_ptr(index, 0),
            col.dtype,
            dims.shape(),
            dims.strides(),
        )
    }

    pub(crate) fn view_of(
        &self,
        data: *mut u8,
        dtype: crate::dtype::DType,
        shape: &[i64],
        strides: &[i64],
    ) -> Result<TensorView> {
        // SAFETY: `data`, `shape` and `strides` stay inside this table's buffer (callers build
        // them from the layout), which the view keeps alive through its owner.
        unsafe {
            TensorView::from_raw_dims(
                data,
                dtype,
                shape,
                strides,
                self.device(),
                self.buffer.owner(),
                self.readonly,
            )
        }
    }

    fn typed_component<T: Element>(&self, name: &str, component: usize) -> Result<(*mut T, usize)> {
        let index = self.schema.index_of(name)?;
        let col = self.layout.column(index);
        if !self.device().is_host_accessible() {
            return Err(Error::NotHostAccessible {
                device: self.device(),
            });
        }
        if col.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch {
                actual: format!("{} (column {name:?})", col.dtype),
                requested: T::DTYPE.to_string(),
            });
        }
        if component >= col.kind.components() {
            return Err(Error::Layout {
                what: "component".into(),
                reason: format!(
                    "column {name:?} ({}) has {} components, asked for {component}",
                    col.kind,
                    col.kind.components()
                ),
            });
        }
        let len = if col.kind == ColumnKind::TableScalar {
            1
        } else {
            self.len
        };
        Ok((self.component_ptr(index, component) as *mut T, len))
    }

    /// The values of a plain column (or component 0 of any column) for this view's rows.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        self.component(name, 0)
    }

    /// Component `k` of a vector or matrix column: one contiguous value per row.
    pub fn component<T: Element>(&self, name: &str, k: usize) -> Result<&[T]> {
        let (ptr, len) = self.typed_component::<T>(name, k)?;
        // SAFETY: the component holds `len` initialised (zero-filled at allocation) elements of
        // T, aligned because columns are aligned to at least T's size; the buffer lives as
        // long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Mutable access to a column's values.
    ///
    /// Writable tensors exported from this table (through DLPack or a TensorMap) share this
    /// memory: the caller must not write here while another framework uses them.
    pub fn column_mut<T: Element>(&mut self, name: &str) -> Result<&mut [T]> {
        self.component_mut(name, 0)
    }

    /// Mutable access to component `k`; the same sharing rule as [`SoaTable::column_mut`].
    pub fn component_mut<T: Element>(&mut self, name: &str, k: usize) -> Result<&mut [T]> {
        if self.readonly {
            return Err(Error::ReadOnly(format!(
                "column {name:?} of a read-only table"
            )));
        }
        let (ptr, len) = self.typed_component::<T>(name, k)?;
        // SAFETY: as in `component`, plus `&mut self` excludes other Rust access through this
        // handle; sharing with exported views is the documented contract above.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    /// Every column at once, mutable, for tables whose columns are all plain columns of `T`
    /// (a CSV reader fills them in parallel). Same sharing rule as [`SoaTable::column_mut`].
    pub fn columns_mut<T: Element>(&mut self) -> Result<Vec<&mut [T]>> {
        if self.readonly {
            return Err(Error::ReadOnly("columns of a read-only table".into()));
        }
        let mut out = Vec::with_capacity(self.layout.columns.len());
        for i in 0..self.layout.columns.len() {
            let col = self.layout.column(i);
            if col.kind != ColumnKind::Column {
                return Err(Error::Schema {
                    what: "column".into(),
                    reason: format!("{:?} is a {}, not a plain column", col.name, col.kind),
                });
            }
            let (ptr, len) = self.typed_component::<T>(&col.name.clone(), 0)?;
            // SAFETY: columns occupy disjoint byte ranges of the buffer (the layout places
            // them one after another), so these mutable slices never overlap; `&mut self`
            // excludes other access through this handle.
            out.push(unsafe { std::slice::from_raw_parts_mut(ptr, len) });
        }
        Ok(out)
    }

    /// A table scalar's value.
    pub fn scalar<T: Element>(&self, name: &str) -> Result<T> {
        self.expect_scalar(name)?;
        Ok(self.component::<T>(name, 0)?[0])
    }

    pub fn set_scalar<T: Element>(&mut self, name: &str, value: T) -> Result<()> {
        self.expect_scalar(name)?;
        self.component_mut::<T>(name, 0)?[0] = value;
        Ok(())
    }

    fn expect_scalar(&self, name: &str) -> Result<()> {
        let col = self.layout.column(self.schema.index_of(name)?);
        if col.kind != ColumnKind::TableScalar {
            return Err(Error::Schema {
                what: "column".into(),
                reason: format!("{name:?} is a {}, not a table scalar", col.kind),
            });
        }
        Ok(())
    }
}

/// (row stride, column stride) in elements of a matrix column's R and C axes, given the
/// component pitch `s`.
pub(crate) fn matrix_strides(kind: ColumnKind, s: i64) -> (i64, i64) {
    match kind {
        ColumnKind::Matrix {
            rows,
            cols,
            order: super::schema::ComponentOrder::RowMajor,
        } => {
            let _ = rows;
            (cols as i64 * s, s)
        }
        ColumnKind::Matrix { rows, .. } => (s, rows as i64 * s),
        _ => (s, s),
    }
}

/// Zeroes a fresh table buffer wherever it lives.
fn zero_fill(buffer: &Buffer, bytes: usize) -> Result<()> {
    if buffer.device().is_host_accessible() {
        // SAFETY: a fresh buffer of `bytes` host bytes nobody else sees yet.
        unsafe { std::ptr::write_bytes(buffer.as_ptr(), 0, bytes) };
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    if buffer.device().kind == crate::device::DeviceKind::Cuda {
        // SAFETY: a fresh device buffer of `bytes` bytes on that device.
        return unsafe { crate::cuda::memset_zero(buffer.device().id, buffer.as_ptr(), bytes) };
    }
    Err(Error::NotHostAccessible {
        device: buffer.device(),
    })
}

/// Refuses rows `start..stop` that are not a range inside a table of `len` rows: the one check
/// every kind of table's slice makes.
pub(crate) fn check_row_range(start: usize, stop: usize, len: usize) -> Result<()> {
    if start > stop || stop > len {
        return Err(Error::Layout {
            what: "row range".into(),
            reason: format!("{start}..{stop} is outside a table of {len} rows"),
        });
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn copy_between_devices(src: &Buffer, dst: &Buffer, bytes: usize, stream: Stream) -> Result<()> {
    use crate::device::DeviceKind;
    let device = [dst.device(), src.device()]
        .into_iter()
        .find(|d| matches!(d.kind, DeviceKind::Cuda))
        .map_or(0, |d| d.id);
    // SAFETY: distinct buffers of at least `bytes` bytes; the new table keeps the source
    // alive, so the copy never reads freed memory.
    unsafe { crate::cuda::copy_async(device, dst.as_ptr(), src.as_ptr(), bytes, stream) }
}

#[cfg(not(feature = "cuda"))]
fn copy_between_devices(src: &Buffer, dst: &Buffer, _bytes: usize, _stream: Stream) -> Result<()> {
    Err(Error::CudaUnavailable {
        what: "table copy".into(),
        reason: format!(
            "from {} to {} needs zerohop's cuda feature",
            src.device(),
            dst.device()
        ),
    })
}
