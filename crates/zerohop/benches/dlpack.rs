//! Rust-side DLPack cost: export a view, import a managed tensor, and the full round trip.
//! Goal (issue 2): export under 1 µs.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use zerohop::dlpack::{export_legacy, export_versioned, import_versioned, ExportOptions};
use zerohop::TensorView;

fn tensor(ndim: usize) -> TensorView {
    let shape: Vec<i64> = (0..ndim).map(|i| if i == 0 { 1024 } else { 2 }).collect();
    let n: i64 = shape.iter().product();
    TensorView::from_slice(&vec![0f32; n as usize], &shape).unwrap()
}

fn bench_dlpack(c: &mut Criterion) {
    for ndim in [1usize, 4] {
        let view = tensor(ndim);
        c.bench_function(&format!("export_versioned+delete/{ndim}d"), |b| {
            b.iter(|| {
                let m = export_versioned(black_box(&view), ExportOptions::default()).unwrap();
                // SAFETY: fresh export, deleted once.
                unsafe { (m.as_ref().deleter.unwrap())(m.as_ptr()) };
            })
        });
        c.bench_function(&format!("export_legacy+delete/{ndim}d"), |b| {
            b.iter(|| {
                let m = export_legacy(black_box(&view)).unwrap();
                // SAFETY: fresh export, deleted once.
                unsafe { (m.as_ref().deleter.unwrap())(m.as_ptr()) };
            })
        });
        c.bench_function(&format!("export+import+drop/{ndim}d"), |b| {
            b.iter(|| {
                let m = export_versioned(black_box(&view), ExportOptions::default()).unwrap();
                // SAFETY: ownership of the fresh export passes to the importer.
                let imported = unsafe { import_versioned(m) }.unwrap();
                black_box(imported.view.data_ptr());
            })
        });
    }
}

#[path = "shared/quick.rs"]
mod quick;

criterion_group! {
    name = benches;
    config = quick::config();
    targets = bench_dlpack
}
criterion_main!(benches);
