//! Several layouts in one buffer (CMS's `SoABlocks`): where each block lies, and one table per
//! block over memory the caller allocated. The core's `BlocksLayout` and
//! `SoaTable::wrap_blocks` do the work; this file converts arguments and maps errors.

use std::ffi::c_void;

use zerohop::soa::{BlocksLayout, Schema, SoaTable};
use zerohop::Device;

use crate::layout::alignment_or_default;
use crate::schema::zh_schema;
use crate::status::{guard, handle, out_param, zh_status, Failure, Outcome};
use crate::table::{owner_of, zh_release_fn, zh_table};

/// The schemas `schemas[0..n]`, each built, beside `rows[0..n]`.
///
/// # Safety
/// `schemas` and `rows` must each point to `n` readable elements (or be NULL, an error); every
/// non-NULL schema must be a live handle.
unsafe fn blocks(
    schemas: *const *const zh_schema,
    rows: *const usize,
    n: usize,
) -> Outcome<Vec<(Schema, usize)>> {
    if n == 0 {
        return Err(Failure::invalid("n is 0: give at least one block"));
    }
    if schemas.is_null() || rows.is_null() {
        return Err(Failure::invalid("schemas or rows is NULL"));
    }
    // SAFETY: per the contract, n readable elements each.
    let (schemas, rows) = unsafe {
        (
            std::slice::from_raw_parts(schemas, n),
            std::slice::from_raw_parts(rows, n),
        )
    };
    schemas
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(k, (&schema, &rows))| {
            // SAFETY: per the contract.
            let schema = unsafe { handle(schema, &format!("schemas[{k}]")) }?
                .build()
                .map_err(|f| Failure {
                    message: format!("block {k}: {}", f.message),
                    ..f
                })?;
            Ok((schema, rows))
        })
        .collect()
}

/// Where `n` blocks lie in one buffer: block k has `schemas[k]`'s columns and `rows[k]` rows,
/// laid out by the CMS SoA rules at `alignment` (0: 128), the blocks one after another, each
/// starting on an `alignment` boundary. `offsets[k]` (when `offsets` is not NULL: n writable
/// elements) gets block k's byte offset and `*total_bytes` the bytes the buffer needs. Column
/// offsets inside a block are those `zh_table_column_info` gives for its table. Refused, naming
/// the block: n = 0, a NULL schema, a bad alignment, sizes that overflow.
///
/// # Safety
/// `schemas` and `rows` point to `n` elements each, every schema a live handle; `offsets` NULL
/// or `n` writable elements; `total_bytes` writable.
#[no_mangle]
pub unsafe extern "C" fn zh_blocks_layout(
    schemas: *const *const zh_schema,
    rows: *const usize,
    n: usize,
    alignment: usize,
    offsets: *mut usize,
    total_bytes: *mut usize,
) -> zh_status {
    guard(|| {
        out_param(total_bytes, "total_bytes")?;
        // SAFETY: per the contract.
        let blocks = unsafe { blocks(schemas, rows, n) }?;
        let refs: Vec<_> = blocks.iter().map(|(s, r)| (s, *r)).collect();
        let layout = BlocksLayout::new(&refs, alignment_or_default(alignment))?;
        if !offsets.is_null() {
            for (k, block) in layout.blocks.iter().enumerate() {
                // SAFETY: `offsets` has n writable elements, and there are n blocks.
                unsafe { offsets.add(k).write(block.offset) };
            }
        }
        // SAFETY: checked non-NULL above; writable per the contract.
        unsafe { total_bytes.write(layout.total_bytes) };
        Ok(())
    })
}

/// `n` tables over one buffer the caller allocated, block k at the offset `zh_blocks_layout`
/// gives it, with `schemas[k]`'s columns and `rows[k]` rows: nothing is copied and zerohop
/// allocates nothing. `tables[0..n]` get the tables (each freed by `zh_table_free`, in any
/// order); each maps, slices and exports as any table. `device`, `release` and `ctx` are
/// `zh_table_wrap`'s: `release(ctx)` runs exactly once, when the last table, slice or exported
/// tensor over any block is gone, or before this call returns when anything is refused (a
/// buffer too small for a block or not aligned for a block's widest element — the message
/// names the block —, n = 0, a NULL schema, data or out-parameter, a bad device). On refusal
/// nothing is written to `tables`.
///
/// # Safety
/// `schemas` and `rows` point to `n` elements each, every schema a live handle;
/// `data..data + bytes` memory on `device` that stays valid until `release(ctx)` is called;
/// `release(ctx)` safe to call from any thread; `tables` NULL or `n` writable elements.
#[no_mangle]
pub unsafe extern "C" fn zh_blocks_wrap(
    schemas: *const *const zh_schema,
    rows: *const usize,
    n: usize,
    alignment: usize,
    data: *mut c_void,
    bytes: usize,
    device: i32,
    release: zh_release_fn,
    ctx: *mut c_void,
    tables: *mut *mut zh_table,
) -> zh_status {
    guard(|| {
        // SAFETY: the caller's contract on `release` and `ctx`. From here on the memory is
        // the blocks', and every early return below releases it by dropping `owner`.
        let owner = unsafe { owner_of(release, ctx) }?;
        out_param(tables, "tables")?;
        // SAFETY: per the contract.
        let blocks = unsafe { blocks(schemas, rows, n) }?;
        let refs: Vec<_> = blocks.iter().map(|(s, r)| (s, *r)).collect();
        let device = Device::from_allocator_index(device)?;
        let alignment = alignment_or_default(alignment);
        // SAFETY: the caller's contract: the memory lives until `owner` releases it.
        let made =
            unsafe { SoaTable::wrap_blocks(&refs, alignment, data.cast(), bytes, device, owner) }?;
        for (k, table) in made.into_iter().enumerate() {
            let handle = Box::into_raw(Box::new(zh_table::new(table.into())));
            // SAFETY: `tables` is non-NULL with n writable elements; wrap_blocks made n.
            unsafe { tables.add(k).write(handle) };
        }
        Ok(())
    })
}
