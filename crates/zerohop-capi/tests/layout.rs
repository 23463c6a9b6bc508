//! Sizing a buffer before it exists (`zh_schema_layout`, `zh_schema_column_layout`), then
//! wrapping it; and columns refused by the call that adds them. Driven as a C program would,
//! host memory only, so it runs under Miri.

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop_capi::*;

mod common;
use common::{c, last_error};

const NAMES: [&str; 5] = ["bfield", "pt", "position", "covariance", "id"];

/// bfield (float64 table scalar), pt (float32), position (float32 3-vector), covariance
/// (float32 3×3, column-major), id (int16).
fn schema() -> *mut zh_schema {
    let mut s = null_mut();
    let (f32_, f64_, i16_) = (c("float32"), c("float64"), c("int16"));
    // SAFETY: `s` is written by zh_schema_new; the strings are NUL-terminated.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        let name = |i: usize| c(NAMES[i]);
        let statuses = [
            zh_schema_add_scalar(s, name(0).as_ptr(), f64_.as_ptr()),
            zh_schema_add_column(s, name(1).as_ptr(), f32_.as_ptr()),
            zh_schema_add_vector(s, name(2).as_ptr(), f32_.as_ptr(), 3),
            zh_schema_add_matrix(
                s,
                name(3).as_ptr(),
                f32_.as_ptr(),
                3,
                3,
                zh_order::ZH_COLUMN_MAJOR as i32,
            ),
            zh_schema_add_column(s, name(4).as_ptr(), i16_.as_ptr()),
        ];
        assert!(
            statuses.iter().all(|&s| s == zh_status::ZH_OK),
            "{}",
            last_error()
        );
    }
    s
}

/// An allocation the "program" made (as `aligned_alloc` would), freed by the release
/// callback, which counts its calls.
struct Program {
    data: *mut u8,
    layout: Layout,
    releases: AtomicUsize,
}

unsafe extern "C" fn free_it(ctx: *mut c_void) {
    // SAFETY: every test passes a live Program as the context.
    let program = unsafe { &*(ctx as *const Program) };
    if program.releases.fetch_add(1, Ordering::SeqCst) == 0 {
        // SAFETY: allocated with this layout in `Program::new`, freed on the first call only
        // (a second call is a failure the test reports, not a double free).
        unsafe { dealloc(program.data, program.layout) };
    }
}

impl Program {
    fn new(bytes: usize, alignment: usize) -> Box<Self> {
        let layout = Layout::from_size_align(bytes, alignment).unwrap();
        // SAFETY: `bytes` > 0 in every test.
        let data = unsafe { alloc(layout) };
        assert!(!data.is_null());
        Box::new(Program {
            data,
            layout,
            releases: AtomicUsize::new(0),
        })
    }
    fn ctx(&self) -> *mut c_void {
        self as *const Program as *mut c_void
    }
    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

/// The fields of a column description, comparable.
fn fields(i: &zh_column_info) -> (usize, usize, i32, usize, i32, [i64; 3], [i64; 3], u8, u8) {
    (
        i.offset,
        i.pitch,
        i.kind,
        i.components,
        i.ndim,
        i.shape,
        i.strides,
        i.dtype_code,
        i.dtype_bits,
    )
}

/// The data pointer, shape and strides of a managed tensor; then its deleter runs.
///
/// # Safety
/// `m` must be a live managed tensor owned by the caller.
unsafe fn take(m: *mut DLManagedTensorVersioned) -> (usize, Vec<i64>, Vec<i64>) {
    // SAFETY: per the contract.
    unsafe {
        let t = &(*m).dl_tensor;
        let n = t.ndim as usize;
        let out = (
            t.data as usize + t.byte_offset as usize,
            std::slice::from_raw_parts(t.shape, n).to_vec(),
            std::slice::from_raw_parts(t.strides, n).to_vec(),
        );
        ((*m).deleter.unwrap())(m);
        out
    }
}

#[test]
fn a_buffer_sized_by_the_layout_is_wrapped_and_every_column_lands_where_it_said() {
    let s = schema();
    let rows = 100;
    for alignment in [0, 16, 64, 128, 4096] {
        let mut bytes = 0;
        // SAFETY: live schema, writable out-parameters, NUL-terminated names throughout.
        unsafe {
            assert_eq!(
                zh_schema_layout(s, rows, alignment, &mut bytes),
                zh_status::ZH_OK,
                "{}",
                last_error()
            );
            let align = if alignment == 0 { 128 } else { alignment };
            assert_eq!(bytes % align, 0, "aligned_alloc takes it as it is");
            let program = Program::new(bytes, align);
            let mut table = null_mut();
            assert_eq!(
                zh_table_wrap(
                    s,
                    rows,
                    alignment,
                    program.data.cast(),
                    bytes,
                    -1,
                    Some(free_it),
                    program.ctx(),
                    &mut table
                ),
                zh_status::ZH_OK,
                "alignment {alignment}: {}",
                last_error()
            );
            for (index, name) in NAMES.iter().enumerate() {
                let mut planned = MaybeUninit::uninit();
                assert_eq!(
                    zh_schema_column_layout(s, rows, alignment, index, planned.as_mut_ptr()),
                    zh_status::ZH_OK
                );
                let planned = planned.assume_init();
                let mut found = MaybeUninit::uninit();
                assert_eq!(
                    zh_table_column_info(table, c(name).as_ptr(), found.as_mut_ptr()),
                    zh_status::ZH_OK
                );
                assert_eq!(fields(&planned), fields(&found.assume_init()), "{name}");
                let mut m = null_mut();
                assert_eq!(
                    zh_table_column(table, c(name).as_ptr(), &mut m),
                    zh_status::ZH_OK
                );
                let (data, shape, strides) = take(m);
                let ndim = planned.ndim as usize;
                assert_eq!(
                    data,
                    program.data as usize + planned.offset,
                    "{name}: in place"
                );
                assert_eq!(
                    (&shape[..], &strides[..]),
                    (&planned.shape[..ndim], &planned.strides[..ndim])
                );
            }
            zh_table_free(table);
            assert_eq!(program.releases(), 1, "released once, when the table went");
        }
    }
    // SAFETY: freed once.
    unsafe { zh_schema_free(s) };
}

#[test]
fn the_layout_is_the_cms_rules_and_one_byte_less_is_refused_by_the_wrap() {
    let s = schema();
    let (mut bytes, mut info) = (0, MaybeUninit::uninit());
    // SAFETY: live schema and out-parameters.
    unsafe {
        assert_eq!(zh_schema_layout(s, 100, 0, &mut bytes), zh_status::ZH_OK);
        // bfield 128; pt 400 → 512; position 3 × 512; covariance 9 × 512; id 200 → 256.
        assert_eq!(bytes, 128 + 512 + 3 * 512 + 9 * 512 + 256);
        assert_eq!(
            zh_schema_column_layout(s, 100, 0, 3, info.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let info = info.assume_init();
        assert_eq!(
            (info.offset, info.pitch, info.kind, info.components),
            (128 + 512 + 3 * 512, 128, 3, 9)
        );
        assert_eq!((info.shape, info.strides), ([100, 3, 3], [1, 128, 384]));

        let program = Program::new(bytes, 128);
        let mut table = null_mut();
        let status = zh_table_wrap(
            s,
            100,
            0,
            program.data.cast(),
            bytes - 1,
            -1,
            Some(free_it),
            program.ctx(),
            &mut table,
        );
        assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
        assert!(
            last_error().contains(&bytes.to_string()),
            "{}",
            last_error()
        );
        assert!(table.is_null());
        assert_eq!(program.releases(), 1);
        zh_schema_free(s);
    }
}

#[test]
fn a_layout_refused_leaves_the_out_parameters_untouched() {
    let s = schema();
    let mut bytes = 7;
    let mut info = MaybeUninit::<zh_column_info>::zeroed();
    // SAFETY: `info` is zeroed, a valid zh_column_info; the handles are live or NULL.
    unsafe {
        (*info.as_mut_ptr()).offset = 12345;
        let cases = [
            (s.cast_const(), 100, 3, "power of two"),
            (s, 100, 4, "widest element (8 bytes)"),
            (s, 1 << 63, 0, "tensor dimension"),
            (s, 1 << 62, 0, "overflows"),
            (null(), 100, 0, "schema is NULL"),
        ];
        for (schema, rows, alignment, says) in cases {
            assert_eq!(
                zh_schema_layout(schema, rows, alignment, &mut bytes),
                zh_status::ZH_INVALID_ARGUMENT,
                "{says}"
            );
            assert!(last_error().contains(says), "{says}: {}", last_error());
            assert_eq!(
                zh_schema_column_layout(schema, rows, alignment, 0, info.as_mut_ptr()),
                zh_status::ZH_INVALID_ARGUMENT,
                "{says}"
            );
            assert!(last_error().contains(says), "{says}: {}", last_error());
        }
        assert_eq!(
            zh_schema_column_layout(s, 100, 0, 5, info.as_mut_ptr()),
            zh_status::ZH_NOT_FOUND
        );
        assert!(last_error().contains("index 5"), "{}", last_error());
        assert_eq!(
            zh_schema_column_layout(s, 100, 0, usize::MAX, info.as_mut_ptr()),
            zh_status::ZH_NOT_FOUND
        );
        assert_eq!((bytes, info.assume_init().offset), (7, 12345));
        assert_eq!(
            zh_schema_layout(s, 100, 0, null_mut()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        zh_schema_free(s);
    }
}

#[test]
fn a_name_used_twice_is_refused_when_added_and_the_schema_stays_as_it_was() {
    let s = schema();
    let f32_ = c("float32");
    // SAFETY: live schema, NUL-terminated strings.
    unsafe {
        let pt = c("pt");
        let again = [
            zh_schema_add_column(s, pt.as_ptr(), f32_.as_ptr()),
            zh_schema_add_scalar(s, pt.as_ptr(), f32_.as_ptr()),
            zh_schema_add_vector(s, c("position").as_ptr(), f32_.as_ptr(), 2),
            zh_schema_add_matrix(s, c("id").as_ptr(), f32_.as_ptr(), 2, 2, 0),
        ];
        for (status, name) in again.into_iter().zip(["pt", "pt", "position", "id"]) {
            assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT, "{name}");
        }
        assert!(
            last_error().contains("\"id\"") && last_error().contains("used twice"),
            "{}",
            last_error()
        );
        assert_eq!(zh_schema_len(s), NAMES.len());
        let mut bytes = 0;
        assert_eq!(zh_schema_layout(s, 100, 0, &mut bytes), zh_status::ZH_OK);
        assert_eq!(
            bytes,
            128 + 512 + 3 * 512 + 9 * 512 + 256,
            "nothing was added"
        );
        assert_eq!(
            zh_schema_add_column(s, c("").as_ptr(), f32_.as_ptr()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("empty name"), "{}", last_error());
        assert_eq!(
            zh_schema_add_column(s, c("eta").as_ptr(), f32_.as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(zh_schema_len(s), NAMES.len() + 1);
        zh_schema_free(s);
    }
}
