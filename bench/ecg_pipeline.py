"""The ECG pipeline on a 20 M-sample synthetic CSV (the blog's size), zerohop against a
reference written in the blog's style (pandas/pyarrow CSV + NumPy/SciPy), side by side.

    python bench/ecg_pipeline.py [--samples 20000000] [--out bench/results/ecg_pipeline_cpu.md]

Each implementation runs in a fresh process (twice; the faster run counts) so its peak
memory (max RSS) is its own. Training is excluded: both hand the same beat matrix to torch.
Goal (issue 6): ≥ 5× faster than the reference on CPU, with lower peak memory.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATE = 250.0


def run_zerohop(csv):
    import torch

    import zerohop.ecg as ecg

    times = {}
    t = time.perf_counter()
    table = ecg.read_csv(csv)
    times["load CSV"] = time.perf_counter() - t
    seg = ecg.segment(table["mv"], RATE)
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

    times = {}
    t = time.perf_counter()
    signal = pd.read_csv(csv, engine="pyarrow", dtype="float32")["mv"].to_numpy()
    times["load CSV"] = time.perf_counter() - t

    t = time.perf_counter()
    w = 30
    x = np.linspace(-3, 3, w)
    kernel = np.zeros(len(signal), np.float32)
    kernel[:w] = np.exp(-x * x / 2) * (1 - x * x) * 2 / np.sqrt(w)
    curv = np.fft.irfft(np.fft.rfft(signal) * np.fft.rfft(kernel), len(signal)).astype(np.float32)
    times["curvature"] = time.perf_counter() - t

    t = time.perf_counter()
    window = 180
    centre = (window + 1) // 2
    # maximum over curv[p .. p+window-1], compared with curv[p + centre]
    peak = maximum_filter1d(curv, size=window, origin=-(window // 2), mode="nearest")
    n_out = len(curv) - window + 1
    gates = (peak[:n_out] == curv[centre:centre + n_out]).astype(np.int8)
    gates[1:] = gates[1:] * ((gates[1:] - gates[:-1]) == 1)
    indices = np.flatnonzero(gates)
    times["gates"] = time.perf_counter() - t

    t = time.perf_counter()
    lengths = np.diff(indices)
    keep = (lengths >= 100) & (lengths <= 256)
    starts, lens = indices[:-1][keep], lengths[keep]
    cols = np.arange(256)
    take = starts[:, None] + cols[None, :]
    mask = cols[None, :] < lens[:, None]
    beats = np.where(mask, signal[np.minimum(take, len(signal) - 1)], 0.0).astype(np.float32)
    times["prune + embed"] = time.perf_counter() - t

    t = time.perf_counter()
    tensor = torch.from_numpy(beats)
    times["to torch"] = time.perf_counter() - t
    return times, tuple(tensor.shape)


def child(which, csv):
    import resource

    fn = run_zerohop if which == "zerohop" else run_reference
    times, shape = fn(csv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times": times, "shape": shape, "peak": peak}))


def measure(which, csv):
    best = None
    for _ in range(2):
        out = subprocess.run([sys.executable, __file__, "--child", which, str(csv)],
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or sum(result["times"].values()) < sum(best["times"].values()):
            best = result
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000_000)
    parser.add_argument("--out")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    import numpy as np
    import pandas
    import scipy
    import torch

    import zerohop
    import zerohop.ecg as ecg

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
