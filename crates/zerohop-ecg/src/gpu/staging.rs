//! File bytes into device memory without a pageable bounce: several threads each read chunks
//! of the file into their own pinned buffers (two per thread, so a read overlaps the previous
//! chunk's copy) and copy them on their own stream. The pinned buffers and streams are made
//! once per device and kept, so only the first read of a process pays for pinning.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};
use zerohop::cuda::bind;

use super::cuda_error;
use crate::error::{invalid, EcgError, Result};

/// Bytes per pinned buffer.
const CHUNK: usize = 4 << 20;
/// Reading threads, each with two buffers: reading from the page cache is the slow side
/// (a few GB/s per thread), so it gets the parallelism. `ZEROHOP_CSV_READERS` overrides it
/// (read when a device's staging is first made) for storage that wants more or fewer.
const LANES: usize = 6;
const LANES_VARIABLE: &str = "ZEROHOP_CSV_READERS";
const MAX_LANES: usize = 64;

/// The number of reading threads `value` (the variable's text, if set) asks for.
fn lanes_from(value: Option<&str>) -> Result<usize> {
    let Some(text) = value else {
        return Ok(LANES);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_LANES).contains(&n) => Ok(n),
        _ => Err(invalid(
            LANES_VARIABLE,
            format!("{text:?}: expected a whole number of reading threads from 1 to {MAX_LANES}"),
        )),
    }
}

/// One reading thread's resources (raw driver handles kept as integers, which are `Send`).
struct Lane {
    buffers: [usize; 2],
    events: [usize; 2],
    stream: usize,
}

struct Staging {
    device: i32,
    lanes: Vec<Mutex<Lane>>,
}

static STAGING: Mutex<Vec<Arc<Staging>>> = Mutex::new(Vec::new());

fn staging(device: i32) -> Result<Arc<Staging>> {
    let mut all = STAGING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = all.iter().find(|s| s.device == device) {
        return Ok(s.clone());
    }
    let count = lanes_from(std::env::var(LANES_VARIABLE).ok().as_deref())?;
    bind(device)?;
    let mut lanes = Vec::with_capacity(count);
    for _ in 0..count {
        let mut lane = Lane {
            buffers: [0; 2],
            events: [0; 2],
            stream: 0,
        };
        for b in 0..2 {
            // SAFETY: allocates page-locked host memory in the current context; it is kept
            // for the life of the process (the staging is never dropped).
            lane.buffers[b] = unsafe { result::malloc_host(CHUNK, 0) }
                .map_err(|e| cuda_error("pinned allocation", e))?
                as usize;
            lane.events[b] = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| cuda_error("event", e))? as usize;
        }
        lane.stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| cuda_error("stream", e))? as usize;
        lanes.push(Mutex::new(lane));
    }
    let s = Arc::new(Staging { device, lanes });
    all.push(s.clone());
    Ok(s)
}

/// Copies `len` bytes of `file` from `offset` on to device address `dst` on `device`; returns
/// once they are there. `path` names the file in errors.
pub(super) fn upload_file(
    file: &File,
    path: &Path,
    offset: u64,
    len: usize,
    device: i32,
    dst: u64,
) -> Result<()> {
    let staging = staging(device)?;
    let chunks = len.div_ceil(CHUNK);
    let lanes = staging.lanes.len().min(chunks);
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..lanes)
            .map(|t| {
                let staging = &staging;
                scope.spawn(move || {
                    let lane = staging.lanes[t].lock().unwrap_or_else(|p| p.into_inner());
                    bind(device)?;
                    let copied = copy_lane_chunks(&lane, file, path, offset, len, t, lanes, dst);
                    // Whatever happened, no copy may still read the buffers after this.
                    // SAFETY: the lane's own stream, created in this context.
                    let waited = unsafe { result::stream::synchronize(lane.stream as _) }
                        .map_err(|e| cuda_error("stream synchronize", e));
                    copied.and(waited)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(cuda_error("file upload", "a reading thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Lane `t` of `lanes`: chunks t, t + lanes, … read into the lane's buffers in turn and copied.
#[allow(clippy::too_many_arguments)]
fn copy_lane_chunks(
    lane: &Lane,
    file: &File,
    path: &Path,
    offset: u64,
    len: usize,
    t: usize,
    lanes: usize,
    dst: u64,
) -> Result<()> {
    for (turn, chunk) in (t..len.div_ceil(CHUNK)).step_by(lanes).enumerate() {
        let b = turn % 2;
        let at = chunk * CHUNK;
        let n = CHUNK.min(len - at);
        if turn >= 2 {
            // SAFETY: an event of this lane, recorded after the copy that last read buffer b.
            unsafe { result::event::synchronize(lane.events[b] as _) }
                .map_err(|e| cuda_error("event synchronize", e))?;
        }
        // SAFETY: buffer b is CHUNK pinned bytes that no copy is reading any more (waited for
        // above, or never used), and only this lane touches it (the lane's lock is held).
        let host = unsafe { std::slice::from_raw_parts_mut(lane.buffers[b] as *mut u8, n) };
        file.read_exact_at(host, offset + at as u64)
            .map_err(|source| EcgError::Io {
                path: path.to_owned(),
                source,
            })?;
        // SAFETY: `dst + at .. + n` lies in the caller's device buffer of `len` bytes; the
        // pinned source stays untouched until the event recorded next has passed.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst + at as u64,
                host.as_ptr() as *const std::ffi::c_void,
                n,
                lane.stream as _,
            )
            .result()
            .map_err(|e| cuda_error("host→device copy", e))?;
            result::event::record(lane.events[b] as _, lane.stream as _)
                .map_err(|e| cuda_error("event record", e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_threads_default_and_override() {
        assert_eq!(lanes_from(None).unwrap(), LANES);
        assert_eq!(lanes_from(Some("10")).unwrap(), 10);
        assert_eq!(lanes_from(Some(" 1 ")).unwrap(), 1);
        for bad in ["0", "65", "-3", "six", ""] {
            let message = lanes_from(Some(bad)).unwrap_err().to_string();
            assert!(
                message.contains(LANES_VARIABLE) && message.contains(&format!("{bad:?}")),
                "{message}"
            );
        }
    }
}
