//! `ZH_MAP_GUARD_CONST` and `zh_tensors_verify_unwritten`: const inputs handed out without a
//! copy, and a write into them caught after the fact and named. Driven as a C program would,
//! over memory the program owns; host memory only, so it runs under Miri.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use zerohop::dlpack::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use zerohop_capi::*;

mod common;
use common::{c, last_error};

const ROWS: usize = 10;
/// pt, eta, phi (float32 columns), position (float32 3-vector), covariance (float32 3×3): 15
/// components of 10 floats, each padded to 128 bytes.
const BYTES: usize = 15 * 128;
const SPEC: &str = "kin: pt, eta, phi; position; covariance";

fn schema() -> *mut zh_schema {
    let mut s = null_mut();
    let f32 = c("float32");
    // SAFETY: `s` is written by zh_schema_new; the strings are NUL-terminated.
    unsafe {
        assert_eq!(zh_schema_new(&mut s), zh_status::ZH_OK);
        for name in ["pt", "eta", "phi"] {
            let name = c(name);
            assert_eq!(
                zh_schema_add_column(s, name.as_ptr(), f32.as_ptr()),
                zh_status::ZH_OK
            );
        }
        assert_eq!(
            zh_schema_add_vector(s, c("position").as_ptr(), f32.as_ptr(), 3),
            zh_status::ZH_OK
        );
        let order = zh_order::ZH_COLUMN_MAJOR as i32;
        assert_eq!(
            zh_schema_add_matrix(s, c("covariance").as_ptr(), f32.as_ptr(), 3, 3, order),
            zh_status::ZH_OK
        );
    }
    s
}

/// The program's own event buffer and how often zerohop gave it back.
struct Event {
    floats: Vec<f32>,
    releases: AtomicUsize,
}

unsafe extern "C" fn give_back(ctx: *mut c_void) {
    // SAFETY: every test passes a live Event as the context.
    unsafe { &*(ctx as *const Event) }
        .releases
        .fetch_add(1, Ordering::SeqCst);
}

impl Event {
    fn new() -> Box<Self> {
        Box::new(Event {
            floats: (0..BYTES / 4).map(|i| i as f32 + 0.5).collect(),
            releases: AtomicUsize::new(0),
        })
    }

    /// A table over the buffer, released back to the event.
    fn table(&mut self) -> *mut zh_table {
        let (s, mut table) = (schema(), null_mut());
        // SAFETY: live schema; the buffer outlives the table (the test holds the Box and
        // checks the release count).
        unsafe {
            let status = zh_table_wrap(
                s,
                ROWS,
                0,
                self.floats.as_mut_ptr().cast(),
                BYTES,
                -1,
                Some(give_back),
                self as *mut Event as *mut c_void,
                &mut table,
            );
            assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
            zh_schema_free(s);
        }
        table
    }

    fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
}

/// Tensor `i`'s view, as a consumer that ignores read-only flags (libtorch) sees it.
///
/// # Safety
/// `tensors` must be a live handle.
unsafe fn view(tensors: *const zh_tensors, i: usize) -> zh_tensor_view {
    let mut v = std::mem::MaybeUninit::uninit();
    // SAFETY: per the contract.
    unsafe {
        assert_eq!(
            zh_tensors_view(tensors, i, v.as_mut_ptr()),
            zh_status::ZH_OK
        );
        v.assume_init()
    }
}

/// Element `index` (in elements from the view's start) of a float32 view, as a pointer.
fn at(v: &zh_tensor_view, index: usize) -> *mut f32 {
    v.data.cast::<f32>().wrapping_add(index)
}

#[test]
fn a_model_writing_a_const_input_is_caught_and_the_column_named() {
    let mut event = Event::new();
    let table = event.table();
    let mut tensors = null_mut();
    // SAFETY: live handles; the writes stand for a model's, into the event's own buffer.
    unsafe {
        let status = zh_table_map(table, c(SPEC).as_ptr(), ZH_MAP_GUARD_CONST, &mut tensors);
        assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
        let kin = view(tensors, 0);
        assert!(kin.readonly && !kin.copied);
        assert_eq!(
            kin.data,
            event.floats.as_mut_ptr().cast(),
            "shared, not copied"
        );
        // A model that only reads.
        assert_eq!(zh_tensors_verify_unwritten(tensors, 0), zh_status::ZH_OK);

        // kin is (10, 3) with strides (1, 32): row 7 of eta is element 7 + 32.
        let eta7 = at(&kin, 7 + 32);
        let kept = *eta7;
        *eta7 = kept + 1.0;
        assert_eq!(
            zh_tensors_verify_unwritten(tensors, 0),
            zh_status::ZH_READ_ONLY
        );
        let says = last_error();
        assert!(says.contains("column \"eta\" was written"), "{says}");
        assert!(says.contains("1 of 5 guarded columns"), "{says}");
        // A write into the covariance too: both listed, the first in map order named.
        let cov = view(tensors, 2);
        let c22 = at(&cov, 9 + 8 * 32);
        *c22 = -*c22;
        assert_eq!(
            zh_tensors_verify_unwritten(tensors, 0),
            zh_status::ZH_READ_ONLY
        );
        let says = last_error();
        assert!(
            says.contains("2 of 5 guarded columns changed: eta, covariance"),
            "{says}"
        );
        // Put back, the bytes are the const input again.
        *eta7 = kept;
        *c22 = -*c22;
        assert_eq!(zh_tensors_verify_unwritten(tensors, 0), zh_status::ZH_OK);
        zh_tensors_free(tensors);
        zh_table_free(table);
    }
    assert_eq!(event.releases(), 1);
}

#[test]
fn the_exports_are_read_only_and_the_same_memory() {
    let mut event = Event::new();
    let table = event.table();
    let (mut tensors, mut m) = (null_mut(), null_mut());
    // SAFETY: live handles; the managed tensor's deleter runs once.
    unsafe {
        let status = zh_table_map(table, c(SPEC).as_ptr(), ZH_MAP_GUARD_CONST, &mut tensors);
        assert_eq!(status, zh_status::ZH_OK, "{}", last_error());
        assert_eq!(zh_tensors_export(tensors, 1, &mut m), zh_status::ZH_OK);
        assert_ne!((*m).flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0);
        assert_eq!((*m).dl_tensor.data, view(tensors, 1).data);
        ((*m).deleter.unwrap())(m);
        zh_tensors_free(tensors);
        zh_table_free(table);
    }
    assert_eq!(event.releases(), 1);
}

#[test]
fn each_batch_guards_its_own_rows() {
    let mut event = Event::new();
    let table = event.table();
    let (mut map, mut first, mut second) = (null_mut(), null_mut(), null_mut());
    let (mut a, mut b) = (null_mut(), null_mut());
    // SAFETY: live handles; the write stands for a model's.
    unsafe {
        let flags = ZH_MAP_GUARD_CONST | ZH_MAP_READONLY;
        assert_eq!(
            zh_map_new(c(SPEC).as_ptr(), flags, &mut map),
            zh_status::ZH_OK
        );
        assert_eq!(zh_table_rows(table, 0, 5, &mut first), zh_status::ZH_OK);
        assert_eq!(zh_table_rows(table, 5, 10, &mut second), zh_status::ZH_OK);
        assert_eq!(zh_map_apply(map, first, &mut a), zh_status::ZH_OK);
        assert_eq!(zh_map_apply(map, second, &mut b), zh_status::ZH_OK);
        // Row 1 of the second batch's position (row 6 of the table), component 2.
        let position = view(b, 1);
        let p = at(&position, 1 + 2 * 32);
        *p += 1.0;
        assert_eq!(zh_tensors_verify_unwritten(a, 0), zh_status::ZH_OK);
        assert_eq!(zh_tensors_verify_unwritten(b, 0), zh_status::ZH_READ_ONLY);
        assert!(
            last_error().contains("column \"position\""),
            "{}",
            last_error()
        );
        for h in [a, b] {
            zh_tensors_free(h);
        }
        zh_table_free(first);
        zh_table_free(second);
        zh_map_free(map);
        // The guard keeps the memory it reads alive, nothing longer.
        assert_eq!(event.releases(), 0);
        zh_table_free(table);
    }
    assert_eq!(event.releases(), 1);
}

#[test]
fn the_guard_outlives_the_table_handle_and_releases_once() {
    let mut event = Event::new();
    let table = event.table();
    let mut tensors = null_mut();
    // SAFETY: live handles, each freed once.
    unsafe {
        let status = zh_table_map(table, c(SPEC).as_ptr(), ZH_MAP_GUARD_CONST, &mut tensors);
        assert_eq!(status, zh_status::ZH_OK);
        zh_table_free(table);
        assert_eq!(event.releases(), 0, "the tensors still read the buffer");
        assert_eq!(zh_tensors_verify_unwritten(tensors, 0), zh_status::ZH_OK);
        zh_tensors_free(tensors);
    }
    assert_eq!(event.releases(), 1);
}

#[test]
fn refusals_say_why_and_touch_nothing() {
    let mut event = Event::new();
    let table = event.table();
    let untouched = std::ptr::NonNull::<zh_tensors>::dangling().as_ptr();
    let (mut plain, mut guarded, mut refused) = (null_mut(), null_mut(), untouched);
    // SAFETY: live handles or NULL, as each call allows.
    unsafe {
        assert_eq!(
            zh_tensors_verify_unwritten(std::ptr::null(), 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("tensors is NULL"), "{}", last_error());
        let spec = c(SPEC);
        assert_eq!(
            zh_table_map(table, spec.as_ptr(), ZH_MAP_READONLY, &mut plain),
            zh_status::ZH_OK
        );
        assert_eq!(
            zh_tensors_verify_unwritten(plain, 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("without ZH_MAP_GUARD_CONST"),
            "{}",
            last_error()
        );
        assert_eq!(
            zh_table_map(table, spec.as_ptr(), ZH_MAP_GUARD_CONST, &mut guarded),
            zh_status::ZH_OK
        );
        // A host table has no streams.
        assert_eq!(
            zh_tensors_verify_unwritten(guarded, 1),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("pass 0"), "{}", last_error());
        // The next flag bit is not one.
        assert_eq!(
            zh_table_map(
                table,
                spec.as_ptr(),
                ZH_MAP_SHARE_READONLY << 1,
                &mut refused
            ),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert_eq!(refused, untouched);
        zh_tensors_free(plain);
        zh_tensors_free(guarded);
        zh_table_free(table);
    }
    assert_eq!(event.releases(), 1);
}
