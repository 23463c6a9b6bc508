//! Row windows of a table (batches of a large one, CMS's `BatchedTensorCollection`) and where
//! each column lies in the buffer.

use std::ffi::c_char;

use zerohop::soa::{ColumnKind, ColumnLayout};

use crate::status::{guard, handle, out_param, text, zh_status, Outcome};
use crate::table::{give_window, zh_table};

/// What a column is and where it lies: enough to address it without zerohop.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct zh_column_info {
    /// Bytes from the table buffer's start (`zh_table_info.data`) to this view's first value
    /// of component 0.
    pub offset: usize,
    /// Elements from one component to the next (each padded to the alignment).
    pub pitch: usize,
    /// 0: table scalar, 1: column, 2: vector, 3: matrix.
    pub kind: i32,
    /// Values per row (1, K or R·C).
    pub components: usize,
    /// The tensor `zh_table_column` exports: `ndim` sizes and strides in elements (a scalar
    /// is 0-d; a column (n); a vector (n, K); a matrix (n, R, C) in its component order).
    pub ndim: i32,
    pub shape: [i64; 3],
    pub strides: [i64; 3],
    /// DLPack's DLDataType.
    pub dtype_code: u8,
    pub dtype_bits: u8,
    pub dtype_lanes: u16,
}

/// Rows `start..stop` of `table` as a table of their own in `*out` (free it with
/// `zh_table_free`), over the same memory: nothing is copied or allocated beyond the handle, and
/// the memory stays alive while either lives. Maps applied to it give that many rows. A range
/// outside the table is ZH_INVALID_ARGUMENT.
///
/// # Safety
/// `table` a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_rows(
    table: *const zh_table,
    start: usize,
    stop: usize,
    out: *mut *mut zh_table,
) -> zh_status {
    // SAFETY: per the contract.
    guard(|| unsafe { give_window(table, out, |t| t.slice_rows(start, stop)) })
}

/// Column `name`'s place and shape in `*out`; ZH_NOT_FOUND for a name the table lacks.
///
/// # Safety
/// `table` a live handle or NULL; `name` NUL-terminated or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_column_info(
    table: *const zh_table,
    name: *const c_char,
    out: *mut zh_column_info,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let t = unsafe { handle(table, "table") }?.soa("zh_table_column_info")?;
        // SAFETY: as above.
        let name = unsafe { text(name, "column name") }?;
        let info = describe(t, name)?;
        // SAFETY: checked non-NULL above.
        unsafe { *out = info };
        Ok(())
    })
}

fn describe(t: &zerohop::soa::SoaTable, name: &str) -> Outcome<zh_column_info> {
    let column = t.layout().column(t.schema().index_of(name)?);
    let view = t.column_view(name)?;
    // The view's start, not the layout's: a row window begins further in.
    let offset = view.data_ptr() as usize - t.buffer().as_ptr() as usize;
    Ok(column_info(column, t.len(), offset))
}

/// `column` over `rows` rows, its component 0 at `offset`: the one description of a column
/// for a table (`zh_table_column_info`) and for a layout before any buffer exists
/// (`zh_schema_column_layout`).
pub(crate) fn column_info(column: &ColumnLayout, rows: usize, offset: usize) -> zh_column_info {
    let dims = column.dims(rows);
    zh_column_info {
        offset,
        pitch: column.pitch,
        kind: match column.kind {
            ColumnKind::TableScalar => 0,
            ColumnKind::Column => 1,
            ColumnKind::Vector(_) => 2,
            ColumnKind::Matrix { .. } => 3,
        },
        components: column.kind.components(),
        ndim: dims.ndim as i32,
        shape: dims.shape,
        strides: dims.strides,
        dtype_code: column.dtype.code as u8,
        dtype_bits: column.dtype.bits,
        dtype_lanes: column.dtype.lanes,
    }
}
