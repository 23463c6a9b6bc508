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
    emit(lines, args.out)


if __name__ == "__main__":
    main()
