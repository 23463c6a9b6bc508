//! A batch loop over a table (`zh_table_batch_count`, `zh_table_batch`): every row once, the
//! last batch short, spans exact whatever the sizes, no overflow at the edge of `size_t`.
//! Host memory only: runs under Miri.

use std::mem::MaybeUninit;
use std::ptr::{null, null_mut, NonNull};

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop_capi::*;

mod common;
use common::{c, last_error};

const ROWS: usize = 1000;

/// A table of ROWS rows: x (float32) holding its row number, v (float32 3-vector) holding
/// 10 × row + component.
fn table() -> *mut zh_table {
    let (mut s, mut t, mut m) = (null_mut(), null_mut(), null_mut());
    // SAFETY: live handles, NUL-terminated strings; the tensors written are the table's
    // own columns, of the shapes written here.
    unsafe {
        zh_schema_new(&mut s);
        zh_schema_add_column(s, c("x").as_ptr(), c("float32").as_ptr());
        zh_schema_add_vector(s, c("v").as_ptr(), c("float32").as_ptr(), 3);
        assert_eq!(zh_table_new(s, ROWS, 0, null(), &mut t), zh_status::ZH_OK);
        zh_schema_free(s);
        zh_table_column(t, c("x").as_ptr(), &mut m);
        let x = (*m).dl_tensor.data.cast::<f32>();
        for row in 0..ROWS {
            *x.add(row) = row as f32;
        }
        ((*m).deleter.unwrap())(m);
        zh_table_column(t, c("v").as_ptr(), &mut m);
        let v = (*m).dl_tensor.data.cast::<f32>();
        let pitch = *(*m).dl_tensor.strides.add(1) as usize;
        for row in 0..ROWS {
            for k in 0..3 {
                *v.add(k * pitch + row) = (10 * row + k) as f32;
            }
        }
        ((*m).deleter.unwrap())(m);
    }
    t
}

fn info(t: *const zh_table, name: &str) -> zh_column_info {
    let mut out = MaybeUninit::uninit();
    // SAFETY: live table, writable out-parameter.
    unsafe {
        assert_eq!(
            zh_table_column_info(t, c(name).as_ptr(), out.as_mut_ptr()),
            zh_status::ZH_OK
        );
        out.assume_init()
    }
}

fn rows_of(t: *const zh_table) -> usize {
    let mut out = MaybeUninit::uninit();
    // SAFETY: live table, writable out-parameter.
    unsafe {
        assert_eq!(zh_table_get_info(t, out.as_mut_ptr()), zh_status::ZH_OK);
        out.assume_init().rows
    }
}

#[test]
fn every_batch_size_covers_every_row_once_and_only_the_last_batch_is_short() {
    let t = table();
    for batch in [1, 7, 999, 1000, 1001] {
        let mut count = 0;
        // SAFETY: live table; every batch handle is freed once.
        unsafe {
            assert_eq!(zh_table_batch_count(t, batch, &mut count), zh_status::ZH_OK);
            assert_eq!(count, ROWS.div_ceil(batch), "batch {batch}");
            let mut next = 0;
            for index in 0..count {
                let mut b = null_mut();
                assert_eq!(zh_table_batch(t, batch, index, &mut b), zh_status::ZH_OK);
                let len = rows_of(b);
                let expected = if index + 1 == count {
                    ROWS - index * batch
                } else {
                    batch
                };
                assert_eq!(len, expected, "batch {batch}, index {index}");
                // Where x starts says which row the batch begins at.
                assert_eq!(
                    info(b, "x").offset,
                    4 * next,
                    "batch {batch}, index {index}"
                );
                next += len;
                zh_table_free(b);
            }
            assert_eq!(next, ROWS, "batch {batch}: every row once");
            let mut b = null_mut();
            assert_eq!(
                zh_table_batch(t, batch, count, &mut b),
                zh_status::ZH_INVALID_ARGUMENT
            );
            assert!(
                last_error().contains("past the last batch"),
                "{}",
                last_error()
            );
            assert!(b.is_null());
        }
    }
    // SAFETY: freed once.
    unsafe { zh_table_free(t) };
}

/// The data pointer, shape and strides of a managed tensor; then its deleter runs.
///
/// # Safety
/// `m` must be a live managed tensor owned by the caller.
unsafe fn take(m: *mut DLManagedTensorVersioned) -> (*const f32, Vec<i64>, Vec<i64>) {
    // SAFETY: per the contract.
    unsafe {
        let t = &(*m).dl_tensor;
        let n = t.ndim as usize;
        let out = (
            t.data
                .cast::<u8>()
                .add(t.byte_offset as usize)
                .cast::<f32>()
                .cast_const(),
            std::slice::from_raw_parts(t.shape, n).to_vec(),
            std::slice::from_raw_parts(t.strides, n).to_vec(),
        );
        ((*m).deleter.unwrap())(m);
        out
    }
}

#[test]
fn the_last_short_batch_maps_exactly_its_rows_from_an_unaligned_start() {
    let t = table();
    let (whole_x, whole_v) = (info(t, "x"), info(t, "v"));
    let (mut b, mut tensors, mut m, mut table_info) =
        (null_mut(), null_mut(), null_mut(), MaybeUninit::uninit());
    // SAFETY: live handles; the tensors read lie inside the table's buffer.
    unsafe {
        zh_table_get_info(t, table_info.as_mut_ptr());
        let base = table_info.assume_init().data as usize;
        // 1000 = 142 × 7 + 6: batch 142 is rows 994..1000.
        assert_eq!(zh_table_batch(t, 7, 142, &mut b), zh_status::ZH_OK);
        assert_eq!(rows_of(b), 6);
        zh_table_get_info(b, table_info.as_mut_ptr());
        assert_eq!(
            table_info.assume_init().alignment,
            8,
            "row 994 of float32 starts 3976 bytes in: aligned to 8, not 128"
        );
        assert_eq!(
            zh_table_map(b, c("x; v").as_ptr(), 0, &mut tensors),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        assert_eq!(zh_tensors_export(tensors, 0, &mut m), zh_status::ZH_OK);
        let (x, shape, _) = take(m);
        assert_eq!(
            x as usize,
            base + whole_x.offset + 4 * 994,
            "a view, not a copy"
        );
        assert_eq!(shape[0], 6);
        let xs: Vec<f32> = (0..6).map(|i| *x.add(i)).collect();
        assert_eq!(xs, [994., 995., 996., 997., 998., 999.]);

        assert_eq!(zh_tensors_export(tensors, 1, &mut m), zh_status::ZH_OK);
        let (v, shape, strides) = take(m);
        assert_eq!(v as usize, base + whole_v.offset + 4 * 994);
        assert_eq!((shape, &strides[..]), (vec![6, 3], &whole_v.strides[..2]));
        let pitch = whole_v.pitch;
        for row in 0..6 {
            for k in 0..3 {
                assert_eq!(*v.add(k * pitch + row), (10 * (994 + row) + k) as f32);
            }
        }
        zh_tensors_free(tensors);
        zh_table_free(b);
        zh_table_free(t);
    }
}

#[test]
fn sizes_at_the_edge_of_size_t_are_answered_without_overflow() {
    let t = table();
    let untouched = NonNull::<zh_table>::dangling().as_ptr();
    let max = usize::MAX;
    // SAFETY: live table; `untouched` is never dereferenced, only compared.
    unsafe {
        let mut count = 7;
        assert_eq!(zh_table_batch_count(t, max, &mut count), zh_status::ZH_OK);
        assert_eq!(count, 1);
        let mut b = null_mut();
        assert_eq!(zh_table_batch(t, max, 0, &mut b), zh_status::ZH_OK);
        assert_eq!(rows_of(b), ROWS, "one batch of everything");
        zh_table_free(b);
        // 1 × MAX is past the end; 2 × MAX and 7 × MAX overflow: all refused alike.
        for (batch_rows, index) in [(max, 1), (max, 2), (7, max), (1, max), (max, max)] {
            let mut b = untouched;
            assert_eq!(
                zh_table_batch(t, batch_rows, index, &mut b),
                zh_status::ZH_INVALID_ARGUMENT,
                "{batch_rows} × {index}"
            );
            assert!(
                last_error().contains("past the last batch"),
                "{}",
                last_error()
            );
            assert_eq!(b, untouched, "*out untouched");
        }
        let mut count = 7;
        assert_eq!(
            zh_table_batch_count(t, 0, &mut count),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("batch size"), "{}", last_error());
        assert_eq!(count, 7);
        let mut b = untouched;
        assert_eq!(
            zh_table_batch(t, 0, 0, &mut b),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(b, untouched);
        assert_eq!(
            zh_table_batch_count(null(), 7, &mut count),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_table_batch_count(t, 7, null_mut()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_table_batch(t, 7, 0, null_mut()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        // A batch of a batch: spans within the batch, not the table.
        let mut outer = null_mut();
        zh_table_batch(t, 100, 9, &mut outer); // rows 900..1000
        let mut inner = null_mut();
        assert_eq!(zh_table_batch(outer, 30, 3, &mut inner), zh_status::ZH_OK);
        assert_eq!(rows_of(inner), 10); // rows 990..1000
        assert_eq!(info(inner, "x").offset, 4 * 990);
        zh_table_free(inner);
        zh_table_free(outer);
        zh_table_free(t);
    }
}
