//! The VAE's CPU training pass (loss and every gradient) for the job's batch: 1,024 beats of
//! 256 samples, on one thread and on every core. The Python bench (`bench/ecg_step.py
//! --cpu`) sets it beside torch's autograd.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zerohop_ecg::vae::{CpuVae, Layout, Param};

fn bench_pass(c: &mut Criterion) {
    let (width, batch, beats) = (256, 1024, 4096);
    let layout = Layout::new(width, 2, 16).unwrap();
    let mut values = vec![0f32; layout.len()];
    for p in Param::ALL {
        let fan = layout.shape(p).iter().skip(1).product::<usize>().max(1) as f32;
        for (k, v) in values[layout.range(p)].iter_mut().enumerate() {
            *v = (k as f32 * 1.713 + p.index() as f32).sin() / fan.sqrt();
        }
    }
    values[layout.range(Param::Alpha)][0] = 1.0;
    let data: Vec<f32> = (0..beats * width)
        .map(|k| (k as f32 * 0.05).sin())
        .collect();
    let rows: Vec<i64> = (0..batch as i64).map(|k| k * 7 % beats as i64).collect();
    let noise: Vec<f32> = (0..batch * 2).map(|k| (k as f32 * 0.77).sin()).collect();
    let mut grads = vec![0f32; layout.len()];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut group = c.benchmark_group("vae training pass, 1024 beats of 256");
    group.throughput(Throughput::Elements(batch as u64));
    for threads in [1, cores] {
        let vae = CpuVae::new(layout.clone(), threads).unwrap();
        group.bench_function(format!("{threads} threads"), |b| {
            b.iter(|| {
                black_box(
                    vae.loss_and_gradients(&values, &data, &rows, &noise, &mut grads)
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pass);
criterion_main!(benches);
