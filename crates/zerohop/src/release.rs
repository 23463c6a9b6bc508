//! Memory another program allocated, given back through the callback that program named: the
//! owner a table or tensor over foreign memory keeps alive (C and C++ frameworks hand over
//! their buffers this way).

use std::ffi::c_void;
use std::fmt;

/// A C function that frees (or gives back to its framework) the memory it was made for.
pub type ReleaseFn = unsafe extern "C" fn(ctx: *mut c_void);

/// Calls `release(ctx)` exactly once, when it is dropped: when the last table, slice or
/// exported tensor over the memory goes, on whichever thread that is.
pub struct ReleaseCallback {
    release: ReleaseFn,
    ctx: *mut c_void,
}

// SAFETY: `ctx` is only ever passed back to `release`; whoever made the callback promised (see
// `ReleaseCallback::new`) that it may run on any thread, which is all Send needs.
unsafe impl Send for ReleaseCallback {}
// SAFETY: shared references expose nothing: neither field is readable from outside.
unsafe impl Sync for ReleaseCallback {}

impl ReleaseCallback {
    /// # Safety
    /// `release(ctx)` must be safe to call once, from any thread, at any later time.
    pub unsafe fn new(release: ReleaseFn, ctx: *mut c_void) -> Self {
        ReleaseCallback { release, ctx }
    }
}

impl Drop for ReleaseCallback {
    fn drop(&mut self) {
        // SAFETY: the contract of `new`; Drop runs once.
        unsafe { (self.release)(self.ctx) }
    }
}

impl fmt::Debug for ReleaseCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseCallback")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    unsafe extern "C" fn count(ctx: *mut c_void) {
        // SAFETY: the tests pass a live AtomicUsize.
        unsafe { &*(ctx as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn the_callback_runs_once_on_the_thread_that_drops_the_last_owner() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        // SAFETY: `count` only touches a static.
        let owner: crate::Owner = std::sync::Arc::new(unsafe {
            ReleaseCallback::new(count, &CALLS as *const AtomicUsize as *mut c_void)
        });
        let other = owner.clone();
        drop(owner);
        assert_eq!(CALLS.load(Ordering::SeqCst), 0);
        std::thread::spawn(move || drop(other)).join().unwrap();
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    }
}
