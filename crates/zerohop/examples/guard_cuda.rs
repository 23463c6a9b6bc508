//! The const-input guard on CUDA memory (issue #45): the device fingerprint kernel gives the
//! fingerprint the host computes from the same bytes (row windows off the word grid too), a
//! one-byte write anywhere is caught and its column named, and the guard's cost (fingerprint at
//! map + verify, each waited for) beside the device-to-device copy CMS makes of const inputs
//! today, on a 1,000-row, 64-column float32 event. Exits nonzero when a check fails.
//! Built here (`cargo build --release -p zerohop --features cuda --example guard_cuda`),
//! carried to the GPU machine as a binary, run there.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::result;
use zerohop::cuda::{self, CudaDeviceResource, LEGACY_STREAM};
use zerohop::guard::WriteGuard;
use zerohop::soa::{MapOptions, Schema, SoaTable, Table, TensorMap};
use zerohop::{DType, MemoryResource};

const ROWS: usize = 1000;
const COLUMNS: usize = 64;

fn check(ok: bool, what: &str, failures: &mut usize) {
    println!("{} {what}", if ok { "ok  " } else { "FAIL" });
    if !ok {
        *failures += 1;
    }
}

fn guard(table: &Table, spec: &str) -> WriteGuard {
    let map = TensorMap::parse(spec).expect("spec");
    let tensors = table.map(&map, MapOptions::default(), None).expect("map");
    WriteGuard::over_mapped(table, &tensors, LEGACY_STREAM).expect("guard")
}

/// Sets the byte at device address `at` to `value` and waits.
fn poke(at: usize, value: u8) {
    // SAFETY: `at` is a byte of a live device table; the stream is the legacy one.
    unsafe {
        result::memset_d8_async(at as u64, value, 1, std::ptr::null_mut())
            .and_then(|()| result::stream::synchronize(std::ptr::null_mut()))
    }
    .expect("memset");
}

fn median_us(mut run: impl FnMut(), calls: usize) -> f64 {
    for _ in 0..calls / 10 {
        run();
    }
    let mut times: Vec<f64> = (0..calls)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[calls / 2]
}

fn main() {
    if !cuda::is_available() {
        eprintln!("no CUDA device: nothing to check");
        std::process::exit(2);
    }
    let mut failures = 0;
    let schema = (0..COLUMNS)
        .fold(Schema::builder(), |s, i| {
            s.column(&format!("c{i}"), DType::F32)
        })
        .build()
        .expect("schema");
    let mut host = SoaTable::new(schema, ROWS).expect("host table");
    for i in 0..COLUMNS {
        let column = host.column_mut::<f32>(&format!("c{i}")).expect("column");
        for (r, v) in column.iter_mut().enumerate() {
            *v = (i * ROWS + r) as f32 * 0.37 - 11.0;
        }
    }
    let resource: Arc<dyn MemoryResource> = Arc::new(CudaDeviceResource::new(0).expect("cuda:0"));
    let device = host
        .copy_to(resource, LEGACY_STREAM)
        .expect("to the device");
    cuda::synchronize(0, LEGACY_STREAM).expect("sync");
    let spec = (0..COLUMNS)
        .map(|i| format!("c{i}"))
        .collect::<Vec<_>>()
        .join("; ");

    // The kernel against the host code: whole columns, and a window starting 4 bytes into a
    // word and ending inside one.
    for (start, end) in [(0, ROWS), (1, ROWS - 1), (3, 4)] {
        let on_host = Table::from(host.slice_rows(start, end).expect("rows"));
        let on_device = Table::from(device.slice_rows(start, end).expect("rows"));
        let (h, d) = (guard(&on_host, &spec), guard(&on_device, &spec));
        check(
            h.fingerprints() == d.fingerprints(),
            &format!("rows {start}..{end}: device fingerprints equal the host's"),
            &mut failures,
        );
    }

    // One byte written anywhere is caught and named; put back, the guard is content.
    let table = Table::from(device.slice_rows(1, ROWS - 1).expect("rows"));
    let watch = guard(&table, &spec);
    check(
        watch.verify(LEGACY_STREAM).is_ok(),
        "untouched: verified",
        &mut failures,
    );
    let soa = table.as_soa().expect("soa");
    let base = soa.buffer().as_ptr() as usize;
    // Bytes of the window's rows 1..ROWS-1: the first, one inside, the last.
    for (column, byte) in [(0, 0), (37, 2001), (63, (ROWS - 2) * 4 - 1)] {
        let at = base + soa.layout().column(column).offset + 4 + byte;
        let mut kept = [0u8];
        // SAFETY: a byte of the live device table, read into a host byte.
        unsafe { result::memcpy_dtoh_sync(&mut kept, at as u64) }.expect("read");
        poke(at, kept[0] ^ 0x10);
        let written = watch.written(LEGACY_STREAM).expect("written");
        let name = format!("c{column}");
        check(
            written == [name.as_str()],
            &format!("byte {byte} of {name} written: {written:?}"),
            &mut failures,
        );
        let says = watch.verify(LEGACY_STREAM).map_err(|e| e.to_string());
        check(
            says.as_ref()
                .is_err_and(|e| e.contains(&format!("column \"{name}\" was written"))),
            &format!("verify says {says:?}"),
            &mut failures,
        );
        poke(at, kept[0]);
        check(
            watch.verify(LEGACY_STREAM).is_ok(),
            "put back: verified",
            &mut failures,
        );
    }

    // Cost: the guard's two fingerprints, each waited for, against CMS's copy of the inputs
    // (one device-to-device copy of the event's buffer, waited for; CMS's caching allocator
    // makes the allocation nearly free, so the kept block is the fair baseline).
    let whole = Table::from(device.clone());
    let map = TensorMap::parse(&spec).expect("spec");
    let tensors = whole.map(&map, MapOptions::default(), None).expect("map");
    let guarded = median_us(
        || {
            let g = WriteGuard::over_mapped(&whole, &tensors, LEGACY_STREAM).expect("guard");
            g.verify(LEGACY_STREAM).expect("verify");
        },
        1000,
    );
    let bytes = device.layout().total_bytes;
    let src = device.buffer().as_ptr() as u64;
    let stream = std::ptr::null_mut();
    // SAFETY: a block of `bytes` for the copies below, freed at the end.
    let kept = unsafe { result::malloc_sync(bytes) }.expect("alloc");
    let copied = median_us(
        // SAFETY: two live blocks of `bytes` on the legacy stream.
        || unsafe {
            result::memcpy_dtod_async(kept, src, bytes, stream)
                .and_then(|()| result::stream::synchronize(stream))
                .expect("copy");
        },
        1000,
    );
    let allocated = median_us(
        // SAFETY: a fresh block of `bytes` on the legacy stream, freed on it after the copy.
        || unsafe {
            let dst = result::malloc_async(stream, bytes).expect("alloc");
            result::memcpy_dtod_async(dst, src, bytes, stream).expect("copy");
            result::free_async(dst, stream).expect("free");
            result::stream::synchronize(stream).expect("sync");
        },
        1000,
    );
    // SAFETY: allocated above, no longer used.
    unsafe { result::free_sync(kept) }.expect("free");
    println!(
        "| event | guard: fingerprint + verify (µs) | copy: D2D into a kept block (µs) | \
         guard / copy | copy with cuMemAllocAsync + free (µs) |\n|---|---|---|---|---|\n\
         | {ROWS} rows × {COLUMNS} float32 ({bytes} bytes) | {guarded:.1} | {copied:.1} | \
         {:.2} | {allocated:.1} |",
        guarded / copied
    );
    if failures > 0 {
        eprintln!("{failures} check(s) failed");
        std::process::exit(1);
    }
}
