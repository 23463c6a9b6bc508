//! Allocation latency: the platform malloc vs zerohop's System, Pool and Arena resources.
//!
//! Prints a Markdown table (and writes it to $ZEROHOP_BENCH_OUT when set):
//! * alloc+free pair latency for 64 B … 64 MiB, median of repeats;
//! * a random mixed workload (log-uniform sizes 64 B … 1 MiB, random free order, up to 1000
//!   live blocks), on 1 thread and on 4 threads sharing one resource.
//!
//! Memory is not touched: this measures the allocators, not page faults.
//! Goals (issue 4): Pool ≥ 10× faster than System on the mixed workload; a small pair ≤ 100 ns.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use zerohop::memory::{
    ArenaResource, MemoryResource, PoolConfig, PoolResource, SystemResource, DEFAULT_ALIGNMENT,
};
use zerohop::{Device, Stream};

/// The platform allocator as-is (glibc malloc/free, 16-byte alignment), for reference.
#[derive(Debug)]
struct PlatformMalloc;

impl MemoryResource for PlatformMalloc {
    fn allocate(&self, bytes: usize, _align: usize, _s: Stream) -> zerohop::Result<NonNull<u8>> {
        // SAFETY: non-zero size, valid layout.
        let p =
            unsafe { std::alloc::System.alloc(Layout::from_size_align(bytes.max(1), 16).unwrap()) };
        Ok(NonNull::new(p).expect("malloc failed"))
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, _align: usize, _s: Stream) {
        // SAFETY: same layout as allocate.
        unsafe {
            std::alloc::System.dealloc(
                ptr.as_ptr(),
                Layout::from_size_align(bytes.max(1), 16).unwrap(),
            )
        };
    }
    fn device(&self) -> Device {
        Device::CPU
    }
}

fn resources() -> Vec<(&'static str, Arc<dyn MemoryResource>)> {
    let pool: Arc<dyn MemoryResource> = Arc::new(PoolResource::new(
        Arc::new(SystemResource::new()),
        PoolConfig::default(),
    ));
    vec![
        ("platform malloc", Arc::new(PlatformMalloc)),
        ("System", Arc::new(SystemResource::new())),
        ("Pool", pool.clone()),
        ("Arena(Pool)", Arc::new(ArenaResource::new(pool))),
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median nanoseconds per alloc+free pair of `bytes`.
fn pair_ns(r: &dyn MemoryResource, bytes: usize) -> f64 {
    let n = if bytes >= 1 << 20 { 2_000 } else { 200_000 };
    let once = || {
        let p = r.allocate(bytes, DEFAULT_ALIGNMENT, Stream::HOST).unwrap();
        black_box(p);
        // SAFETY: freed once with the same arguments.
        unsafe { r.deallocate(p, bytes, DEFAULT_ALIGNMENT, Stream::HOST) };
    };
    for _ in 0..n / 10 {
        once();
    }
    let runs = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                once();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    median(runs)
}

/// A reproducible list of (size, index to free or usize::MAX) operations.
fn mixed_ops(seed: u64, count: usize) -> Vec<(usize, usize)> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let exp = 6.0 + (next() % 10_000) as f64 / 10_000.0 * 14.0; // 2^6 .. 2^20
            (2f64.powf(exp) as usize, next() as usize)
        })
        .collect()
}

fn run_mixed(r: &dyn MemoryResource, ops: &[(usize, usize)]) {
    let mut live: Vec<(NonNull<u8>, usize)> = Vec::with_capacity(1024);
    for &(size, pick) in ops {
        if live.len() >= 1000 || (!live.is_empty() && pick % 2 == 0) {
            let (p, b) = live.swap_remove(pick % live.len());
            // SAFETY: freed once with its allocation arguments.
            unsafe { r.deallocate(p, b, DEFAULT_ALIGNMENT, Stream::HOST) };
        } else {
            live.push((
                r.allocate(size, DEFAULT_ALIGNMENT, Stream::HOST).unwrap(),
                size,
            ));
        }
    }
    for (p, b) in live {
        // SAFETY: as above.
        unsafe { r.deallocate(p, b, DEFAULT_ALIGNMENT, Stream::HOST) };
    }
}

/// Median nanoseconds per operation of the mixed workload on `threads` threads at once.
fn mixed_ns(r: &Arc<dyn MemoryResource>, threads: usize) -> f64 {
    const OPS: usize = 200_000;
    let per_thread: Vec<_> = (0..threads).map(|t| mixed_ops(t as u64 + 7, OPS)).collect();
    let runs = (0..5)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|s| {
                for ops in &per_thread {
                    let r = r.clone();
                    s.spawn(move || run_mixed(&*r, ops));
                }
            });
            t.elapsed().as_nanos() as f64 / (OPS * threads) as f64
        })
        .collect();
    median(runs)
}

fn main() {
    // `cargo bench` passes --bench; anything else (e.g. a filter) is ignored here.
    let sizes: [(usize, &str); 6] = [
        (64, "64 B"),
        (1 << 10, "1 KiB"),
        (64 << 10, "64 KiB"),
        (1 << 20, "1 MiB"),
        (16 << 20, "16 MiB"),
        (64 << 20, "64 MiB"),
    ];
    let rs = resources();
    let mut lines = vec![
        "# Host allocation latency (ns, median of repeats; lower is better)".to_string(),
        String::new(),
        format!(
            "- machine: {} cores; alignment {DEFAULT_ALIGNMENT} B; memory not touched",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        ),
        String::new(),
        format!(
            "| workload | {} | System / Pool | System / Arena |",
            rs.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" | ")
        ),
        format!("|---|{}---|---|", "---|".repeat(rs.len())),
    ];
    let mut row = |label: String, values: Vec<f64>| {
        let cells: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
        lines.push(format!(
            "| {label} | {} | {:.1}× | {:.1}× |",
            cells.join(" | "),
            values[1] / values[2],
            values[1] / values[3]
        ));
    };
    for (bytes, label) in sizes {
        row(
            format!("alloc+free {label}"),
            rs.iter().map(|(_, r)| pair_ns(&**r, bytes)).collect(),
        );
    }
    for threads in [1usize, 4] {
        row(
            format!("mixed 64 B–1 MiB, {threads} thread(s), per op"),
            rs.iter().map(|(_, r)| mixed_ns(r, threads)).collect(),
        );
    }
    lines.push(String::new());
    lines.push(
        "Goals (issue 4): Pool ≥ 10× faster than System on the mixed workload; a small \
         alloc+free pair ≤ 100 ns median. Several threads share one pool through Arena's \
         per-thread caches. Sizes above the 4 MiB class limit use the pool's best-fit tree."
            .into(),
    );
    lines.push("Run: `BENCH_DATE=$(date -u +%F) cargo bench -p zerohop --bench memory`.".into());
    let table = lines.join("\n");
    println!("{table}");
    if let Ok(path) = std::env::var("ZEROHOP_BENCH_OUT") {
        std::fs::write(&path, table + "\n").expect("write the table");
    }
}
