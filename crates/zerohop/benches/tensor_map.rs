//! The per-event cost of a tensor map: 64 single-column groups (the C++ and tch benches'
//! table), and the CMS-like track map (a 3-column group, a vector, a matrix).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use zerohop::soa::{MapOptions, Schema, SoaTable, TensorMap};
use zerohop::DType;

// The examples' track table (its argument helper goes unused here).
#[allow(dead_code)]
#[path = "../examples/shared/tracks.rs"]
mod tracks;

fn sixty_four_columns(rows: usize) -> (SoaTable, TensorMap) {
    let mut schema = Schema::builder();
    let mut map = TensorMap::builder();
    for c in 0..64 {
        let name = format!("c{c}");
        schema = schema.column(&name, DType::F32);
        map = map.tensor(&name, &[name.as_str()]);
    }
    let table = SoaTable::new(schema.build().unwrap(), rows).unwrap();
    (table, map.build().unwrap())
}

fn bench_tensor_map(c: &mut Criterion) {
    let mut group = c.benchmark_group("tensor map apply, 1000 rows");
    for (name, (table, map)) in [
        ("64 single columns", sixty_four_columns(1000)),
        (
            "tracks: kin, position, covariance",
            (
                tracks::track_table(1000).unwrap(),
                tracks::input_map().unwrap(),
            ),
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| black_box(map.apply(black_box(&table), MapOptions::default()).unwrap()))
        });
    }
    group.finish();
}

#[path = "shared/quick.rs"]
mod quick;

criterion_group! {
    name = benches;
    config = quick::config();
    targets = bench_tensor_map
}
criterion_main!(benches);
