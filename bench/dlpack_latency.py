"""Per-call DLPack hand-off latency, every producer against every consumer, in one run.

    python bench/dlpack_latency.py [--out bench/results/dlpack_latency.md]

Producers: a zerohop tensor, a NumPy array, a torch (CPU) tensor. Consumers:
torch.from_dlpack, numpy.from_dlpack, zerohop.from_dlpack (and jax.numpy.from_dlpack when
installed). Each cell is the median over repeats of the mean per call; ratios compare
zerohop-as-producer with the fastest peer producer for the same consumer.
"""

import argparse
import datetime
import os
import platform
import sys

import numpy as np

import zerohop
from benchlib import emit, median_us


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table (Markdown) to this file")
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    import torch

    consumers = {
        "torch.from_dlpack": torch.from_dlpack,
        "numpy.from_dlpack": np.from_dlpack,
        "zerohop.from_dlpack": zerohop.from_dlpack,
    }
    try:
        import jax.numpy as jnp

        consumers["jax.numpy.from_dlpack"] = jnp.from_dlpack
    except ImportError:
        pass

    shape = (1024, 256)
    producers = {
        "zerohop": zerohop.zeros(shape, "float32"),
        "numpy": np.zeros(shape, np.float32),
        "torch": torch.zeros(shape, dtype=torch.float32),
    }

    rows = []
    for consumer_name, consume in consumers.items():
        number = args.number // 20 if consumer_name.startswith("jax") else args.number
        times = {}
        for producer_name, producer in producers.items():
            if consumer_name == "zerohop.from_dlpack" and producer_name == "zerohop":
                times[producer_name] = None  # same object: not a hand-off
                continue
            times[producer_name] = median_us(lambda: consume(producer), number, args.repeat)
        peers = [v for k, v in times.items() if k != "zerohop" and v is not None]
        ratio = times["zerohop"] / min(peers) if times["zerohop"] is not None else None
        rows.append((consumer_name, times, ratio))

    fmt = lambda v: "—" if v is None else f"{v:.2f}"
    lines = [
        f"# DLPack hand-off latency (µs per call, median of {args.repeat} repeats)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        f"- python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}"
        + (f", jax {sys.modules['jax'].__version__}" if "jax" in sys.modules else "")
        + f", zerohop {zerohop.__version__}",
        f"- tensor: float32 {shape}, CPU",
        "",
        "| consumer | zerohop producer | numpy producer | torch producer | zerohop / fastest peer |",
        "|---|---|---|---|---|",
    ]
    for consumer_name, times, ratio in rows:
        lines.append(
            f"| {consumer_name} | {fmt(times['zerohop'])} | {fmt(times['numpy'])} | "
            f"{fmt(times['torch'])} | {'—' if ratio is None else f'{ratio:.2f}×'} |"
        )
    lines += numpy_breakdown(producers, args.number, args.repeat)
    emit(lines, args.out)


class _Ready:
    """Hands NumPy a capsule made beforehand: the same Python-level `__dlpack__` for every
    producer, so the timing is NumPy's import of that producer's capsule."""

    def __init__(self, capsules, device):
        self.capsules = capsules
        self.device = device

    def __dlpack__(self, **_):
        return self.capsules.pop()

    def __dlpack_device__(self):
        return self.device


def numpy_breakdown(producers, number, repeat):
    """Where numpy.from_dlpack spends its time with each producer: the producer's export
    (`__dlpack__` called with NumPy's three keywords, and with none), and NumPy's import of a
    capsule made beforehand. Each part carries the same Python call overhead for both
    producers, so the differences between the rows are what the producer costs."""
    import timeit

    rows = []
    for name in ("numpy", "zerohop"):
        x = producers[name]
        total = median_us(lambda: np.from_dlpack(x), number, repeat)
        export_kw = median_us(
            lambda: x.__dlpack__(dl_device=None, copy=None, max_version=(1, 0)), number, repeat
        )
        export_bare = median_us(lambda: x.__dlpack__(), number, repeat)
        runs = []
        for _ in range(repeat):
            ready = _Ready([x.__dlpack__(max_version=(1, 0)) for _ in range(number)],
                           x.__dlpack_device__())
            runs.append(timeit.timeit(lambda: np.from_dlpack(ready), number=number))
        runs.sort()
        import_us = runs[len(runs) // 2] / number * 1e6
        rows.append((name, total, export_kw, export_bare, import_us))
    out = [
        "",
        "## numpy.from_dlpack, split (µs per call)",
        "",
        "| producer | numpy.from_dlpack | export: `__dlpack__` with NumPy's keywords "
        "(dl_device, copy, max_version) | export: `__dlpack__()` | import: NumPy taking a "
        "ready capsule |",
        "|---|---|---|---|---|",
    ]
    for name, total, export_kw, export_bare, import_us in rows:
        out.append(
            f"| {name} | {total:.2f} | {export_kw:.2f} | {export_bare:.2f} | {import_us:.2f} |"
        )
    (_, t_np, kw_np, bare_np, imp_np), (_, t_zh, kw_zh, bare_zh, imp_zh) = rows
    out.append(
        f"| zerohop − numpy | {t_zh - t_np:+.2f} | {kw_zh - kw_np:+.2f} | "
        f"{bare_zh - bare_np:+.2f} | {imp_zh - imp_np:+.2f} |"
    )
    return out

if __name__ == "__main__":
    main()
