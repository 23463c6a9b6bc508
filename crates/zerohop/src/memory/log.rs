//! `Log`: one CSV line per allocation and free, for replay and post-mortems.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{MemoryResource, Stream};
use crate::device::Device;
use crate::error::{Error, Result};

/// The CSV header; one row per event follows.
pub const LOG_HEADER: &str = "time_us,thread,action,pointer,size,stream";

#[derive(Debug)]
pub struct LogResource {
    upstream: Arc<dyn MemoryResource>,
    start: Instant,
    out: Mutex<BufWriter<File>>,
}

impl LogResource {
    pub fn new(upstream: Arc<dyn MemoryResource>, path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| Error::Resource {
            what: "log path".into(),
            reason: format!("{}: {e}", path.display()),
        })?;
        let mut out = BufWriter::new(file);
        writeln!(out, "{LOG_HEADER}").map_err(|e| Error::Resource {
            what: "log path".into(),
            reason: format!("{}: {e}", path.display()),
        })?;
        Ok(LogResource {
            upstream,
            start: Instant::now(),
            out: Mutex::new(out),
        })
    }

    fn record(&self, action: &str, ptr: usize, bytes: usize, stream: Stream) {
        let micros = self.start.elapsed().as_micros();
        let thread = format!("{:?}", std::thread::current().id());
        let thread = thread.trim_start_matches("ThreadId(").trim_end_matches(')');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // Logging must never turn a good allocation into a failure; a full disk drops lines.
        let _ = writeln!(
            out,
            "{micros},{thread},{action},0x{ptr:x},{bytes},{}",
            stream.raw()
        );
    }

    /// Writes buffered lines to the file.
    pub fn flush(&self) -> Result<()> {
        self.out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush()
            .map_err(|e| Error::Resource {
                what: "log".into(),
                reason: e.to_string(),
            })
    }
}

impl Drop for LogResource {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl MemoryResource for LogResource {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> Result<NonNull<u8>> {
        match self.upstream.allocate(bytes, align, stream) {
            Ok(ptr) => {
                self.record("allocate", ptr.as_ptr() as usize, bytes, stream);
                Ok(ptr)
            }
            Err(err) => {
                self.record("allocate_failure", 0, bytes, stream);
                Err(err)
            }
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        self.record("free", ptr.as_ptr() as usize, bytes, stream);
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
