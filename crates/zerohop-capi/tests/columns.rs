//! Tables of adopted columns (`zh_table_from_columns`): a model's separate output tensors
//! become a table without a copy, map and slice by pointer, and every tensor handed over is
//! released exactly once, on success and on every error. Host memory only: runs under Miri.

use std::ffi::c_char;
use std::ptr::{null, null_mut, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use zerohop::dlpack::ffi::DLManagedTensorVersioned;
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::{DType, Device, TensorView};
use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// A producer's array of f32 that counts its own release.
struct Array {
    values: Vec<f32>,
    released: Arc<AtomicUsize>,
}

impl Drop for Array {
    fn drop(&mut self) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
}

/// A managed tensor of `shape` over a fresh array (values 0, 1, …), its data pointer, and the
/// counter its release increments.
fn tensor(shape: &[i64]) -> (*mut DLManagedTensorVersioned, usize, Arc<AtomicUsize>) {
    let released = Arc::new(AtomicUsize::new(0));
    let n = shape.iter().product::<i64>() as usize;
    let mut array = Array {
        values: (0..n).map(|i| i as f32).collect(),
        released: released.clone(),
    };
    let data = array.values.as_mut_ptr().cast::<u8>();
    let mut strides = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    // SAFETY: `data` holds `n` f32 that the array (the owner) keeps alive; the shape and
    // strides describe exactly them.
    let view = unsafe {
        TensorView::from_raw_parts(
            data,
            DType::F32,
            shape.to_vec(),
            strides,
            Device::CPU,
            Arc::new(array),
            false,
        )
    }
    .unwrap();
    let managed = export_versioned(&view, ExportOptions::default()).unwrap();
    (managed.as_ptr(), data as usize, released)
}

/// Data pointer and shape of a managed tensor; then its deleter runs.
///
/// # Safety
/// `m` must be a live managed tensor owned by the caller.
unsafe fn take(m: *mut DLManagedTensorVersioned) -> (usize, Vec<i64>) {
    // SAFETY: per the contract.
    unsafe {
        let t = &(*m).dl_tensor;
        let out = (
            t.data as usize,
            std::slice::from_raw_parts(t.shape, t.ndim as usize).to_vec(),
        );
        ((*m).deleter.unwrap())(m);
        out
    }
}

#[test]
fn separate_outputs_become_a_table_and_map_without_a_copy() {
    let (score, score_at, score_released) = tensor(&[5]);
    let (boxes, boxes_at, boxes_released) = tensor(&[5, 4]);
    let names = [c("score"), c("box")];
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let (mut table, mut rows, mut tensors, mut m) =
        (null_mut(), null_mut(), null_mut(), null_mut());
    let mut info = std::mem::MaybeUninit::<zh_table_info>::uninit();
    // SAFETY: live handles and tensors whose ownership passes to the table.
    unsafe {
        let given = [score, boxes];
        assert_eq!(
            zh_table_from_columns(name_ptrs.as_ptr(), given.as_ptr(), 2, &mut table),
            zh_status::ZH_OK,
            "{}",
            last_error()
        );
        assert_eq!(
            zh_table_get_info(table, info.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let info = info.assume_init();
        assert_eq!((info.rows, info.columns, info.nbytes), (5, 2, 4 * (5 + 20)));
        assert!(info.data.is_null() && info.device_type == 1);

        assert_eq!(
            zh_table_map(table, c("b: box; score").as_ptr(), 0, &mut tensors),
            zh_status::ZH_OK
        );
        assert_eq!(zh_tensors_len(tensors), 2);
        assert_eq!(zh_tensors_export(tensors, 0, &mut m), zh_status::ZH_OK);
        assert_eq!(take(m), (boxes_at, vec![5, 4]));
        assert_eq!(zh_tensors_export(tensors, 1, &mut m), zh_status::ZH_OK);
        // A plain column maps as (n, 1), as over an SoA table (was (n,) before issue #40).
        assert_eq!(take(m), (score_at, vec![5, 1]));
        zh_tensors_free(tensors);

        assert_eq!(zh_table_rows(table, 1, 4, &mut rows), zh_status::ZH_OK);
        assert_eq!(
            zh_table_column(rows, c("box").as_ptr(), &mut m),
            zh_status::ZH_OK
        );
        zh_table_free(table);
        zh_table_free(rows);
        // The exported column still holds its producer's memory: row 1 of the boxes.
        assert_eq!(boxes_released.load(Ordering::SeqCst), 0);
        assert_eq!(take(m), (boxes_at + 4 * 4, vec![3, 4]));
    }
    assert_eq!(score_released.load(Ordering::SeqCst), 1);
    assert_eq!(boxes_released.load(Ordering::SeqCst), 1);
}

#[test]
fn one_buffer_calls_are_unsupported_and_groups_across_allocations_invalid() {
    let (a, _, _) = tensor(&[3]);
    let (b, _, _) = tensor(&[3]);
    let names = [c("a"), c("b")];
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let (mut table, mut tensors, mut m) = (null_mut(), null_mut(), null_mut());
    let mut info = std::mem::MaybeUninit::<zh_column_info>::uninit();
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            zh_table_from_columns(name_ptrs.as_ptr(), [a, b].as_ptr(), 2, &mut table),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_table_map(table, c("ab: a, b").as_ptr(), 0, &mut tensors),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("separate allocations"),
            "{}",
            last_error()
        );
        assert_eq!(zh_table_export(table, &mut m), zh_status::ZH_UNSUPPORTED);
        assert!(
            last_error().contains("zh_table_export needs an SoA table"),
            "{}",
            last_error()
        );
        assert_eq!(
            zh_table_column_info(table, c("a").as_ptr(), info.as_mut_ptr()),
            zh_status::ZH_UNSUPPORTED
        );
        assert_eq!(
            zh_table_column(table, c("zz").as_ptr(), &mut m),
            zh_status::ZH_NOT_FOUND
        );
        zh_table_free(table);
    }
}

#[test]
fn every_tensor_is_released_once_whatever_is_wrong() {
    // (names, shapes, whether the second tensor is passed as NULL, what the error says)
    type Case<'a> = (&'a [&'a str], &'a [&'a [i64]], bool, &'a str);
    let cases: [Case; 4] = [
        (&["a", "a"], &[&[3], &[3]], false, "given twice"),
        (&["a", "b"], &[&[3], &[4]], false, "has shape [4]"),
        (&["a", "b"], &[&[3], &[3]], true, "column tensor 1 is NULL"),
        (&["a", ""], &[&[3], &[3]], false, "empty name"),
    ];
    for (names, shapes, null_second, says) in cases {
        let made: Vec<_> = shapes.iter().map(|s| tensor(s)).collect();
        let mut given: Vec<*mut DLManagedTensorVersioned> = made.iter().map(|t| t.0).collect();
        let dropped = null_second.then(|| given[1]);
        if null_second {
            given[1] = null_mut();
        }
        let names: Vec<_> = names.iter().map(|n| c(n)).collect();
        let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut table = null_mut();
        // SAFETY: tensors whose ownership passes here; the one left out is released below.
        unsafe {
            assert_eq!(
                zh_table_from_columns(name_ptrs.as_ptr(), given.as_ptr(), given.len(), &mut table),
                zh_status::ZH_INVALID_ARGUMENT
            );
            assert!(table.is_null());
            if let Some(m) = dropped.and_then(NonNull::new) {
                take(m.as_ptr());
            }
        }
        assert!(last_error().contains(says), "{says}: {}", last_error());
        for (_, _, released) in &made {
            assert_eq!(released.load(Ordering::SeqCst), 1, "{says}");
        }
    }
    let (a, _, released) = tensor(&[2]);
    let mut table = null_mut();
    // SAFETY: NULL names with one live tensor: refused, the tensor released.
    unsafe {
        assert_eq!(
            zh_table_from_columns(null(), [a].as_ptr(), 1, &mut table),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_table_from_columns(null(), null(), 0, &mut table),
            zh_status::ZH_INVALID_ARGUMENT
        );
    }
    assert_eq!(released.load(Ordering::SeqCst), 1);
}

#[test]
fn one_tensor_given_twice_is_refused_and_released_once() {
    let (a, _, a_released) = tensor(&[3]);
    let (b, _, b_released) = tensor(&[3]);
    let names = [c("x"), c("y"), c("z"), c("w")];
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let untouched = NonNull::<zh_table>::dangling().as_ptr();
    let mut table = untouched;
    // SAFETY: two live tensors, `a` given at 0, 2 and 3: ownership of each passes once.
    unsafe {
        assert_eq!(
            zh_table_from_columns(name_ptrs.as_ptr(), [a, b, a, a].as_ptr(), 4, &mut table),
            zh_status::ZH_INVALID_ARGUMENT
        );
    }
    assert!(
        last_error().contains("column tensors 0 and 2 are the same managed tensor"),
        "{}",
        last_error()
    );
    assert_eq!(table, untouched, "*out untouched");
    assert_eq!(
        a_released.load(Ordering::SeqCst),
        1,
        "the repeated one: once"
    );
    assert_eq!(
        b_released.load(Ordering::SeqCst),
        1,
        "the others: once, as on any error"
    );
}

#[test]
fn a_spec_gives_the_same_shapes_over_adopted_columns_and_an_soa_table() {
    let (score, _, _) = tensor(&[5]);
    let (boxes, _, _) = tensor(&[5, 4]);
    let names = [c("score"), c("box")];
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let (mut adopted, mut soa, mut schema) = (null_mut(), null_mut(), null_mut());
    let shapes = |table: *const zh_table| -> Vec<Vec<i64>> {
        let mut tensors = null_mut();
        let mut view = std::mem::MaybeUninit::<zh_tensor_view>::uninit();
        // SAFETY: a live table; the view's shape is read while `tensors` lives.
        unsafe {
            let spec = c("score; b: box; s: score");
            assert_eq!(
                zh_table_map(table, spec.as_ptr(), 0, &mut tensors),
                zh_status::ZH_OK,
                "{}",
                last_error()
            );
            let got = (0..zh_tensors_len(tensors))
                .map(|i| {
                    assert_eq!(
                        zh_tensors_view(tensors, i, view.as_mut_ptr()),
                        zh_status::ZH_OK
                    );
                    let v = view.assume_init();
                    std::slice::from_raw_parts(v.shape, v.ndim as usize).to_vec()
                })
                .collect();
            zh_tensors_free(tensors);
            got
        }
    };
    // SAFETY: tensors whose ownership passes to the table; a schema built and freed here.
    unsafe {
        assert_eq!(
            zh_table_from_columns(name_ptrs.as_ptr(), [score, boxes].as_ptr(), 2, &mut adopted),
            zh_status::ZH_OK
        );
        assert_eq!(zh_schema_new(&mut schema), zh_status::ZH_OK);
        let f32 = c("float32");
        assert_eq!(
            zh_schema_add_column(schema, names[0].as_ptr(), f32.as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_vector(schema, names[1].as_ptr(), f32.as_ptr(), 4),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_table_new(schema, 5, 0, null(), &mut soa),
            zh_status::ZH_OK
        );
        zh_schema_free(schema);
    }
    let want = vec![vec![5, 1], vec![5, 4], vec![5, 1]];
    assert_eq!(shapes(soa), want, "SoA");
    assert_eq!(shapes(adopted), want, "adopted columns");
    // SAFETY: live handles, freed once.
    unsafe {
        zh_table_free(adopted);
        zh_table_free(soa);
    }
}
