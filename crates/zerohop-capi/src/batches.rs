//! A batch loop over a table: how many batches of N rows there are, and batch i as a table
//! of its own. The spans are the core's (`zerohop::soa::Batches`), computed without overflow.

use crate::status::{guard, handle, out_param, zh_status};
use crate::table::{give_window, zh_table};

/// How many batches of `batch_rows` rows cover `table` in `*count`: rows / batch_rows
/// rounded up (0 for a table without rows). `batch_rows` 0 is ZH_INVALID_ARGUMENT.
///
/// # Safety
/// `table` a live handle or NULL; `count` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_batch_count(
    table: *const zh_table,
    batch_rows: usize,
    count: *mut usize,
) -> zh_status {
    guard(|| {
        out_param(count, "count")?;
        // SAFETY: per the contract.
        let n = unsafe { handle(table, "table") }?
            .table
            .batch_count(batch_rows)?;
        // SAFETY: checked non-NULL above.
        unsafe { *count = n };
        Ok(())
    })
}

/// Batch `index` of `batch_rows` rows as a table of its own in `*out` (free it with
/// `zh_table_free`): rows `index * batch_rows` up to `(index + 1) * batch_rows` or the
/// table's end, whichever comes first, so the last batch may be short. Like `zh_table_rows`,
/// it shares the table's memory and stream; a batch starting at a row where the columns are
/// not aligned is still exactly its rows (its tensors keep the table's strides, their starts
/// as `zh_table_column_info` says). `batch_rows` 0 and an index at or past
/// `zh_table_batch_count` are ZH_INVALID_ARGUMENT, whatever their product would be.
///
/// # Safety
/// `table` a live handle or NULL; `out` writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn zh_table_batch(
    table: *const zh_table,
    batch_rows: usize,
    index: usize,
    out: *mut *mut zh_table,
) -> zh_status {
    // SAFETY: per the contract.
    guard(|| unsafe { give_window(table, out, |t| t.batch(batch_rows, index)) })
}
