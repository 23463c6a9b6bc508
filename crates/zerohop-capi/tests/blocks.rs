//! Several layouts in one buffer the C program allocated (`zh_blocks_layout`,
//! `zh_blocks_wrap`): each block's columns where the layout said, the buffer given back once
//! after the last table over any block, refusals naming the block. Host memory only, so it
//! runs under Miri.

use std::ffi::c_void;
use std::ptr::{null, null_mut, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// tracks: b_field (float32 table scalar), pt (float32), position (float32 3-vector).
fn tracks() -> *mut zh_schema {
    let mut s = null_mut();
    // SAFETY: `s` is written by zh_schema_new; the strings are NUL-terminated.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        let f32 = c("float32");
        assert_eq!(
            zh_schema_add_scalar(s, c("b_field").as_ptr(), f32.as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_column(s, c("pt").as_ptr(), f32.as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_vector(s, c("position").as_ptr(), f32.as_ptr(), 3),
            zh_status::ZH_OK
        );
    }
    s
}

/// vertices: z (float64), ntracks (int32).
fn vertices() -> *mut zh_schema {
    let mut s = null_mut();
    // SAFETY: as above.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        assert_eq!(
            zh_schema_add_column(s, c("z").as_ptr(), c("float64").as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_column(s, c("ntracks").as_ptr(), c("int32").as_ptr()),
            zh_status::ZH_OK
        );
    }
    s
}

/// The buffer the "program" allocated (u64 words: 8-byte aligned) and its releases.
struct Program {
    words: Vec<u64>,
    releases: AtomicUsize,
}

unsafe extern "C" fn give_back(ctx: *mut c_void) {
    // SAFETY: every test passes a live Program as the context.
    unsafe { &*(ctx as *const Program) }
        .releases
        .fetch_add(1, Ordering::SeqCst);
}

impl Program {
    fn new(bytes: usize) -> Box<Self> {
        Box::new(Program {
            words: vec![0; bytes.div_ceil(8) + 1],
            releases: AtomicUsize::new(0),
        })
    }
    fn base(&mut self) -> *mut c_void {
        self.words.as_mut_ptr().cast()
    }
    fn ctx(&self) -> *mut c_void {
        self as *const Program as *mut c_void
    }
    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

/// The blocks' schemas and rows, and what `zh_blocks_layout` says of them.
struct Blocks {
    schemas: Vec<*const zh_schema>,
    rows: Vec<usize>,
}

impl Blocks {
    fn new(blocks: &[(*mut zh_schema, usize)]) -> Self {
        Blocks {
            schemas: blocks.iter().map(|&(s, _)| s.cast_const()).collect(),
            rows: blocks.iter().map(|&(_, r)| r).collect(),
        }
    }
    fn layout(&self, alignment: usize) -> (Vec<usize>, usize) {
        let mut offsets = vec![usize::MAX; self.rows.len()];
        let mut total = 0;
        // SAFETY: n schemas and rows; n writable offsets.
        let status = unsafe {
            zh_blocks_layout(
                self.schemas.as_ptr(),
                self.rows.as_ptr(),
                self.rows.len(),
                alignment,
                offsets.as_mut_ptr(),
                &mut total,
            )
        };
        assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
        (offsets, total)
    }
    /// `zh_blocks_wrap` over `bytes` bytes at `data`: its status and the n table slots,
    /// filled with a sentinel beforehand so a refusal can be seen not to write them.
    fn wrap(
        &self,
        alignment: usize,
        data: *mut c_void,
        bytes: usize,
        program: &Program,
    ) -> (zh_status, Vec<*mut zh_table>) {
        let mut tables = vec![sentinel(); self.rows.len().max(1)];
        // SAFETY: n schemas and rows; the program's buffer outlives its release callback.
        let status = unsafe {
            zh_blocks_wrap(
                self.schemas.as_ptr(),
                self.rows.as_ptr(),
                self.rows.len(),
                alignment,
                data,
                bytes,
                -1,
                Some(give_back),
                program.ctx(),
                tables.as_mut_ptr(),
            )
        };
        (status, tables)
    }
}

fn sentinel() -> *mut zh_table {
    NonNull::<zh_table>::dangling().as_ptr()
}

fn free(schemas: &[*mut zh_schema]) {
    for &s in schemas {
        // SAFETY: each came from zh_schema_new, freed once.
        unsafe { zh_schema_free(s) };
    }
}

/// Where table `t`'s column `name` starts, as the table itself says.
fn column_address(t: *const zh_table, name: &str) -> usize {
    let (mut info, mut col) = (
        std::mem::MaybeUninit::uninit(),
        std::mem::MaybeUninit::uninit(),
    );
    // SAFETY: `t` is live; the out-parameters are written on success, checked here.
    unsafe {
        assert_eq!(zh_table_get_info(t, info.as_mut_ptr()), zh_status::ZH_OK);
        let name = c(name);
        assert_eq!(
            zh_table_column_info(t, name.as_ptr(), col.as_mut_ptr()),
            zh_status::ZH_OK
        );
        info.assume_init().data as usize + col.assume_init().offset
    }
}

#[test]
fn each_blocks_columns_lie_where_the_layout_said_and_map_as_any_table() {
    let (t, v) = (tracks(), vertices());
    let blocks = Blocks::new(&[(t, 100), (v, 7), (t, 30)]);
    let (offsets, total) = blocks.layout(0);
    // tracks at 128: b_field 128, pt 512, position 3 × 512; vertices: 128 + 128.
    assert_eq!(offsets, [0, 2176, 2432]);
    assert_eq!(total, 2432 + 128 + 4 * 128);
    let mut program = Program::new(total);
    let base = program.base() as usize;
    // Block 1, z[3] = 2.5, written by the program by the layout rules.
    program.words[2176 / 8 + 3] = 2.5f64.to_bits();
    let (status, tables) = blocks.wrap(0, program.base(), total, &program);
    assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
    assert_eq!(column_address(tables[0], "pt"), base + 128);
    assert_eq!(column_address(tables[1], "z"), base + 2176);
    assert_eq!(column_address(tables[1], "ntracks"), base + 2176 + 128);
    assert_eq!(
        column_address(tables[2], "position"),
        base + 2432 + 128 + 128
    );

    let (mut tensors, mut view) = (null_mut(), std::mem::MaybeUninit::uninit());
    // SAFETY: live handles; the view is read while `tensors` lives.
    unsafe {
        let spec = c("vertex: z");
        assert_eq!(
            zh_table_map(tables[1], spec.as_ptr(), 0, &mut tensors),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        assert_eq!(
            zh_tensors_view(tensors, 0, view.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let view = view.assume_init();
        assert_eq!(
            view.data as usize,
            base + 2176,
            "a view of block 1, no copy"
        );
        assert_eq!(*view.shape, 7);
        assert_eq!(*view.data.cast::<f64>().add(3), 2.5);
        zh_tensors_free(tensors);
        for table in tables {
            zh_table_free(table);
        }
    }
    assert_eq!(program.releases(), 1);
    free(&[t, v]);
}

#[test]
fn the_buffer_goes_back_once_after_the_last_table_whatever_the_order() {
    let (t, v) = (tracks(), vertices());
    let blocks = Blocks::new(&[(t, 5), (v, 5), (t, 2)]);
    let (_, total) = blocks.layout(64);
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let mut program = Program::new(total);
        let (status, tables) = blocks.wrap(64, program.base(), total, &program);
        assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
        for (freed, &k) in order.iter().enumerate() {
            assert_eq!(program.releases(), 0, "{order:?}: {freed} freed");
            // SAFETY: each table freed once.
            unsafe { zh_table_free(tables[k]) };
        }
        assert_eq!(program.releases(), 1, "{order:?}");
    }

    // A tensor of one block keeps the whole buffer, after every table handle is gone.
    let mut program = Program::new(total);
    let (_, tables) = blocks.wrap(64, program.base(), total, &program);
    let mut managed = null_mut();
    // SAFETY: live handles; the tensor's deleter runs once.
    unsafe {
        let name = c("ntracks");
        assert_eq!(
            zh_table_column(tables[1], name.as_ptr(), &mut managed),
            zh_status::ZH_OK
        );
        for table in tables {
            zh_table_free(table);
        }
        assert_eq!(
            program.releases(),
            0,
            "a tensor of block 1 still uses the buffer"
        );
        ((*managed).deleter.unwrap())(managed);
    }
    assert_eq!(program.releases(), 1);
    free(&[t, v]);
}

#[test]
fn a_buffer_too_small_or_misaligned_is_refused_naming_the_block_and_released_once() {
    let (t, v) = (tracks(), vertices());
    let blocks = Blocks::new(&[(t, 10), (v, 10)]);
    let (offsets, total) = blocks.layout(0);
    let mut program = Program::new(total);
    let base = program.base();
    let cases = [
        (base, total - 1, "block 1"),
        (base, offsets[1] - 1, "block 0"),
        // Four bytes in: fine for the tracks' float32, not for the vertices' float64.
        (base.wrapping_byte_add(4), total, "block 1"),
        (null_mut(), total, "NULL"),
    ];
    for (i, (data, bytes, says)) in cases.into_iter().enumerate() {
        let (status, tables) = blocks.wrap(0, data, bytes, &program);
        assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT, "{says}");
        assert!(last_error().contains(says), "{says}: {}", last_error());
        assert!(
            tables.iter().all(|&p| p == sentinel()),
            "{says}: tables untouched"
        );
        assert_eq!(program.releases(), i + 1, "{says}: released once, at once");
    }
    assert!(program.words.iter().all(|&w| w == 0), "nothing written");
    free(&[t, v]);
}

#[test]
fn zero_row_blocks_take_only_their_table_scalars() {
    let (t, v) = (tracks(), vertices());
    let blocks = Blocks::new(&[(v, 0), (t, 0), (v, 3)]);
    let (offsets, total) = blocks.layout(64);
    // No rows: vertices take nothing; tracks keep b_field's 64 bytes.
    assert_eq!(offsets, [0, 0, 64]);
    assert_eq!(total, 64 + 2 * 64);
    let mut program = Program::new(total);
    let base = program.base() as usize;
    let (status, tables) = blocks.wrap(64, program.base(), total, &program);
    assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
    assert_eq!(column_address(tables[1], "b_field"), base);
    assert_eq!(column_address(tables[2], "z"), base + 64);
    let mut info = std::mem::MaybeUninit::uninit();
    // SAFETY: live handles, each freed once.
    unsafe {
        assert_eq!(
            zh_table_get_info(tables[0], info.as_mut_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!((info.assume_init().rows, info.assume_init().nbytes), (0, 0));
        for table in tables {
            zh_table_free(table);
        }
    }
    assert_eq!(program.releases(), 1);
    free(&[t, v]);
}

#[test]
fn sizes_that_overflow_are_refused_naming_the_block() {
    let (t, v) = (tracks(), vertices());
    let huge = Blocks::new(&[(t, 10), (v, usize::MAX / 4)]);
    let (mut offsets, mut total) = ([7usize; 2], 7usize);
    // SAFETY: two schemas, rows and offsets.
    let status = unsafe {
        zh_blocks_layout(
            huge.schemas.as_ptr(),
            huge.rows.as_ptr(),
            2,
            0,
            offsets.as_mut_ptr(),
            &mut total,
        )
    };
    assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
    assert!(last_error().contains("block 1"), "{}", last_error());
    assert_eq!((offsets, total), ([7; 2], 7), "out-parameters untouched");

    // Each block fits the address space; together they do not.
    // A tracks block is four columns of 4-byte values: 16 bytes a row, just over 2^62 here.
    let half = isize::MAX as usize / 32 + 64;
    let together = Blocks::new(&[(v, 1), (t, half), (t, half)]);
    let mut program = Program::new(8);
    let (status, tables) = together.wrap(0, program.base(), 64, &program);
    assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
    assert!(
        last_error().contains("block 2") && last_error().contains("overflow"),
        "{}",
        last_error()
    );
    assert!(tables.iter().all(|&p| p == sentinel()));
    assert_eq!(program.releases(), 1);
    free(&[t, v]);
}

#[test]
fn bad_arguments_are_refused_and_the_memory_released_once() {
    let (t, v) = (tracks(), vertices());
    let mut program = Program::new(1024);
    let data = program.base();
    let (schemas, rows) = ([t.cast_const(), null()], [4usize, 4]);
    let mut tables = [sentinel(); 2];
    let call = |n, release: zh_release_fn, device, tables: *mut *mut zh_table| {
        // SAFETY: `n` ≤ 2 schemas and rows; the buffer outlives the callback.
        unsafe {
            zh_blocks_wrap(
                schemas.as_ptr(),
                rows.as_ptr(),
                n,
                0,
                data,
                1024,
                device,
                release,
                program.ctx(),
                tables,
            )
        }
    };
    let cases: [(usize, zh_release_fn, i32, bool, &str); 5] = [
        (0, Some(give_back), -1, true, "n is 0"),
        (2, Some(give_back), -1, true, "schemas[1] is NULL"),
        (1, Some(give_back), -2, true, "device"),
        (1, Some(give_back), -1, false, "tables"),
        (1, None, -1, true, "release is NULL"),
    ];
    for (i, (n, release, device, out, says)) in cases.into_iter().enumerate() {
        let out = if out { tables.as_mut_ptr() } else { null_mut() };
        assert_eq!(
            call(n, release, device, out),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains(says), "{says}: {}", last_error());
        assert_eq!(program.releases(), (i + 1).min(4), "{says}: released once");
    }
    assert_eq!(tables, [sentinel(); 2], "tables untouched");
    // SAFETY: a NULL total_bytes is refused before anything is read.
    let status = unsafe {
        zh_blocks_layout(
            schemas.as_ptr(),
            rows.as_ptr(),
            1,
            0,
            null_mut(),
            null_mut(),
        )
    };
    assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
    free(&[t, v]);
}
