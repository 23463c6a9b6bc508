//! Several layouts in one buffer: where each block lies, what is refused (naming the block),
//! and that the buffer's owner hears once, after the last table over any block.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;
use crate::device::Device;
use crate::dtype::DType;
use crate::Owner;

fn tracks() -> Schema {
    Schema::builder()
        .scalar("b_field", DType::F32)
        .column("pt", DType::F32)
        .vector("position", DType::F32, 3)
        .build()
        .unwrap()
}

fn vertices() -> Schema {
    Schema::builder()
        .column("z", DType::F64)
        .column("ntracks", DType::I32)
        .build()
        .unwrap()
}

struct Release(Arc<AtomicUsize>);
impl Drop for Release {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Memory the test owns (u64 words, so 8-byte aligned) and a count of its releases.
struct Program {
    words: Vec<u64>,
    releases: Arc<AtomicUsize>,
}

impl Program {
    fn new(bytes: usize) -> Self {
        Program {
            words: vec![0; bytes.div_ceil(8)],
            releases: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn base(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
    fn owner(&self) -> Owner {
        Arc::new(Release(self.releases.clone()))
    }
    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

#[test]
fn blocks_follow_each_other_each_laid_out_as_a_table_of_its_own() {
    let (t, v) = (tracks(), vertices());
    let layout = BlocksLayout::new(&[(&t, 1000), (&v, 40), (&t, 20000)], 128).unwrap();
    let sizes = [
        Layout::new(&t, 1000, 128).unwrap().total_bytes,
        Layout::new(&v, 40, 128).unwrap().total_bytes,
        Layout::new(&t, 20000, 128).unwrap().total_bytes,
    ];
    // tracks: b_field 128 + pt 4000→4096 + position 3 × 4096; vertices: 384 + 256.
    assert_eq!(sizes[..2], [128 + 4 * 4096, 384 + 256]);
    let offsets: Vec<_> = layout.blocks.iter().map(|b| b.offset).collect();
    assert_eq!(offsets, [0, sizes[0], sizes[0] + sizes[1]]);
    assert_eq!(layout.total_bytes, sizes.iter().sum::<usize>());
    assert!(layout.blocks.iter().all(|b| b.offset % 128 == 0));
    assert_eq!(layout.blocks[1].layout, Layout::new(&v, 40, 128).unwrap());
}

#[test]
fn a_layout_that_cannot_be_made_names_its_block() {
    let (t, v) = (tracks(), vertices());
    let err = |blocks: &[(&Schema, usize)], alignment| {
        BlocksLayout::new(blocks, alignment)
            .unwrap_err()
            .to_string()
    };
    assert!(err(&[], 128).contains("blocks"), "no blocks");
    // Alignment 4 suits tracks (float32) but not vertices' float64.
    let says = err(&[(&t, 10), (&v, 10)], 4);
    assert!(
        says.contains("block 1") && says.contains("alignment"),
        "{says}"
    );
    let says = err(&[(&t, 10), (&v, usize::MAX / 4)], 128);
    assert!(
        says.contains("block 1") && says.contains("overflow"),
        "{says}"
    );
    // Each block fits the address space; both together do not.
    let bytes = Schema::builder().column("b", DType::U8).build().unwrap();
    let half = isize::MAX as usize / 2 + 1024;
    let says = err(&[(&bytes, half), (&v, 1), (&bytes, half)], 128);
    assert!(
        says.contains("block 2") && says.contains("overflow"),
        "{says}"
    );
}

#[test]
fn each_block_is_a_table_where_the_layout_put_it_and_the_owner_hears_after_the_last() {
    let (t, v) = (tracks(), vertices());
    let blocks = [(&t, 100), (&v, 7)];
    let layout = BlocksLayout::new(&blocks, 128).unwrap();
    let mut program = Program::new(layout.total_bytes);
    let base = program.base();
    // SAFETY: the buffer outlives the tables (the test drops them before `program`).
    let mut tables = unsafe {
        SoaTable::wrap_blocks(
            &blocks,
            128,
            base,
            layout.total_bytes,
            Device::CPU,
            program.owner(),
        )
    }
    .unwrap();
    assert_eq!(tables.len(), 2);
    for (table, block) in tables.iter().zip(&layout.blocks) {
        assert_eq!(
            table.buffer().as_ptr() as usize,
            base as usize + block.offset
        );
        assert_eq!(table.buffer().len(), block.size());
    }
    assert_eq!(tables[1].len(), 7);
    tables[1].column_mut::<f64>("z").unwrap()[3] = 2.5;
    let z = &layout.blocks[1].layout.columns[0];
    let at = layout.blocks[1].offset + z.offset + 3 * 8;
    assert_eq!(
        program.words[at / 8],
        2.5f64.to_bits(),
        "written where the layout said"
    );

    let view = tables[0].column_view("position").unwrap();
    let vertices = tables.pop().unwrap();
    drop(tables);
    assert_eq!(
        program.releases(),
        0,
        "the vertices and a view still use the buffer"
    );
    drop(vertices);
    assert_eq!(program.releases(), 0, "a view of the tracks still uses it");
    drop(view);
    assert_eq!(program.releases(), 1);
}

#[test]
fn a_zero_row_block_takes_no_bytes_and_the_next_starts_where_it_would() {
    let (t, v) = (tracks(), vertices());
    let blocks = [(&v, 3), (&v, 0), (&t, 0), (&v, 5)];
    let layout = BlocksLayout::new(&blocks, 64).unwrap();
    let offsets: Vec<_> = layout.blocks.iter().map(|b| b.offset).collect();
    // Three rows of vertices: two columns of 64; no rows: nothing, but tracks keep b_field.
    assert_eq!(offsets, [0, 128, 128, 192]);
    let mut program = Program::new(layout.total_bytes);
    // SAFETY: as above.
    let tables = unsafe {
        SoaTable::wrap_blocks(
            &blocks,
            64,
            program.base(),
            layout.total_bytes,
            Device::CPU,
            program.owner(),
        )
    }
    .unwrap();
    let lens: Vec<_> = tables.iter().map(SoaTable::len).collect();
    assert_eq!(lens, [3, 0, 0, 5]);
    assert!(tables[1].column::<f64>("z").unwrap().is_empty());
    drop(tables);
    assert_eq!(program.releases(), 1);
}

#[test]
fn a_refused_buffer_names_its_block_and_is_released_once() {
    let (t, v) = (tracks(), vertices());
    let blocks = [(&t, 10), (&v, 10)];
    let layout = BlocksLayout::new(&blocks, 128).unwrap();
    let mut program = Program::new(layout.total_bytes + 8);
    let base = program.base();
    let total = layout.total_bytes;
    let first = layout.blocks[0].size();
    let cases: [(*mut u8, usize, usize, &str); 4] = [
        (base, total - 1, 128, "block 1"),
        (base, first - 1, 128, "block 0"),
        // Four bytes in: fine for tracks' float32, not for vertices' float64.
        (base.wrapping_add(4), total, 128, "block 1"),
        (std::ptr::null_mut(), total, 128, "NULL"),
    ];
    for (i, (data, bytes, alignment, says)) in cases.into_iter().enumerate() {
        // SAFETY: every pointer is inside the program's buffer or NULL; nothing is touched.
        let error = unsafe {
            SoaTable::wrap_blocks(
                &blocks,
                alignment,
                data,
                bytes,
                Device::CPU,
                program.owner(),
            )
        }
        .unwrap_err()
        .to_string();
        assert!(error.contains(says), "{says}: {error}");
        assert_eq!(program.releases(), i + 1, "{says}: released once, at once");
    }
    // A bad layout is refused after the owner was taken: released too.
    // SAFETY: as above.
    let error =
        unsafe { SoaTable::wrap_blocks(&blocks, 3, base, total, Device::CPU, program.owner()) }
            .unwrap_err()
            .to_string();
    assert!(error.contains("block 0"), "{error}");
    assert_eq!(program.releases(), 5);
    assert!(program.words.iter().all(|&w| w == 0), "nothing written");
}
