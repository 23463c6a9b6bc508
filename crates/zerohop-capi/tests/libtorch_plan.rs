//! `ZH_MAP_FOR_LIBTORCH`: the core's hand-off plan from C. libtorch ignores DLPack's
//! read-only flag, so read-only tensors go to it only as a reported copy, on the caller's word
//! or with the writes checked, never silently. Host memory only, so it runs under Miri.

use std::ptr::null_mut;

use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// The test owns the buffer and frees it itself.
unsafe extern "C" fn keep(_: *mut std::ffi::c_void) {}

/// A 4-row table of one float32 column and one float32 3-vector, in memory the program owns.
fn table(floats: &mut [f32]) -> *mut zh_table {
    let (mut s, mut table) = (null_mut(), null_mut());
    let f32 = c("float32");
    // SAFETY: out-parameters are locals; the strings are NUL-terminated; `floats` outlives the
    // table (each test frees the table before its buffer goes).
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        assert_eq!(
            zh_schema_add_column(s, c("pt").as_ptr(), f32.as_ptr()),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_schema_add_vector(s, c("xyz").as_ptr(), f32.as_ptr(), 3),
            zh_status::ZH_OK
        );
        let status = zh_table_wrap(
            s,
            4,
            0,
            floats.as_mut_ptr().cast(),
            std::mem::size_of_val(floats),
            -1,
            Some(keep),
            null_mut(),
            &mut table,
        );
        assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
        zh_schema_free(s);
    }
    table
}

/// The first tensor's address and whether it was copied, or the status and message.
fn map(table: *mut zh_table, flags: u32) -> Result<(usize, bool), (zh_status, String)> {
    let mut tensors = null_mut();
    // SAFETY: a live table; `tensors` is freed before returning.
    unsafe {
        let status = zh_table_map(table, c("pt; xyz").as_ptr(), flags, &mut tensors);
        if status != zh_status::ZH_OK {
            assert!(tensors.is_null(), "a refusal hands out nothing");
            return Err((status, last_error()));
        }
        let mut view = std::mem::MaybeUninit::uninit();
        assert_eq!(
            zh_tensors_view(tensors, 0, view.as_mut_ptr()),
            zh_status::ZH_OK
        );
        let view = view.assume_init();
        assert_eq!(view.copied, zh_tensors_copied(tensors, 0));
        zh_tensors_free(tensors);
        Ok((view.data as usize, view.copied))
    }
}

#[test]
fn read_only_tensors_reach_libtorch_only_as_a_copy_on_the_callers_word_or_guarded() {
    let mut floats = vec![1.5_f32; 128];
    let table = table(&mut floats);
    let start = floats.as_ptr() as usize;
    let ro = ZH_MAP_READONLY | ZH_MAP_FOR_LIBTORCH;

    let (status, message) = map(table, ro).unwrap_err();
    assert_eq!(status, zh_status::ZH_READ_ONLY);
    for words in [
        "\"pt\"",
        "libtorch",
        "ZH_MAP_ALLOW_COPY",
        "ZH_MAP_SHARE_READONLY",
    ] {
        assert!(message.contains(words), "{words}: {message}");
    }
    assert!(
        !message.contains("copy=True"),
        "Python words in C: {message}"
    );

    let (address, copied) = map(table, ro | ZH_MAP_ALLOW_COPY).unwrap();
    assert!(copied && address != start, "a private copy, reported");
    let mut tensors = null_mut();
    // SAFETY: a live table; the handle is freed below; the reason is read before.
    unsafe {
        let flags = ro | ZH_MAP_ALLOW_COPY;
        assert_eq!(
            zh_table_map(table, c("pt").as_ptr(), flags, &mut tensors),
            zh_status::ZH_OK
        );
        let reason = std::ffi::CStr::from_ptr(zh_tensors_copy_reason(tensors, 0));
        let reason = reason.to_str().unwrap();
        assert!(
            reason.contains("torch ignores DLPack's read-only flag"),
            "{reason}"
        );
        assert!(zh_tensors_copy_reason(tensors, 1).is_null(), "no tensor 1");
        zh_tensors_free(tensors);
        assert_eq!(
            zh_table_map(table, c("pt").as_ptr(), 0, &mut tensors),
            zh_status::ZH_OK
        );
        assert!(
            zh_tensors_copy_reason(tensors, 0).is_null(),
            "a view has no reason"
        );
        zh_tensors_free(tensors);
    }
    assert_eq!(
        map(table, ro | ZH_MAP_SHARE_READONLY).unwrap(),
        (start, false)
    );
    assert_eq!(
        map(table, ZH_MAP_GUARD_CONST | ZH_MAP_FOR_LIBTORCH).unwrap(),
        (start, false),
        "a guarded map shares: the writes are checked afterwards"
    );
    // Writable tensors, and read-only ones for consumers that honour the flag, are shared.
    assert_eq!(map(table, ZH_MAP_FOR_LIBTORCH).unwrap(), (start, false));
    assert_eq!(map(table, ZH_MAP_READONLY).unwrap(), (start, false));
    // SAFETY: a live handle, freed once.
    unsafe { zh_table_free(table) };
}
