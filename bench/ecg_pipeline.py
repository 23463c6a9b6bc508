"""The ECG pipeline on a 20 M-sample synthetic CSV (the blog's size), zerohop against a
reference written in the blog's style (pandas/pyarrow CSV + NumPy/SciPy), side by side.

    python bench/ecg_pipeline.py [--samples 20000000] [--out bench/results/ecg_pipeline_cpu.md]

Each implementation runs in a fresh process (twice; the faster run counts) so its peak
memory (max RSS) is its own. Training is excluded: both hand the same beat matrix to torch.
Goal (issue 6): ≥ 5× faster than the reference on CPU, with lower peak memory.
"""

import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

RATE = 250.0


def run_zerohop(csv):
    import torch

    import zerohop_ecg as ecg

    times = {}
    t = time.perf_counter()
    table = ecg.read_csv(csv)
    times["load CSV"] = time.perf_counter() - t
    seg = ecg.segment(table["mv"], RATE, method="blog")  # the reference implements the blog
    timings = dict(seg["timings"])
    times["curvature"] = timings["curvature"]
    times["gates"] = timings["gates"] + timings["indices"]
    times["prune + embed"] = timings["prune"] + timings["embed"]
    t = time.perf_counter()
    beats = torch.from_dlpack(seg["beats"])
    times["to torch"] = time.perf_counter() - t
    return times, tuple(beats.shape)


def run_reference(csv):
    import numpy as np
    import pandas as pd
    import torch
    from scipy.ndimage import maximum_filter1d

    from benchlib import blog_reference_stages

    times = {}
    clock = [time.perf_counter()]

    def lap(name):
        times[name] = time.perf_counter() - clock[0]
        clock[0] = time.perf_counter()

    signal = pd.read_csv(csv, engine="pyarrow", dtype="float32")["mv"].to_numpy()
    lap("load CSV")
    beats = blog_reference_stages(np, maximum_filter1d, signal, lap)
    tensor = torch.from_numpy(beats)
    lap("to torch")
    return times, tuple(tensor.shape)


def child(which, csv):
    import resource

    fn = run_zerohop if which == "zerohop" else run_reference
    times, shape = fn(csv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times": times, "shape": shape, "peak": peak}))


def measure(which, csv):
    from benchlib import best_fresh_run

    return best_fresh_run(__file__, which, csv)


def main():
    from benchlib import child_run_args

    args = child_run_args(__doc__, child)
    if args is None:
        return
    import numpy as np
    import pandas
    import scipy
    import torch

    import zerohop
    import zerohop_ecg as ecg

    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "ecg.csv"
        t = time.perf_counter()
        ecg.synthesize(args.samples / RATE, rate=RATE, seed=3, csv=csv)
        print(f"wrote {args.samples:,} samples ({csv.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
        zh = measure("zerohop", csv)
        ref = measure("reference", csv)
    stages = list(ref["times"])
    lines = [
        f"# ECG pipeline on CPU, {args.samples:,} samples (seconds; training excluded)",
        "",
        f"- date: {datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} cores",
        f"- numpy {np.__version__}, scipy {scipy.__version__}, pandas {pandas.__version__}, "
        f"torch {torch.__version__}, zerohop {zerohop.__version__}",
        "- reference: pandas read_csv (pyarrow engine) → NumPy FFT curvature → SciPy sliding "
        "maximum → NumPy pruning and embedding → torch.from_numpy (the blog's steps on CPU)",
        f"- beats: zerohop {zh['shape']}, reference {ref['shape']}",
        "",
        "| stage | reference | zerohop | speed-up |",
        "|---|---|---|---|",
    ]
    for s in stages:
        r, z = ref["times"][s], zh["times"][s]
        lines.append(f"| {s} | {r:.3f} | {z:.3f} | {r / max(z, 1e-9):.1f}× |")
    rt, zt = sum(ref["times"].values()), sum(zh["times"].values())
    lines.append(f"| **total** | **{rt:.3f}** | **{zt:.3f}** | **{rt / zt:.1f}×** |")
    lines.append(f"| peak memory (max RSS) | {ref['peak'] / 2**20:.0f} MiB | "
                 f"{zh['peak'] / 2**20:.0f} MiB | {ref['peak'] / zh['peak']:.2f}× less |")
    lines += ["", f"Goal ≥ 5× on CPU with lower peak memory: "
              f"{'met' if rt / zt >= 5 and zh['peak'] < ref['peak'] else 'not met'}."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
