"""GPU hand-off and allocation latency, side by side in one run (run on the GPU machine).

    python bench/gpu_dlpack.py [--out bench/results/gpu_dlpack.md]

Hand-offs (µs per call): torch.from_dlpack of a zerohop CUDA tensor against CuPy→torch and
torch→CuPy (the inventory measured 7.2 µs and 51 µs on an H100). Allocation (µs per
alloc+free pair, Python calls included): zerohop Pool over cuMemAlloc, the growable Pool over
one reserved range (CudaVirtual; goal issue 42: ≤ 1.2× the Pool), RMM's pool where installed
(scripts/gpu-check.sh installs carried RMM wheels for this bench alone), vs cudaMalloc/cudaFree
(through CuPy's runtime bindings) vs torch's caching allocator, all in interleaved rounds (each
allocator once a round at every size, the median round), so a busy moment slows all of them
alike. Goals:
at least as fast as the fastest peer hand-off (issue 8); the pool's pair ≤ 0.8 µs (issue 42).
"""

import argparse
import datetime

import torch

import zerohop
import zerohop.memory as zm
from benchlib import emit, interleaved_median_us, median_us


def us(fn, number):
    return median_us(fn, number, sync=torch.cuda.synchronize)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args()
    import cupy

    n = 64 << 20  # 64 Mi float32 = 256 MiB, as in the inventory's measurement
    z = zerohop.zeros((n,), "float32", device="cuda:0")
    c = cupy.zeros(n, dtype=cupy.float32)
    x = torch.zeros(n, device="cuda")
    handoffs = [
        ("torch.from_dlpack(zerohop)", lambda: torch.from_dlpack(z)),
        ("zerohop tensor.to_framework(\"torch\")",
         (lambda: z.to_framework("torch")) if hasattr(z, "to_framework") else (lambda: None)),
        ("torch.from_dlpack(cupy)", lambda: torch.from_dlpack(c)),
        ("cupy.from_dlpack(torch)", lambda: cupy.from_dlpack(x)),
        ("cupy.from_dlpack(zerohop)", lambda: cupy.from_dlpack(z)),
        ("zerohop.from_dlpack(torch)", lambda: zerohop.from_dlpack(x)),
        ("zerohop.from_dlpack(cupy)", lambda: zerohop.from_dlpack(c)),
    ]
    rows = [(label, us(fn, 2000)) for label, fn in handoffs]
    # A 64-column CUDA table to 64 torch tensors: each tensor ordered for torch's stream.
    names = [f"c{i}" for i in range(64)]
    table = zerohop.Table([(name, "float32") for name in names], 4096, device="cuda:0")
    table_row = ("64-column CUDA table → 64 torch tensors (table.tensors)",
                 us(lambda: table.tensors(names, "torch"), 200))

    pool = zm.Pool(zm.CudaDevice(0))
    growable = zm.Pool(zm.CudaVirtual(0, reserve=16 << 30))
    try:  # RMM's pool, where RAPIDS is installed (the GPU script installs carried wheels)
        import rmm  # type: ignore[import-not-found]

        rmm_pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource())
    except ImportError:
        rmm_pool = None
    rt = cupy.cuda.runtime
    # Every allocator at every size once a round, so that a noisy spell on the host slows
    # all rows alike: timed size by size, such a spell landed on one size's row (one H200
    # run: every allocator 1.5x slower at 1 MiB alone).
    sizes = ((256, "256 B"), (1 << 20, "1 MiB"), (64 << 20, "64 MiB"))
    all_bodies = []
    for size, label in sizes:
        def zerohop_pair(size=size):
            a = pool.allocate(size)
            pool.deallocate(a, size)

        def growable_pair(size=size):
            a = growable.allocate(size)
            growable.deallocate(a, size)

        def rmm_pair(size=size):
            rmm_pool.deallocate(rmm_pool.allocate(size), size)

        def cuda_pair(size=size):
            rt.free(rt.malloc(size))

        def torch_pair(size=size):
            torch.empty(size, dtype=torch.uint8, device="cuda")  # freed at once: no reference

        all_bodies.append([(zerohop_pair, 5000), (cuda_pair, 50), (torch_pair, 5000),
                           (growable_pair, 5000)]
                          + ([(rmm_pair, 5000)] if rmm_pool is not None else []))
    timed_all = interleaved_median_us([b for bodies in all_bodies for b in bodies], rounds=15)
    alloc_rows = []
    per_size = len(all_bodies[0])
    for k, (_, label) in enumerate(sizes):
        timed = timed_all[k * per_size:(k + 1) * per_size]
        alloc_rows.append((label, *timed[:4], timed[4] if rmm_pool is not None else None))

    lines = [
        f"# GPU hand-offs and allocation (µs per call; hand-offs the median of 7 runs, "
        f"allocation the median of 15 interleaved rounds, every size and allocator once a round) — "
        f"{torch.cuda.get_device_name(0)}",
        "",
        f"- date: {datetime.date.today().isoformat()}; torch {torch.__version__}, cupy {cupy.__version__}, "
        f"zerohop {zerohop.__version__}",
        "",
        "| hand-off (256 MiB float32) | µs per call |",
        "|---|---|",
    ]
    lines += [f"| {label} | {v:.2f} |" for label, v in rows]
    peer = min(v for label, v in rows if "zerohop" not in label)
    lines += ["", f"torch.from_dlpack(zerohop) / fastest peer hand-off: {rows[0][1] / peer:.2f}×; "
              f"to_framework / fastest peer: {rows[1][1] / peer:.2f}×", ""]
    lines += [f"{table_row[0]}: {table_row[1]:.1f} µs", ""]
    lines += ["| alloc+free | zerohop Pool | growable Pool (CudaVirtual) | growable / Pool "
              "| RMM pool | cudaMalloc+cudaFree | torch caching | cudaMalloc / Pool |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {label} | {p:.2f} | {g:.2f} | {g / p:.2f}× | "
              f"{'not installed' if r is None else f'{r:.2f}'} | {c:.2f} | {t:.2f} | {c / p:.0f}× |"
              for label, p, c, t, g, r in alloc_rows]
    worst = max(p for _, p, *_ in alloc_rows)
    lines += ["", f"Goal (issue 42): the zerohop Pool's pair ≤ 0.8 µs at every size "
              f"(largest {worst:.2f} µs: {'met' if worst <= 0.8 else 'missed'})."]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
