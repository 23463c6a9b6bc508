//! Fingerprints of device memory: `fingerprint.ptx` run on the caller's stream, the host
//! waiting for the result (a verdict needs it).

use std::ffi::{c_void, CString};
use std::sync::Mutex;

use cudarc::driver::{result, sys};

use super::fingerprint::{words_spanned, Fingerprint};
use super::Range;
use crate::cuda::{bind, driver_error, stream_handle};
use crate::error::Result;
use crate::memory::Stream;

const SOURCE: &str = include_str!("fingerprint.ptx");
const THREADS: u32 = 256;
/// Words one thread sums before another block is worth its launch.
const WORDS_PER_THREAD: u64 = 4;
const MAX_BLOCKS_PER_RANGE: u64 = 64;
const MAX_GRID_Y: usize = 65_535;

/// The kernel's handle per device (as an integer: a driver handle, valid in the device's
/// primary context for the life of the process; the module is never unloaded).
static LOADED: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());

fn kernel(device: i32) -> Result<sys::CUfunction> {
    let mut loaded = lock(&LOADED);
    if let Some(&(_, f)) = loaded.iter().find(|(d, _)| *d == device) {
        return Ok(f as sys::CUfunction);
    }
    let image = CString::new(SOURCE).map_err(|_| driver_error_text("the PTX has a NUL"))?;
    // SAFETY: a NUL-terminated PTX image; the caller bound the device's context.
    let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
        .map_err(|e| driver_error("guard kernel load", e))?;
    let name = CString::new("zh_guard_fingerprint").unwrap_or_default();
    // SAFETY: `module` was just loaded and is never unloaded.
    let f = unsafe { result::module::get_function(module, name) }
        .map_err(|e| driver_error("guard kernel lookup", e))?;
    loaded.push((device, f as usize));
    Ok(f)
}

fn driver_error_text(reason: &str) -> crate::Error {
    crate::Error::InvalidArgument {
        what: "guard kernel".into(),
        reason: reason.into(),
    }
}

/// The fingerprints of `columns` columns whose device ranges are `ranges`, after the work
/// queued on `stream` so far.
pub(super) fn fingerprints(
    device: i32,
    stream: Stream,
    ranges: &[Range],
    columns: usize,
) -> Result<Vec<Fingerprint>> {
    let mut prints = vec![Fingerprint::default(); columns];
    if ranges.is_empty() {
        return Ok(prints);
    }
    bind(device)?;
    let f = kernel(device)?;
    let cu = stream_handle(stream);
    let (block, size) = scratch(device, columns * 16 + ranges.len() * 48)?;
    let outcome = run(f, cu, block, ranges, &mut prints);
    // Back for the next guard once the stream is done with it (`run` waited for it); after a
    // failure the context is suspect, and the block is let go rather than reused.
    if outcome.is_ok() {
        lock(&SCRATCH).push((device, block, size));
    }
    outcome.map(|()| prints)
}

/// Device blocks for the range table and the results, kept for reuse: an allocation (and,
/// from a stream-ordered pool that gives memory back at every synchronisation, a mapping)
/// per fingerprint cost more than the fingerprint of a whole event.
static SCRATCH: Mutex<Vec<(i32, sys::CUdeviceptr, usize)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A block of at least `bytes` on `device` (whose context is current): a kept one, or new.
fn scratch(device: i32, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
    let mut kept = lock(&SCRATCH);
    if let Some(i) = kept.iter().position(|&(d, _, n)| d == device && n >= bytes) {
        let (_, block, size) = kept.swap_remove(i);
        return Ok((block, size));
    }
    drop(kept);
    let size = bytes.next_power_of_two().max(4096);
    // SAFETY: a plain allocation in the current context, kept for the process.
    let block =
        unsafe { result::malloc_sync(size) }.map_err(|e| driver_error("guard scratch", e))?;
    Ok((block, size))
}

fn run(
    f: sys::CUfunction,
    cu: sys::CUstream,
    block: sys::CUdeviceptr,
    ranges: &[Range],
    prints: &mut [Fingerprint],
) -> Result<()> {
    let results = block;
    let table = block + (prints.len() * 16) as u64;
    let mut described = Vec::with_capacity(ranges.len() * 6);
    let mut most = 0u64;
    for r in ranges {
        let words = words_spanned(r.addr, r.len);
        let head = r.addr % 8;
        let end = (r.addr + r.len) % 8;
        described.extend_from_slice(&[
            (r.addr - head) as u64,
            words,
            r.first_word,
            u64::MAX << (8 * head),
            if end == 0 {
                u64::MAX
            } else {
                u64::MAX >> (8 * (8 - end))
            },
            results + (r.column * 16) as u64,
        ]);
        most = most.max(words);
    }
    let blocks = most
        .div_ceil(u64::from(THREADS) * WORDS_PER_THREAD)
        .clamp(1, MAX_BLOCKS_PER_RANGE) as u32;
    let grid_y = ranges.len().min(MAX_GRID_Y) as u32;
    let mut table_param = table;
    let mut count = ranges.len() as u32;
    let mut params = [
        &mut table_param as *mut u64 as *mut c_void,
        &mut count as *mut u32 as *mut c_void,
    ];
    let mut words = vec![0u64; prints.len() * 2];
    // SAFETY: `block` holds the results then the range table, sizes as allocated; the copies
    // read and write host slices that outlive the synchronisation below; the kernel reads
    // only the ranges' words, inside memory the guard's views keep alive.
    unsafe {
        result::memset_d8_async(results, 0, prints.len() * 16, cu)
            .and_then(|()| result::memcpy_htod_async(table, &described, cu))
            .and_then(|()| {
                result::launch_kernel(f, (blocks, grid_y, 1), (THREADS, 1, 1), 0, cu, &mut params)
            })
            .and_then(|()| result::memcpy_dtoh_async(&mut words, results, cu))
            .and_then(|()| result::stream::synchronize(cu))
    }
    .map_err(|e| driver_error("guard fingerprint", e))?;
    for (print, pair) in prints.iter_mut().zip(words.chunks_exact(2)) {
        *print = Fingerprint {
            sum: pair[0],
            mix: pair[1],
        };
    }
    Ok(())
}
