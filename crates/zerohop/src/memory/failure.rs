//! `FailureCallback`: when an allocation fails, ask a callback to free memory and retry.

use std::cell::Cell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// Called with the size of a request `upstream` refused; frees what it can (drops caches,
/// spills) and returns true to have the request tried once more, false to give up.
pub type FailureCallback = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// When `upstream` refuses an allocation, runs the callback, then retries once if it asks.
///
/// An allocation the callback itself makes through this resource (on the same thread) that
/// fails is refused plainly, without calling the callback again; a callback that panics
/// counts as giving up. Out-of-memory errors say which of these happened.
pub struct FailureCallbackResource {
    upstream: Arc<dyn MemoryResource>,
    callback: FailureCallback,
}

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Clears the thread's in-callback mark however the callback ends.
struct Running;

impl Running {
    fn start() -> Option<Running> {
        (!IN_CALLBACK.with(|c| c.replace(true))).then_some(Running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        IN_CALLBACK.with(|c| c.set(false));
    }
}

fn noted(err: Error, note: &str) -> Error {
    match err {
        Error::OutOfMemory {
            requested,
            device,
            reason,
        } => Error::OutOfMemory {
            requested,
            device,
            reason: format!("{reason} ({note})"),
        },
        other => other,
    }
}

impl FailureCallbackResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, callback: FailureCallback) -> Self {
        FailureCallbackResource { upstream, callback }
    }
}

impl fmt::Debug for FailureCallbackResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureCallbackResource")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl MemoryResource for FailureCallbackResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let err = match self.upstream.allocate(bytes, align, stream) {
            Ok(ptr) => return Ok(ptr),
            Err(err) => err,
        };
        let Some(running) = Running::start() else {
            return Err(err); // the callback's own allocation: no second callback
        };
        let asked = catch_unwind(AssertUnwindSafe(|| (self.callback)(bytes)));
        drop(running);
        match asked {
            Ok(true) => self
                .upstream
                .allocate(bytes, align, stream)
                .map_err(|again| noted(again, "refused again after the failure callback")),
            Ok(false) => Err(noted(err, "the failure callback gave up")),
            Err(_) => Err(noted(err, "the failure callback panicked")),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.upstream.deallocate(ptr, bytes, align, stream) };
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
