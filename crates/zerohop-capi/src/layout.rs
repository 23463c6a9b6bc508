//! A schema's layout before any buffer exists: the bytes and column places `zh_table_wrap`
//! will check, so a program sizes and fills its own allocation without reading the rules.

use zerohop::soa::{Layout, SOA_DEFAULT_ALIGNMENT};

use crate::rows::{column_info, zh_column_info};
use crate::schema::zh_schema;
use crate::status::{guard, handle, out_param, zh_status, Failure, Outcome};

/// The core's layout of `schema` for `rows` rows at `alignment` (0: 128), as tables make it.
///
/// # Safety
/// `schema` a live handle or NULL.
unsafe fn layout(schema: *const zh_schema, rows: usize, alignment: usize) -> Outcome<Layout> {
    // SAFETY: per this function's contract.
    let schema = unsafe { handle(schema, "schema") }?;
    Ok(Layout::new(
        &schema.schema,
        rows,
        alignment_or_default(alignment),
    )?)
}

/// The alignment a C caller asked for; 0 means the CMS default (128 bytes).
pub(crate) fn alignment_or_default(alignment: usize) -> usize {
    if alignment == 0 {
        SOA_DEFAULT_ALIGNMENT
    } else {
        alignment
    }
}

/// The bytes a table of `rows` rows of `schema` takes at `alignment` (0: 128) in `*bytes`:
/// what `zh_table_new` allocates and `zh_table_wrap` needs at least, padding included (a
/// multiple of the alignment, so `aligned_alloc(alignment, *bytes)` takes it as it is). An
/// alignment that is not a power of two or is below the widest element, or a size beyond the
/// address space, is ZH_INVALID_ARGUMENT.
///
/// # Safety
/// `schema` a live handle or NULL; `bytes` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_layout(
    schema: *const zh_schema,
    rows: usize,
    alignment: usize,
    bytes: *mut usize,
) -> zh_status {
    guard(|| {
        out_param(bytes, "bytes")?;
        // SAFETY: per the contract.
        let total = unsafe { layout(schema, rows, alignment) }?.total_bytes;
        // SAFETY: checked non-NULL above.
        unsafe { *bytes = total };
        Ok(())
    })
}

/// Column `index` (in the order the columns were added) of that layout in `*out`: the
/// `zh_column_info` that `zh_table_column_info` gives for the same column of a table of
/// `rows` rows made or wrapped with this schema and alignment. An index past the last column
/// is ZH_NOT_FOUND.
///
/// # Safety
/// `schema` a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_schema_column_layout(
    schema: *const zh_schema,
    rows: usize,
    alignment: usize,
    index: usize,
    out: *mut zh_column_info,
) -> zh_status {
    guard(|| {
        out_param(out, "out")?;
        // SAFETY: per the contract.
        let layout = unsafe { layout(schema, rows, alignment) }?;
        let column = layout.columns.get(index).ok_or_else(|| {
            Failure::not_found(format!(
                "column index {index} is out of range ({} columns)",
                layout.columns.len()
            ))
        })?;
        let info = column_info(column, rows, column.offset);
        // SAFETY: checked non-NULL above.
        unsafe { *out = info };
        Ok(())
    })
}
