//! `Tracking`: every live allocation with where it was made, for leak reports.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::Result;

/// One allocation still outstanding.
#[derive(Debug, Clone)]
pub struct LiveAllocation {
    pub address: usize,
    pub bytes: usize,
    pub align: usize,
    pub stream: Stream,
    pub thread: String,
    /// Captured at allocation time when the tracker was built with backtraces on.
    pub backtrace: Option<String>,
}

#[derive(Debug)]
pub struct TrackingResource {
    upstream: Arc<dyn MemoryResource>,
    capture_backtraces: bool,
    live: Mutex<HashMap<usize, LiveAllocation>>,
}

impl TrackingResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, capture_backtraces: bool) -> Self {
        TrackingResource {
            upstream,
            capture_backtraces,
            live: Mutex::new(HashMap::new()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<usize, LiveAllocation>> {
        // A panic while holding the lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The allocations not yet freed, oldest address first.
    pub fn outstanding(&self) -> Vec<LiveAllocation> {
        let mut all: Vec<_> = self.live().values().cloned().collect();
        all.sort_by_key(|a| a.address);
        all
    }

    pub fn outstanding_bytes(&self) -> usize {
        self.live().values().map(|a| a.bytes).sum()
    }

    /// A human-readable leak report (empty string when nothing leaked).
    pub fn report(&self) -> String {
        let leaks = self.outstanding();
        if leaks.is_empty() {
            return String::new();
        }
        let total: usize = leaks.iter().map(|a| a.bytes).sum();
        let mut out = format!(
            "{} allocation(s) outstanding, {total} bytes:\n",
            leaks.len()
        );
        for leak in &leaks {
            let _ = writeln!(
                out,
                "  0x{:x}: {} bytes (align {}, stream {}, thread {})",
                leak.address, leak.bytes, leak.align, leak.stream.0, leak.thread
            );
            if let Some(bt) = &leak.backtrace {
                for line in bt.lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
        out
    }
}

impl MemoryResource for TrackingResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let ptr = self.upstream.allocate(bytes, align, stream)?;
        let thread = std::thread::current();
        let record = LiveAllocation {
            address: ptr.as_ptr() as usize,
            bytes,
            align,
            stream,
            thread: thread
                .name()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{:?}", thread.id())),
            backtrace: self
                .capture_backtraces
                .then(|| Backtrace::force_capture().to_string()),
        };
        self.live().insert(record.address, record);
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        self.live().remove(&(ptr.as_ptr() as usize));
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
