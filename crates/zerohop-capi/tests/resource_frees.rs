//! `zh_deallocate` given what `zh_allocate` did not hand out: a foreign pointer, a second
//! free, another size. Each is `ZH_INVALID_ARGUMENT` naming the address, and the pool under
//! the handle is unharmed. Host memory only, so Miri runs it.

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use zerohop_capi::*;

#[allow(dead_code)] // `c` serves the other test files.
mod common;
use common::last_error;

#[test]
fn frees_the_resource_cannot_vouch_for_are_refused_by_status() {
    // SAFETY: every handle and out-parameter is live; the bad pointers are never dereferenced.
    unsafe {
        let (mut system, mut pool, mut stats) = (null_mut(), null_mut(), null_mut());
        assert_eq!(zh_resource_system(&mut system), zh_status::ZH_OK);
        assert_eq!(zh_resource_pool(system, 0, 0, &mut pool), zh_status::ZH_OK);
        assert_eq!(zh_resource_stats(pool, &mut stats), zh_status::ZH_OK);
        let mut block: *mut c_void = null_mut();
        assert_eq!(zh_allocate(stats, 64, 0, 0, &mut block), zh_status::ZH_OK);

        let foreign = std::ptr::without_provenance_mut::<c_void>(0x1000);
        assert_eq!(
            zh_deallocate(stats, foreign, 64, 0, 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("free of 0x1000"), "{}", last_error());
        assert_eq!(
            zh_deallocate(stats, block, 4096, 0, 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("allocated as 64 bytes"),
            "{}",
            last_error()
        );
        assert_eq!(
            zh_deallocate(pool, block, 64, 0, 0),
            zh_status::ZH_INVALID_ARGUMENT,
            "the block came through the Stats adaptor, not straight from the pool"
        );
        assert_eq!(zh_deallocate(stats, block, 64, 0, 0), zh_status::ZH_OK);
        assert_eq!(
            zh_deallocate(stats, block, 64, 0, 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        assert!(last_error().contains("double free"), "{}", last_error());

        let mut counted = zh_statistics::default();
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!((counted.current_bytes, counted.current_count), (0, 0));
        let (mut a, mut b): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        assert_eq!(zh_allocate(stats, 64, 0, 0, &mut a), zh_status::ZH_OK);
        assert_eq!(zh_allocate(stats, 64, 0, 0, &mut b), zh_status::ZH_OK);
        assert_ne!(a, b, "a block handed out twice");
        assert_eq!(zh_deallocate(stats, a, 64, 0, 0), zh_status::ZH_OK);
        assert_eq!(zh_deallocate(stats, b, 64, 0, 0), zh_status::ZH_OK);
        assert_eq!(zh_deallocate(stats, null_mut(), 64, 0, 0), zh_status::ZH_OK);
        assert_eq!(
            zh_deallocate(null(), block, 64, 0, 0),
            zh_status::ZH_INVALID_ARGUMENT
        );
        zh_resource_free(stats);
        zh_resource_free(pool);
        zh_resource_free(system);
    }
}
