//! The C ABI driven as a C program would, from Rust: handles, statuses, pointer identity of
//! every export, and the bad inputs the header promises to survive. Host memory only, so the
//! whole file runs under Miri.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

use zerohop::dlpack::ffi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::{DType, TensorView};
use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// A track-like schema: pt, eta, phi; a 3-vector position; a 3×3 covariance; a score.
fn track_schema() -> *mut zh_schema {
    let mut s = null_mut();
    // SAFETY: `s` is live; the strings are NUL-terminated.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        for name in ["pt", "eta", "phi"] {
            assert_eq!(
                zh_schema_add_column(s, c(name).as_ptr(), c("float32").as_ptr()),
                zh_status::ZH_OK
            );
        }
        assert_eq!(
            zh_schema_add_vector(s, c("position").as_ptr(), c("float32").as_ptr(), 3),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_matrix(
                s,
                c("covariance").as_ptr(),
                c("float32").as_ptr(),
                3,
                3,
                zh_order::ZH_ROW_MAJOR as i32
            ),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_column(s, c("score").as_ptr(), c("float32").as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(zh_schema_len(s), 6);
    }
    s
}

fn track_table(rows: usize) -> *mut zh_table {
    let schema = track_schema();
    let mut table = null_mut();
    // SAFETY: live schema; NULL resource means the current host resource.
    unsafe {
        assert_eq!(
            zh_table_new(schema, rows, 0, null(), &mut table),
            zh_status::ZH_OK
        );
        zh_schema_free(schema);
    }
    table
}

/// Shape, strides, data pointer and flags of a managed tensor; then its deleter runs.
///
/// # Safety
/// `m` must be a live managed tensor owned by the caller.
unsafe fn take(m: *mut DLManagedTensorVersioned) -> (Vec<i64>, Vec<i64>, usize, u64) {
    // SAFETY: per the contract.
    unsafe {
        let t = &(*m).dl_tensor;
        let n = t.ndim as usize;
        let shape = std::slice::from_raw_parts(t.shape, n).to_vec();
        let strides = std::slice::from_raw_parts(t.strides, n).to_vec();
        let out = (shape, strides, t.data as usize, (*m).flags);
        ((*m).deleter.unwrap())(m);
        out
    }
}

fn info(table: *const zh_table) -> zh_table_info {
    let mut i = std::mem::MaybeUninit::uninit();
    // SAFETY: live table, writable out.
    assert_eq!(
        unsafe { zh_table_get_info(table, i.as_mut_ptr()) },
        zh_status::ZH_OK
    );
    // SAFETY: written on ZH_OK.
    unsafe { i.assume_init() }
}

#[test]
fn columns_and_maps_are_views_of_the_one_buffer() {
    let rows = 5;
    let table = track_table(rows);
    let i = info(table);
    assert_eq!(
        (i.rows, i.columns, i.alignment, i.device_type),
        (5, 6, 128, 1)
    );
    let start = i.data as usize;
    let end = start + i.nbytes;
    // SAFETY: live handles; every export is taken (deleter run) by `take`.
    unsafe {
        let mut m = null_mut();
        assert_eq!(
            zh_table_column(table, c("pt").as_ptr(), &mut m),
            zh_status::ZH_OK
        );
        let (shape, strides, data, flags) = take(m);
        assert_eq!((shape, strides, data, flags), (vec![5], vec![1], start, 0));

        let mut tensors = null_mut();
        let spec = c("kin: pt, eta, phi; position; covariance");
        assert_eq!(
            zh_table_map(table, spec.as_ptr(), ZH_MAP_READONLY, &mut tensors),
            zh_status::ZH_OK
        );
        assert_eq!(zh_tensors_len(tensors), 3);
        let names: Vec<String> = (0..3)
            .map(|k| {
                CStr::from_ptr(zh_tensors_name(tensors, k))
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, ["kin", "position", "covariance"]);
        assert!(zh_tensors_name(tensors, 3).is_null());
        // Columns of 5 float32 padded to 128 bytes: a pitch of 32 elements.
        let expected = [
            (vec![5, 3], vec![1, 32]),
            (vec![5, 3], vec![1, 32]),
            (vec![5, 3, 3], vec![1, 96, 32]),
        ];
        for (k, (shape, strides)) in expected.into_iter().enumerate() {
            let mut m = null_mut();
            assert_eq!(zh_tensors_export(tensors, k, &mut m), zh_status::ZH_OK);
            let (s, st, data, flags) = take(m);
            assert_eq!((s, st), (shape, strides), "tensor {k}");
            assert!(
                data >= start && data < end,
                "tensor {k} is not in the table's buffer"
            );
            assert_eq!(
                flags & DLPACK_FLAG_BITMASK_READ_ONLY,
                DLPACK_FLAG_BITMASK_READ_ONLY
            );
            assert!(!zh_tensors_copied(tensors, k));
        }
        zh_tensors_free(tensors);
        zh_table_free(table);
    }
}

#[test]
fn a_map_made_once_applies_to_every_table() {
    let mut map = null_mut();
    // SAFETY: live handles; each freed once.
    unsafe {
        let spec = c("kin: pt, eta, phi; covariance");
        assert_eq!(zh_map_new(spec.as_ptr(), 0, &mut map), zh_status::ZH_OK);
        for rows in [3, 40] {
            let table = track_table(rows);
            let mut tensors = null_mut();
            assert_eq!(zh_map_apply(map, table, &mut tensors), zh_status::ZH_OK);
            assert_eq!(zh_tensors_len(tensors), 2);
            let mut m = null_mut();
            assert_eq!(zh_tensors_export(tensors, 1, &mut m), zh_status::ZH_OK);
            let (shape, _, data, _) = take(m);
            assert_eq!(shape, vec![rows as i64, 3, 3]);
            let start = info(table).data as usize;
            assert!(data > start && data < start + info(table).nbytes);
            zh_tensors_free(tensors);
            zh_table_free(table);
        }
        let mut other = null_mut();
        let schema = track_schema();
        let mut small = null_mut();
        let mut s2 = null_mut();
        assert_eq!(zh_schema_new(&mut s2), zh_status::ZH_OK);
        assert_eq!(
            zh_schema_add_column(s2, c("pt").as_ptr(), c("float32").as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(zh_table_new(s2, 2, 0, null(), &mut small), zh_status::ZH_OK);
        assert_eq!(
            zh_map_apply(map, small, &mut other),
            zh_status::ZH_NOT_FOUND
        );
        assert!(last_error().contains("eta"), "{}", last_error());
        assert_eq!(
            zh_map_apply(null(), small, &mut other),
            zh_status::ZH_INVALID_ARGUMENT
        );
        let mut bad_map = null_mut();
        assert_eq!(
            zh_map_new(c("a: ").as_ptr(), 0, &mut bad_map),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(bad_map.is_null());
        zh_table_free(small);
        zh_schema_free(s2);
        zh_schema_free(schema);
        zh_map_free(map);
        zh_map_free(null_mut());
    }
}

#[test]
fn exported_tensors_keep_a_freed_table_alive() {
    let table = track_table(4);
    // SAFETY: live handles; the export outlives the table handle on purpose.
    unsafe {
        let mut m = null_mut();
        assert_eq!(
            zh_table_column(table, c("eta").as_ptr(), &mut m),
            zh_status::ZH_OK
        );
        zh_table_free(table);
        let t = &(*m).dl_tensor;
        let values = std::slice::from_raw_parts_mut(t.data as *mut f32, 4);
        values.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]); // still the table's memory: no UB
        assert_eq!(values.iter().sum::<f32>(), 10.0);
        ((*m).deleter.unwrap())(m);
    }
}

#[test]
fn a_model_output_lands_in_its_column() {
    let table = track_table(3);
    let output = TensorView::from_slice(&[0.5f32, 0.25, 0.125], &[3]).unwrap();
    let managed = export_versioned(&output, ExportOptions::default()).unwrap();
    // SAFETY: live table; the managed tensor's ownership passes to the call.
    unsafe {
        assert_eq!(
            zh_table_write_column(table, c("score").as_ptr(), managed.as_ptr()),
            zh_status::ZH_OK
        );
        let mut m = null_mut();
        assert_eq!(
            zh_table_column(table, c("score").as_ptr(), &mut m),
            zh_status::ZH_OK
        );
        let t = &(*m).dl_tensor;
        assert_eq!(
            std::slice::from_raw_parts(t.data as *const f32, 3),
            [0.5, 0.25, 0.125]
        );
        ((*m).deleter.unwrap())(m);
        zh_table_free(table);
    }
}

#[test]
fn a_wrong_output_is_refused_and_still_released() {
    let table = track_table(3);
    let cases: [(TensorView, &str); 2] = [
        (
            TensorView::from_slice(&[1.0f64, 2.0, 3.0], &[3]).unwrap(),
            "float64",
        ),
        (TensorView::zeros(DType::F32, &[3, 1]).unwrap(), "[3, 1]"),
    ];
    for (wrong, said) in cases {
        let owner = wrong.owner().clone();
        let managed = export_versioned(&wrong, ExportOptions::default()).unwrap();
        drop(wrong);
        // SAFETY: live table; ownership of `managed` passes to the call.
        let status = unsafe { zh_table_write_column(table, c("score").as_ptr(), managed.as_ptr()) };
        assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
        let message = last_error();
        assert!(
            message.contains("\"score\"") && message.contains(said),
            "{message}"
        );
        // The deleter ran: only our clone of the owner is left.
        assert_eq!(
            std::sync::Arc::strong_count(&owner),
            1,
            "{said}: the source leaked"
        );
    }
    // SAFETY: a live table, freed once.
    unsafe { zh_table_free(table) };
}

#[test]
fn bad_handles_names_and_specs_are_statuses_with_messages() {
    let table = track_table(2);
    let mut m: *mut DLManagedTensorVersioned = null_mut();
    let mut tensors = null_mut();
    // SAFETY: every pointer is NULL or live; that is what is under test.
    unsafe {
        assert_eq!(
            zh_table_column(null(), c("pt").as_ptr(), &mut m),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("table is NULL"));
        assert_eq!(
            zh_table_column(table, c("nope").as_ptr(), &mut m),
            zh_status::ZH_NOT_FOUND
        );
        assert!(last_error().contains("nope"), "{}", last_error());
        assert_eq!(
            zh_table_column(table, null(), &mut m),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_table_column(table, c("pt").as_ptr(), null_mut()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(m.is_null(), "an out-parameter was written on failure");

        for (spec, says) in [
            ("a: pt, nope", "nope"),
            ("a: pt, position", "mixes"),
            ("a: ; b: pt", "group 1"),
            (" ; ", "no tensors"),
            ("a: pt; a: eta", "twice"),
        ] {
            let status = zh_table_map(table, c(spec).as_ptr(), 0, &mut tensors);
            assert_ne!(status, zh_status::ZH_OK, "{spec}");
            assert!(last_error().contains(says), "{spec}: {}", last_error());
        }
        assert_eq!(
            zh_table_map(
                table,
                c("pt").as_ptr(),
                ZH_MAP_SHARE_READONLY << 1,
                &mut tensors
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(tensors.is_null());
        assert_eq!(zh_tensors_len(null()), 0);
        assert_eq!(
            zh_tensors_export(null(), 0, &mut m),
            zh_status::ZH_INVALID_ARGUMENT
        );

        let mut s = null_mut();
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        assert_eq!(
            zh_schema_add_column(s, c("x").as_ptr(), c("float33").as_ptr()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("float33"));
        assert_eq!(
            zh_schema_add_vector(s, c("v").as_ptr(), c("float32").as_ptr(), 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_schema_add_column(s, c("x").as_ptr(), c("float32").as_ptr()),
            zh_status::ZH_OK
        );
        // A name used twice is refused by the call that adds it (tests/layout.rs has more).
        assert_eq!(
            zh_schema_add_column(s, c("x").as_ptr(), c("int32").as_ptr()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("\"x\""), "{}", last_error());
        let mut t = null_mut();
        assert_eq!(
            zh_table_new(s, 3, 48, null(), &mut t),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(t.is_null());
        zh_schema_free(s);
        zh_schema_free(null_mut());
        zh_table_free(null_mut());
        zh_tensors_free(null_mut());
        zh_resource_free(null_mut());
        zh_table_free(table);
    }
}

#[test]
fn tables_drawn_from_a_pool_are_counted_by_its_stats() {
    let (mut system, mut pool, mut stats) = (null_mut(), null_mut(), null_mut());
    // SAFETY: live handles throughout; each freed once.
    unsafe {
        assert_eq!(zh_resource_system(&mut system), zh_status::ZH_OK);
        assert_eq!(
            zh_resource_pool(system, 1 << 16, 0, &mut pool),
            zh_status::ZH_OK
        );
        assert_eq!(zh_resource_stats(pool, &mut stats), zh_status::ZH_OK);
        let schema = track_schema();
        let mut table = null_mut();
        assert_eq!(
            zh_table_new(schema, 100, 64, stats, &mut table),
            zh_status::ZH_OK
        );
        let mut counted = zh_statistics::default();
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!(counted.current_count, 1);
        assert_eq!(counted.current_bytes as usize, info(table).nbytes);

        let mut block = null_mut();
        assert_eq!(zh_allocate(stats, 1000, 0, 0, &mut block), zh_status::ZH_OK);
        assert_eq!(block as usize % 256, 0);
        assert_eq!(zh_deallocate(stats, block, 1000, 0, 0), zh_status::ZH_OK);
        assert_eq!(
            zh_allocate(stats, 10, 3, 0, &mut block),
            zh_status::ZH_INVALID_ARGUMENT
        );

        zh_table_free(table);
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!((counted.current_count, counted.total_count), (0, 2));
        assert_eq!(
            zh_resource_statistics(pool, &mut counted),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("not a Stats adaptor"));
        assert_eq!(
            zh_resource_pool(system, 10, 5, &mut pool),
            zh_status::ZH_INVALID_ARGUMENT
        );
        zh_schema_free(schema);
        for r in [stats, pool, system] {
            zh_resource_free(r);
        }
    }
}

#[test]
fn the_current_host_resource_is_shared_with_every_caller() {
    let mut current = null_mut();
    // SAFETY: live handles; each freed once.
    unsafe {
        assert_eq!(
            zh_resource_current(c("cpu").as_ptr(), &mut current),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_resource_current(c("tpu:0").as_ptr(), &mut current),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("tpu"), "{}", last_error());
        zh_resource_free(current);
    }
    // Without a GPU (or the cuda feature) a device resource is a status, not a crash. Miri
    // cannot load libcuda, so it checks the build without the feature.
    #[cfg(feature = "cuda")]
    let gpu = !cfg!(miri) && zerohop::cuda::is_available();
    #[cfg(not(feature = "cuda"))]
    let gpu = false;
    if !gpu {
        let mut cuda = null_mut();
        // SAFETY: a writable out-parameter.
        let status = unsafe { zh_resource_cuda_device(0, &mut cuda) };
        assert_eq!(status, zh_status::ZH_DEVICE_ERROR);
        assert!(cuda.is_null());
    }
}

#[test]
fn version_strings() {
    // SAFETY: a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(zh_version()) }.to_str().unwrap();
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
    assert_eq!(zh_dlpack_version(), 103);
    let _: *const c_char = zh_last_error();
}

#[test]
fn views_describe_the_mapped_tensors_inside_the_exported_buffer() {
    let rows = 5;
    let table = track_table(rows);
    let i = info(table);
    // SAFETY: live handles; every export is taken (deleter run) once; the descriptions are
    // read while `tensors` and the buffer's export live.
    unsafe {
        let mut whole = null_mut();
        assert_eq!(zh_table_export(table, &mut whole), zh_status::ZH_OK);
        zh_table_free(table); // the export owns the memory from here on
        let t = &(*whole).dl_tensor;
        assert_eq!((t.ndim, t.dtype.code, t.dtype.bits), (1, 1, 8), "uint8");
        assert_eq!(*t.shape as usize, i.nbytes);
        assert_eq!(t.data as usize, i.data as usize);
        assert_eq!((*whole).flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
        let bytes = std::slice::from_raw_parts_mut(t.data as *mut u8, i.nbytes);
        bytes.fill(7); // still the table's memory after the handle went: no UB
        assert!(bytes.iter().all(|&b| b == 7));
        ((*whole).deleter.unwrap())(whole);
    }
    let table = track_table(rows);
    let i = info(table);
    // SAFETY: as above.
    unsafe {
        let mut whole = null_mut();
        assert_eq!(zh_table_export(table, &mut whole), zh_status::ZH_OK);
        let mut tensors = null_mut();
        // "odd" lists its columns out of order, so strides cannot describe it: a copy.
        let spec = c("kin: pt, eta, phi; covariance; odd: pt, phi, eta");
        assert_eq!(
            zh_table_map(
                table,
                spec.as_ptr(),
                ZH_MAP_READONLY | ZH_MAP_ALLOW_COPY,
                &mut tensors
            ),
            zh_status::ZH_OK
        );
        for k in 0..2 {
            let mut v = std::mem::MaybeUninit::<zh_tensor_view>::uninit();
            assert_eq!(
                zh_tensors_view(tensors, k, v.as_mut_ptr()),
                zh_status::ZH_OK
            );
            let v = v.assume_init();
            let n = v.ndim as usize;
            let shape = std::slice::from_raw_parts(v.shape, n).to_vec();
            let strides = std::slice::from_raw_parts(v.strides, n).to_vec();
            let mut m = null_mut();
            assert_eq!(zh_tensors_export(tensors, k, &mut m), zh_status::ZH_OK);
            let (s, st, data, _) = take(m);
            assert_eq!(
                (shape, strides, v.data as usize),
                (s, st, data),
                "tensor {k}"
            );
            assert_eq!(
                (v.dtype_code, v.dtype_bits, v.dtype_lanes),
                (2, 32, 1),
                "float32"
            );
            assert_eq!((v.device_type, v.device_id), (1, 0));
            assert!(v.readonly && !v.copied);
            let offset = v.data as usize - i.data as usize;
            assert!(
                offset < i.nbytes && offset.is_multiple_of(4),
                "inside the buffer, whole floats"
            );
        }
        let mut v = std::mem::MaybeUninit::<zh_tensor_view>::uninit();
        assert_eq!(
            zh_tensors_view(tensors, 2, v.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let copy = v.assume_init();
        let at = copy.data as usize;
        assert!(copy.copied && (at < i.data as usize || at >= i.data as usize + i.nbytes));
        assert_eq!(
            zh_tensors_view(tensors, 3, v.as_mut_ptr()),
            zh_status::ZH_NOT_FOUND
        );
        assert!(last_error().contains("out of range"), "{}", last_error());
        assert_eq!(
            zh_tensors_view(null(), 0, v.as_mut_ptr()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_tensors_view(tensors, 0, null_mut()),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(
            zh_table_export(null(), &mut whole),
            zh_status::ZH_INVALID_ARGUMENT
        );
        zh_tensors_free(tensors);
        zh_table_free(table);
        ((*whole).deleter.unwrap())(whole);
    }
}
