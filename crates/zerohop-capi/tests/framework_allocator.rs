//! `zh_cuda_malloc`/`zh_cuda_free`, the entry points a framework's pluggable allocator calls,
//! draw from the current resource. A file of its own: it sets the process's current host
//! resource, which other tests must not see.

use std::ffi::CStr;
use std::ptr::null_mut;

use zerohop_capi::*;

#[test]
fn framework_allocations_come_from_the_current_resource() {
    let (mut system, mut stats) = (null_mut(), null_mut());
    // SAFETY: live handles, each freed once; blocks freed once with their own sizes.
    unsafe {
        assert_eq!(zh_resource_system(&mut system), zh_status::ZH_OK);
        assert_eq!(zh_resource_stats(system, &mut stats), zh_status::ZH_OK);
        assert_eq!(zh_resource_set_current(stats), zh_status::ZH_OK);

        let block = zh_cuda_malloc(1000, -1, null_mut()); // -1: the host's current resource
        assert!(!block.is_null() && (block as usize).is_multiple_of(256));
        let mut counted = zh_statistics::default();
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!((counted.current_count, counted.current_bytes), (1, 1000));
        zh_cuda_free(block, 1000, -1, null_mut());
        zh_cuda_free(null_mut(), 1000, -1, null_mut());
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!((counted.current_count, counted.total_count), (0, 1));

        assert!(zh_cuda_malloc(-5, -1, null_mut()).is_null());
        assert!(CStr::from_ptr(zh_last_error())
            .to_str()
            .unwrap()
            .contains("negative"));
        // No resource was made current for a device: NULL and a message, never a crash.
        assert!(zh_cuda_malloc(64, 3, null_mut()).is_null());
        let message = CStr::from_ptr(zh_last_error()).to_str().unwrap();
        assert!(message.contains("cuda:3") && message.contains("zh_resource_set_current"));
        // -1 is the host, N a CUDA device; -2 is neither, not the host (issue #40).
        assert!(zh_cuda_malloc(64, -2, null_mut()).is_null());
        let message = CStr::from_ptr(zh_last_error()).to_str().unwrap();
        assert!(message.contains("device: -2 is neither"), "{message}");
        assert_eq!(
            zh_resource_statistics(stats, &mut counted),
            zh_status::ZH_OK
        );
        assert_eq!(
            counted.total_count, 1,
            "nothing drawn from the host resource"
        );

        zh_resource_free(stats);
        zh_resource_free(system);
    }
}
