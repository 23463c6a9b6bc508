//! `Tracking`: every live allocation with where it was made, for leak reports.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::Result;
use crate::value::Value;

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
    /// Where the embedding program asked for the memory (the Python lines, for the Python
    /// package), captured with the backtrace through [`set_allocation_context`].
    pub context: Option<String>,
}

/// Describes, at allocation time, where the program above Rust asked for memory; `None` when
/// it cannot tell (for example a thread that is not running its code).
pub type AllocationContext = fn() -> Option<String>;

static CONTEXT: OnceLock<AllocationContext> = OnceLock::new();

/// Trackers alive that record contexts (built with backtraces on).
static RECORDING: AtomicUsize = AtomicUsize::new(0);

/// Whether any live tracker records allocation contexts: a binding layer that must leave its
/// language's runtime before allocating captures the context first only when one does.
pub fn contexts_recorded() -> bool {
    RECORDING.load(Ordering::Relaxed) > 0
}

/// Installs the process-wide context source that trackers with backtraces on record next to
/// the Rust backtrace; a Rust backtrace alone names the binding layer, not the caller's line.
/// The first call wins; returns false if a source was already installed.
pub fn set_allocation_context(source: AllocationContext) -> bool {
    CONTEXT.set(source).is_ok()
}

/// A free the tracker refused to pass on: a pointer it never handed out (or already took
/// back: a double free), or a size that differs from the allocation's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidFree {
    pub address: usize,
    pub bytes: usize,
    /// The size the allocation really had (None: not a live allocation).
    pub allocated_bytes: Option<usize>,
    pub thread: String,
}

/// Text or nothing, as a record holds it.
fn text(s: &Option<String>) -> Value {
    s.as_deref().map_or(Value::None, Value::str)
}

impl LiveAllocation {
    /// Its fields by name, as every face reports a leak (`context` as "python_stack").
    pub fn record(&self) -> Value {
        Value::Dict(vec![
            ("address".into(), Value::count(self.address)),
            ("bytes".into(), Value::count(self.bytes)),
            ("align".into(), Value::count(self.align)),
            ("stream".into(), Value::count(self.stream.raw())),
            ("thread".into(), Value::str(self.thread.as_str())),
            ("backtrace".into(), text(&self.backtrace)),
            ("python_stack".into(), text(&self.context)),
        ])
    }
}

impl InvalidFree {
    /// Its fields by name, as every face reports a refused free.
    pub fn record(&self) -> Value {
        Value::Dict(vec![
            ("address".into(), Value::count(self.address)),
            ("bytes".into(), Value::count(self.bytes)),
            (
                "allocated_bytes".into(),
                self.allocated_bytes.map_or(Value::None, Value::count),
            ),
            ("thread".into(), Value::str(self.thread.as_str())),
        ])
    }
}

#[derive(Debug)]
pub struct TrackingResource {
    upstream: Arc<dyn MemoryResource>,
    capture_backtraces: bool,
    live: Mutex<HashMap<usize, LiveAllocation>>,
    invalid: Mutex<Vec<InvalidFree>>,
}

fn thread_name() -> String {
    let thread = std::thread::current();
    thread
        .name()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:?}", thread.id()))
}

impl TrackingResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, capture_backtraces: bool) -> Self {
        if capture_backtraces {
            RECORDING.fetch_add(1, Ordering::Relaxed);
        }
        TrackingResource {
            upstream,
            capture_backtraces,
            live: Mutex::new(HashMap::new()),
            invalid: Mutex::new(Vec::new()),
        }
    }

    fn record_invalid(&self, address: usize, bytes: usize, allocated_bytes: Option<usize>) {
        self.invalid
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(InvalidFree {
                address,
                bytes,
                allocated_bytes,
                thread: thread_name(),
            });
    }

    /// Frees that were refused (double frees, unknown pointers, wrong sizes), in order.
    pub fn invalid_frees(&self) -> Vec<InvalidFree> {
        self.invalid
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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

    /// A human-readable report of leaks and refused frees (empty when there are none).
    pub fn report(&self) -> String {
        let leaks = self.outstanding();
        let invalid = self.invalid_frees();
        let mut out = String::new();
        for bad in &invalid {
            let _ = match bad.allocated_bytes {
                None => writeln!(
                    out,
                    "invalid free of 0x{:x} ({} bytes, thread {}): not a live allocation \
                     (a double free or a foreign pointer); not passed on",
                    bad.address, bad.bytes, bad.thread
                ),
                Some(real) => writeln!(
                    out,
                    "free of 0x{:x} claimed {} bytes but {real} were allocated (thread {}); \
                     freed with the real size",
                    bad.address, bad.bytes, bad.thread
                ),
            };
        }
        if leaks.is_empty() {
            return out;
        }
        let total: usize = leaks.iter().map(|a| a.bytes).sum();
        let _ = writeln!(
            out,
            "{} allocation(s) outstanding, {total} bytes:",
            leaks.len()
        );
        for leak in &leaks {
            let _ = writeln!(
                out,
                "  0x{:x}: {} bytes (align {}, stream {}, thread {})",
                leak.address,
                leak.bytes,
                leak.align,
                leak.stream.raw(),
                leak.thread
            );
            if let Some(context) = &leak.context {
                let _ = writeln!(out, "    requested at:");
                for line in context.lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
            if let Some(bt) = &leak.backtrace {
                let _ = writeln!(out, "    Rust backtrace:");
                for line in bt.lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
        out
    }
}

impl Drop for TrackingResource {
    fn drop(&mut self) {
        if self.capture_backtraces {
            RECORDING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl MemoryResource for TrackingResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        let ptr = self.upstream.allocate(bytes, align, stream)?;
        let record = LiveAllocation {
            address: ptr.as_ptr() as usize,
            bytes,
            align,
            stream,
            thread: thread_name(),
            backtrace: self
                .capture_backtraces
                .then(|| Backtrace::force_capture().to_string()),
            context: if self.capture_backtraces {
                CONTEXT.get().and_then(|source| source())
            } else {
                None
            },
        };
        self.live().insert(record.address, record);
        Ok(ptr)
    }

    /// Frees only what this tracker handed out, once, with its real size and alignment: a
    /// double free or a foreign pointer is recorded (see `invalid_frees`) and dropped rather
    /// than passed on to corrupt the pool below.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        let address = ptr.as_ptr() as usize;
        let Some(record) = self.live().remove(&address) else {
            self.record_invalid(address, bytes, None);
            return;
        };
        if record.bytes != bytes || record.align != align {
            self.record_invalid(address, bytes, Some(record.bytes));
        }
        // SAFETY: `ptr` is a live allocation of this tracker, freed once with the size and
        // alignment it was allocated with.
        unsafe {
            self.upstream
                .deallocate(ptr, record.bytes, record.align, stream)
        };
    }

    fn device(&self) -> Device {
        self.upstream.device()
    }

    fn order_reuse(&self, freed_on: Stream, next: Stream) -> Result<()> {
        self.upstream.order_reuse(freed_on, next)
    }
}
