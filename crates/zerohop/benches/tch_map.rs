//! A 64-column table mapped to 64 `tch::Tensor`s from Rust (issue 15's third benchmark), side
//! by side with its two parts: the map alone (zerohop's views) and libtorch's `from_blob` alone
//! over the same 64 columns (the floor: what libtorch charges per tensor).
//!
//!     make bench-tch

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use zerohop::soa::{MapOptions, Schema, SoaTable, TensorMap};
use zerohop::DType;

const COLUMNS: usize = 64;

fn table_and_map() -> (SoaTable, TensorMap) {
    let names: Vec<String> = (0..COLUMNS).map(|i| format!("c{i}")).collect();
    let mut schema = Schema::builder();
    for name in &names {
        schema = schema.column(name, DType::F32);
    }
    let table = SoaTable::new(schema.build().unwrap(), 1000).unwrap();
    let mut map = TensorMap::builder();
    for name in &names {
        map = map.tensor(name, &[name.as_str()]);
    }
    (table, map.build().unwrap())
}

fn bench(c: &mut Criterion) {
    let (table, map) = table_and_map();
    let options = MapOptions::default();
    let mut group = c.benchmark_group("64 columns");
    group.bench_function("map + 64 tch::Tensor (zerohop)", |b| {
        b.iter(|| {
            let mapped = map.apply(black_box(&table), options).unwrap();
            let tensors: Vec<_> = mapped.iter().map(|t| t.view.to_tch().unwrap()).collect();
            black_box(tensors)
        })
    });
    group.bench_function("map only (zerohop views)", |b| {
        b.iter(|| black_box(map.apply(black_box(&table), options).unwrap()))
    });
    let views: Vec<_> = map
        .apply(&table, options)
        .unwrap()
        .into_iter()
        .map(|t| t.view)
        .collect();
    group.bench_function("64 × Tensor::from_blob (libtorch floor)", |b| {
        b.iter(|| {
            let tensors: Vec<_> = views
                .iter()
                .map(|v| {
                    // SAFETY: each view is a live column of `table`, which outlives the tensors
                    // (dropped at the end of the iteration).
                    unsafe {
                        tch::Tensor::from_blob(
                            v.data_ptr(),
                            v.shape(),
                            v.strides(),
                            tch::Kind::Float,
                            tch::Device::Cpu,
                        )
                    }
                })
                .collect();
            black_box(tensors)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
