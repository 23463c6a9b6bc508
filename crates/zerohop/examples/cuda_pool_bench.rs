//! Device allocation latency on a GPU machine: zerohop's Pool over cuMemAlloc against
//! cuMemAlloc/cuMemFree itself, per alloc+free pair (median of repeats), from Rust (no
//! Python call overhead). Built here, carried to the GPU machine, run by scripts/gpu-check.sh.
//! Goal (issue 8): the pool ≥ 1000× faster than cudaMalloc/cudaFree. Beside it, the growable
//! pool (the same Pool over one reserved address range, `cuda_virtual`): goal (issue 42)
//! ≤ 1.2× the fixed pool's time per pair.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use zerohop::cuda::{self, CudaDeviceResource};
use zerohop::memory::{MemoryResource, PoolConfig, PoolResource};
use zerohop::Stream;

fn median_ns(resource: &dyn MemoryResource, bytes: usize, pairs: usize) -> f64 {
    let once = || {
        let p = resource
            .allocate(bytes, 256, Stream::LEGACY)
            .expect("allocate");
        black_box(p);
        // SAFETY: freed once with its allocation arguments.
        unsafe { resource.deallocate(p, bytes, 256, Stream::LEGACY) };
    };
    for _ in 0..pairs.min(100) {
        once();
    }
    let mut runs: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..pairs {
                once();
            }
            t.elapsed().as_nanos() as f64 / pairs as f64
        })
        .collect();
    runs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    runs[3]
}

fn main() {
    if !cuda::is_available() {
        eprintln!("no CUDA device: nothing to measure");
        std::process::exit(2);
    }
    let device: Arc<dyn MemoryResource> = Arc::new(CudaDeviceResource::new(0).expect("cuda:0"));
    let pool = PoolResource::new(device.clone(), PoolConfig::default());
    let reserved = cuda::cuda_virtual(0, Some(16 << 30)).expect("virtual address range");
    let growable = PoolResource::new(Arc::new(reserved), PoolConfig::default());
    println!(
        "| alloc+free (Rust calls) | zerohop Pool (ns) | growable Pool (ns) | growable / fixed \
         | cuMemAlloc+cuMemFree (ns) | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for (bytes, label) in [
        (256usize, "256 B"),
        (1 << 20, "1 MiB"),
        (64 << 20, "64 MiB"),
    ] {
        let pooled = median_ns(&pool, bytes, 100_000);
        let grown = median_ns(&growable, bytes, 100_000);
        let raw = median_ns(&*device, bytes, 200);
        println!(
            "| {label} | {pooled:.0} | {grown:.0} | {:.2}× | {raw:.0} | {:.0}× |",
            grown / pooled,
            raw / pooled
        );
    }
}
