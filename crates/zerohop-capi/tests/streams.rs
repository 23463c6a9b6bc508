//! The stream a table's data is produced on (`zh_table_set_stream`), kept by row slices, and
//! maps applied for a consumer's stream (`zh_map_apply_on_stream`). A table of adopted
//! columns said to be on cuda:0 (addresses never read) checks the bookkeeping without a GPU,
//! so these run under Miri: what needs the driver (ordering two different streams) is a
//! device error here, as on any machine without CUDA.

use std::ptr::null_mut;
use std::sync::Arc;

use zerohop::dlpack::{export_versioned, ExportOptions};
use zerohop::{DType, Device, TensorView};
use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// A one-column table of `rows` f32 on `device`; on a CUDA device its memory is host memory
/// that nothing reads (the test only maps it).
fn table_on(device: Device, rows: i64) -> *mut zh_table {
    let values = Arc::new(vec![0f32; rows as usize]);
    let data = values.as_ptr() as *mut u8;
    // SAFETY: `data` holds `rows` f32 kept alive by the owner; on a CUDA device the test
    // never dereferences it.
    let view = unsafe {
        TensorView::from_raw_parts(data, DType::F32, vec![rows], vec![1], device, values, false)
    }
    .unwrap();
    let managed = export_versioned(&view, ExportOptions::default()).unwrap();
    let name = c("x");
    let (names, tensors) = ([name.as_ptr()], [managed.as_ptr()]);
    let mut table = null_mut();
    // SAFETY: one name, one managed tensor whose ownership passes, a writable out.
    let status = unsafe { zh_table_from_columns(names.as_ptr(), tensors.as_ptr(), 1, &mut table) };
    assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
    table
}

fn stream_of(table: *const zh_table) -> usize {
    let mut stream = usize::MAX;
    // SAFETY: a live table, a writable out.
    assert_eq!(
        unsafe { zh_table_get_stream(table, &mut stream) },
        zh_status::ZH_OK
    );
    stream
}

/// The first tensor's data pointer of `map` applied for `stream`, or the failing status.
fn apply_on(map: *const zh_map, table: *const zh_table, stream: usize) -> Result<usize, zh_status> {
    let mut tensors = null_mut();
    // SAFETY: live handles, a writable out.
    let status = unsafe { zh_map_apply_on_stream(map, table, stream, &mut tensors) };
    if status != zh_status::ZH_OK {
        assert!(tensors.is_null(), "an out-parameter written on failure");
        return Err(status);
    }
    let mut managed = null_mut();
    // SAFETY: live tensors, a writable out; the exported tensor is released at once.
    unsafe {
        assert_eq!(
            zh_tensors_export(tensors, 0, &mut managed),
            zh_status::ZH_OK
        );
        let data = (*managed).dl_tensor.data as usize;
        ((*managed).deleter.unwrap())(managed);
        zh_tensors_free(tensors);
        Ok(data)
    }
}

fn map() -> *mut zh_map {
    let spec = c("x");
    let mut map = null_mut();
    // SAFETY: a NUL-terminated spec, a writable out.
    assert_eq!(
        unsafe { zh_map_new(spec.as_ptr(), 0, &mut map) },
        zh_status::ZH_OK
    );
    map
}

#[test]
fn a_host_table_has_no_stream_and_takes_none() {
    let table = table_on(Device::CPU, 8);
    let map = map();
    assert_eq!(stream_of(table), 0);
    // SAFETY: a live table.
    let status = unsafe { zh_table_set_stream(table, 7) };
    assert_eq!(status, zh_status::ZH_INVALID_ARGUMENT);
    assert!(
        last_error().contains("only tables on a CUDA device have a stream"),
        "{}",
        last_error()
    );
    assert_eq!(stream_of(table), 0, "nothing changed");
    let plain = apply_on(map, table, 0).unwrap();
    assert_eq!(apply_on(map, table, 7), Err(zh_status::ZH_INVALID_ARGUMENT));
    assert!(last_error().contains("pass 0"), "{}", last_error());
    // SAFETY: live handles, freed once.
    unsafe {
        let mut tensors = null_mut();
        assert_eq!(zh_map_apply(map, table, &mut tensors), zh_status::ZH_OK);
        let mut managed = null_mut();
        assert_eq!(
            zh_tensors_export(tensors, 0, &mut managed),
            zh_status::ZH_OK
        );
        assert_eq!(
            (*managed).dl_tensor.data as usize,
            plain,
            "the same tensors as zh_map_apply"
        );
        ((*managed).deleter.unwrap())(managed);
        zh_tensors_free(tensors);
        zh_map_free(map);
        zh_table_free(table);
    }
}

#[test]
fn a_device_table_keeps_its_stream_through_slices_and_orders_other_streams() {
    let table = table_on(Device::cuda(0), 8);
    let map = map();
    assert_eq!(
        stream_of(table),
        1,
        "tables start on the legacy default stream"
    );
    // SAFETY: a live table.
    assert_eq!(
        unsafe { zh_table_set_stream(table, 0) },
        zh_status::ZH_INVALID_ARGUMENT
    );
    assert!(
        last_error().contains("stream 0 is ambiguous"),
        "{}",
        last_error()
    );
    // SAFETY: a live table; 0x5000 stands for a cudaStream_t nothing dereferences here.
    assert_eq!(
        unsafe { zh_table_set_stream(table, 0x5000) },
        zh_status::ZH_OK
    );
    assert_eq!(stream_of(table), 0x5000);
    let mut rows = null_mut();
    // SAFETY: a live table, a writable out.
    assert_eq!(
        unsafe { zh_table_rows(table, 2, 6, &mut rows) },
        zh_status::ZH_OK
    );
    assert_eq!(
        stream_of(rows),
        0x5000,
        "a slice is produced where its table is"
    );
    // Read on the table's own stream: nothing to order, the tensors come at once.
    assert!(apply_on(map, rows, 0x5000).is_ok());
    assert_eq!(apply_on(map, table, 0), Err(zh_status::ZH_INVALID_ARGUMENT));
    // Another stream must wait for the table's: that takes the driver, absent here.
    if !cfg!(miri) && !cuda_present() {
        assert_eq!(apply_on(map, table, 2), Err(zh_status::ZH_DEVICE_ERROR));
    }
    // SAFETY: live handles, freed once.
    unsafe {
        zh_map_free(map);
        zh_table_free(rows);
        zh_table_free(table);
    }
}

#[cfg(feature = "cuda")]
fn cuda_present() -> bool {
    zerohop::cuda::is_available()
}

#[cfg(not(feature = "cuda"))]
fn cuda_present() -> bool {
    false
}
