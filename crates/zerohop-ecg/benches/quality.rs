//! Signal quality's cost beside the detection it follows, on the bundled MIT-BIH record 100
//! (30 minutes at 360 Hz): issue #44 asks that quality add at most 10 % to detection. All
//! three run on every core, side by side in one run; read the ratio of the medians (the third case
//! against the first: what the jobs' one call adds to detection).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zerohop_ecg::quality::{assess, segment_judged, WINDOW_S};
use zerohop_ecg::segment::Params;
use zerohop_ecg::{segment_with, Method};

fn bench_quality(c: &mut Criterion) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../apps/ecg/python/zerohop_ecg/data/mitdb100");
    let record = zerohop_ecg::wfdb::read_record(&path, &[]).expect("record 100 is bundled");
    let signal = record
        .table
        .column::<f32>("MLII")
        .expect("record 100 has MLII");
    let rate = 360.0;
    let params = Params::for_rate(rate).expect("360 Hz is a valid rate");
    let peaks: Vec<i64> = segment_with(signal, &params, Method::Adaptive)
        .and_then(|s| Ok(s.r_peaks.to_vec::<i64>()?))
        .expect("record 100 segments");
    let mut group = c.benchmark_group("record 100 (MLII, 650,000 samples)");
    group.throughput(Throughput::Elements(signal.len() as u64));
    group.bench_function("detection (adaptive)", |b| {
        b.iter(|| black_box(segment_with(signal, &params, Method::Adaptive).unwrap()))
    });
    group.bench_function("quality (10 s windows)", |b| {
        b.iter(|| black_box(assess(signal, rate, &peaks, WINDOW_S).unwrap()))
    });
    // The jobs' call: the signal's rules beside the detection, the beats' rule after it.
    group.bench_function("detection and quality in one go", |b| {
        b.iter(|| black_box(segment_judged(signal, &params, Method::Adaptive, WINDOW_S).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench_quality);
criterion_main!(benches);
