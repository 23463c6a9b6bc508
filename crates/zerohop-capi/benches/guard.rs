//! What the const-input guard costs beside the copy CMS makes of `const` inputs today, on a
//! 1,000-row, 64-column float32 event: `zh_map_apply` with `ZH_MAP_GUARD_CONST` and
//! `zh_tensors_verify_unwritten` after, less `zh_map_apply` without the guard, against the 64
//! columns copied into a fresh tensor-shaped buffer (allocation, copy, free). Goal: ≤ 0.3×.
//! `cargo bench -p zerohop-capi --bench guard` (prints the ratio, then criterion's numbers).

use std::ffi::CString;
use std::hint::black_box;
use std::ptr::{null, null_mut};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use zerohop_capi::*;

const ROWS: usize = 1000;
const COLUMNS: usize = 64;

/// The event (values in every column, so the copy and the fingerprint read real bytes), the
/// spec naming each column, and each column's address.
fn event() -> (*mut zh_table, CString, Vec<*const u8>) {
    let mut schema = null_mut();
    let dtype = CString::new("float32").unwrap();
    // SAFETY: live handles; NUL-terminated names; writes inside each column's rows.
    unsafe {
        assert_eq!(zh_schema_new(&mut schema), zh_status::ZH_OK);
        for i in 0..COLUMNS {
            let name = CString::new(format!("c{i}")).unwrap();
            assert_eq!(
                zh_schema_add_column(schema, name.as_ptr(), dtype.as_ptr()),
                zh_status::ZH_OK
            );
        }
        let mut table = null_mut();
        assert_eq!(
            zh_table_new(schema, ROWS, 0, null(), &mut table),
            zh_status::ZH_OK
        );
        zh_schema_free(schema);
        let spec = (0..COLUMNS)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join("; ");
        let spec = CString::new(spec).unwrap();
        let mut tensors = null_mut();
        assert_eq!(
            zh_table_map(table, spec.as_ptr(), 0, &mut tensors),
            zh_status::ZH_OK
        );
        let mut columns = Vec::with_capacity(COLUMNS);
        for i in 0..COLUMNS {
            let mut v = std::mem::MaybeUninit::uninit();
            assert_eq!(
                zh_tensors_view(tensors, i, v.as_mut_ptr()),
                zh_status::ZH_OK
            );
            let data = v.assume_init().data.cast::<f32>();
            for r in 0..ROWS {
                *data.add(r) = (i * ROWS + r) as f32 * 0.25;
            }
            columns.push(data.cast_const().cast::<u8>());
        }
        zh_tensors_free(tensors);
        (table, spec, columns)
    }
}

fn map(spec: &CString, flags: u32) -> *mut zh_map {
    let mut map = null_mut();
    // SAFETY: a NUL-terminated spec, a writable out-parameter.
    assert_eq!(
        unsafe { zh_map_new(spec.as_ptr(), flags, &mut map) },
        zh_status::ZH_OK
    );
    map
}

/// One event mapped (and, guarded, verified), as a framework does per event.
fn apply(map: *const zh_map, table: *const zh_table, verify: bool) {
    let mut tensors = null_mut();
    // SAFETY: live map and table; the handle is freed once.
    unsafe {
        assert_eq!(zh_map_apply(map, table, &mut tensors), zh_status::ZH_OK);
        if verify {
            assert_eq!(zh_tensors_verify_unwritten(tensors, 0), zh_status::ZH_OK);
        }
        zh_tensors_free(black_box(tensors));
    }
}

/// The copy CMS makes: the columns into a fresh (rows, 64) buffer, which then goes.
fn copy(columns: &[*const u8]) {
    let column_bytes = ROWS * 4;
    let mut out: Vec<u8> = Vec::with_capacity(column_bytes * columns.len());
    for (i, &src) in columns.iter().enumerate() {
        // SAFETY: each source holds `column_bytes` bytes of the live table; the destination
        // has room for every column, one after another.
        unsafe {
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr().add(i * column_bytes), column_bytes)
        };
    }
    // SAFETY: every byte was written above.
    unsafe { out.set_len(column_bytes * columns.len()) };
    black_box(out);
}

/// Median nanoseconds per call of each of `runs`, timed in interleaved rounds so drift and
/// noise fall on all alike.
fn medians(runs: &mut [&mut dyn FnMut()], rounds: usize, calls: usize) -> Vec<f64> {
    let mut times = vec![Vec::with_capacity(rounds); runs.len()];
    for _ in 0..rounds {
        for (run, t) in runs.iter_mut().zip(&mut times) {
            let start = Instant::now();
            for _ in 0..calls {
                run();
            }
            t.push(start.elapsed().as_nanos() as f64 / calls as f64);
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect()
}

fn bench_guard(c: &mut Criterion) {
    let (table, spec, columns) = event();
    let (plain, guarded) = (map(&spec, ZH_MAP_READONLY), map(&spec, ZH_MAP_GUARD_CONST));
    let [bare, watched, copied] = medians(
        &mut [
            &mut || apply(plain, table, false),
            &mut || apply(guarded, table, true),
            &mut || copy(&columns),
        ],
        31,
        200,
    )[..] else {
        unreachable!()
    };
    let guard = watched - bare;
    println!(
        "guard (fingerprint at map + verify) {:.1} µs = {:.1} µs guarded map − {:.1} µs plain \
         map; copy (allocate + memcpy {} columns + free) {:.1} µs; guard / copy = {:.2} (goal \
         ≤ 0.3)",
        guard / 1e3,
        watched / 1e3,
        bare / 1e3,
        COLUMNS,
        copied / 1e3,
        guard / copied
    );
    c.bench_function("zh_map_apply(64 columns, READONLY)", |b| {
        b.iter(|| apply(plain, table, false))
    });
    c.bench_function("zh_map_apply(64 columns, GUARD_CONST)+verify", |b| {
        b.iter(|| apply(guarded, table, true))
    });
    c.bench_function("copy of 64 columns (allocate+memcpy+free)", |b| {
        b.iter(|| copy(&columns))
    });
    // SAFETY: each freed once, after the benches.
    unsafe {
        zh_map_free(plain);
        zh_map_free(guarded);
        zh_table_free(table);
    }
}

criterion_group!(benches, bench_guard);
criterion_main!(benches);
