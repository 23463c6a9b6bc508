//! Several layouts in one buffer (CMS's `SoABlocks`): blocks of different schemas and row
//! counts one after another, each starting on an alignment boundary, so a framework makes one
//! allocation for, say, tracks, vertices and hits. Each block is an ordinary [`SoaTable`], so
//! every map and spec works on it as on a table of its own.

use std::ptr::NonNull;

use super::foreign::check_device;
use super::layout::Layout;
use super::schema::Schema;
use super::table::SoaTable;
use crate::buffer::{Buffer, Owner};
use crate::device::Device;
use crate::error::{Error, Result};

/// One block's place in the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Byte offset of the block from the start of the buffer (a multiple of the alignment).
    pub offset: usize,
    /// The block's own layout; its column offsets are relative to `offset`.
    pub layout: Layout,
}

impl BlockLayout {
    /// Bytes the block occupies, padding included.
    pub fn size(&self) -> usize {
        self.layout.total_bytes
    }
}

/// Where each of several blocks lies in one buffer, and how large the buffer must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlocksLayout {
    pub alignment: usize,
    pub blocks: Vec<BlockLayout>,
    pub total_bytes: usize,
}

/// An error about block `index`, so a caller with many blocks knows which one to fix.
fn block_error(index: usize, reason: impl std::fmt::Display) -> Error {
    Error::Layout {
        what: format!("block {index}"),
        reason: reason.to_string(),
    }
}

impl BlocksLayout {
    /// The layout of `blocks` (each a schema and its row count) at `alignment`, in order.
    /// Refused: no blocks, a block whose own layout is refused (a bad alignment, too many
    /// rows), and sizes that overflow the address space; the error names the block.
    pub fn new(blocks: &[(&Schema, usize)], alignment: usize) -> Result<Self> {
        if blocks.is_empty() {
            return Err(Error::Layout {
                what: "blocks".into(),
                reason: "there are none: give at least one schema and row count".into(),
            });
        }
        let mut offset = 0usize;
        let mut out = Vec::with_capacity(blocks.len());
        for (index, &(schema, rows)) in blocks.iter().enumerate() {
            let layout = Layout::new(schema, rows, alignment).map_err(|e| block_error(index, e))?;
            // Every column is padded to the alignment, so a block's size already is a multiple
            // of it; rounding anyway keeps each start aligned if that rule ever changes.
            let start = offset
                .checked_next_multiple_of(alignment)
                .ok_or_else(|| block_error(index, "its start overflows the address space"))?;
            offset = start
                .checked_add(layout.total_bytes)
                .filter(|&end| isize::try_from(end).is_ok())
                .ok_or_else(|| block_error(index, "its end overflows the address space"))?;
            out.push(BlockLayout {
                offset: start,
                layout,
            });
        }
        Ok(BlocksLayout {
            alignment,
            blocks: out,
            total_bytes: offset,
        })
    }
}

impl SoaTable {
    /// One table per block over `bytes` bytes at `data` on `device`, laid out by
    /// [`BlocksLayout::new`]: nothing is copied and zerohop allocates nothing.
    ///
    /// `owner` is dropped exactly once: when the last table, slice or exported tensor over any
    /// of the blocks goes, or before this returns when anything is refused (a NULL `data`, a
    /// CUDA pointer not on `device`, a bad layout, a buffer too small for a block, an address
    /// not aligned for a block's widest element; the error names the block).
    ///
    /// # Safety
    /// `data..data + bytes` must be memory on `device` that stays valid, and that nothing frees,
    /// until `owner` is dropped.
    pub unsafe fn wrap_blocks(
        blocks: &[(&Schema, usize)],
        alignment: usize,
        data: *mut u8,
        bytes: usize,
        device: Device,
        owner: Owner,
    ) -> Result<Vec<SoaTable>> {
        let Some(ptr) = NonNull::new(data) else {
            return Err(Error::Layout {
                what: "blocks buffer".into(),
                reason: "the data pointer is NULL".into(),
            });
        };
        check_device(ptr, device)?;
        let layout = BlocksLayout::new(blocks, alignment)?;
        for (index, (block, &(schema, _))) in layout.blocks.iter().zip(blocks).enumerate() {
            check_fits(index, block, schema, data, bytes)?;
        }
        // SAFETY: the caller's contract; `owner` now travels with the whole buffer, and each
        // block's buffer below keeps the whole one alive, so it is dropped after the last block.
        let whole = unsafe { Buffer::from_foreign(ptr, bytes, device, owner) };
        let mut tables = Vec::with_capacity(blocks.len());
        for (index, (block, &(schema, rows))) in layout.blocks.iter().zip(blocks).enumerate() {
            // Inside the buffer (check_fits): offset + size ≤ bytes, so never NULL.
            let start = NonNull::new(data.wrapping_add(block.offset))
                .ok_or_else(|| block_error(index, "its address wraps around"))?;
            // SAFETY: start..start + size lies inside data..data + bytes (check_fits), which
            // stays valid while `whole`, hence its owner, lives.
            let part = unsafe { Buffer::from_foreign(start, block.size(), device, whole.owner()) };
            let table = SoaTable::over_buffer(schema.clone(), rows, alignment, part, 0, rows)
                .map_err(|e| block_error(index, e))?;
            tables.push(table);
        }
        Ok(tables)
    }
}

/// Refuses a buffer that ends before block `index` does, or whose address leaves the block's
/// widest element unaligned (block starts are multiples of the alignment, itself no smaller
/// than any block's widest element, so each block inherits the buffer's alignment).
fn check_fits(
    index: usize,
    block: &BlockLayout,
    schema: &Schema,
    data: *mut u8,
    bytes: usize,
) -> Result<()> {
    let end = block.offset + block.size();
    if end > bytes {
        return Err(block_error(
            index,
            format!(
                "it takes bytes {}..{end} ({} rows at alignment {}), but the buffer has {bytes}",
                block.offset, block.layout.rows, block.layout.alignment
            ),
        ));
    }
    let widest = schema
        .columns()
        .iter()
        .map(|c| c.dtype.alignment())
        .max()
        .unwrap_or(1);
    let start = (data as usize).wrapping_add(block.offset);
    if !start.is_multiple_of(widest) {
        return Err(block_error(
            index,
            format!("it starts at {start:#x}, not aligned to the {widest} bytes its columns need"),
        ));
    }
    Ok(())
}
