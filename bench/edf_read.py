"""Reading one lead of a 24-hour Holter EDF file: zerohop's reader (all cores; and straight into
GPU memory when a GPU is present) beside edfio and pyedflib, the readers labs use from Python
(mne when installed), in one run on the same file, each timed warm (the file in the page
cache) as the best of --repeat reads. The file: three ECG leads at 256 Hz plus an EDF+
annotation signal with one beat annotation a second, 1-s data records (what Holter exports
look like), written by tests' own writer. Goal (issue #44): at least 5× the fastest peer.

    python bench/edf_read.py [--hours 24] [--repeat 5] [--out bench/results/edf_read.md]
"""

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

import zerohop_ecg as ecg
from benchlib import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps" / "ecg" / "tests"))
from edf_files import tal, write_edf  # noqa: E402

RATE = 256
LEAD = "ECG II"


def make_file(path, hours):
    seconds = int(hours * 3600)
    rng = np.random.default_rng(7)
    t = np.arange(RATE * seconds) / RATE
    base = (np.sin(2 * np.pi * 1.2 * t) ** 15) + rng.normal(0, 0.02, len(t))
    leads = [("ECG I", 0.6 * base), (LEAD, base), ("ECG V5", -0.4 * base)]
    tals = [tal(r + 0.3, "N") for r in range(seconds)]
    return write_edf(path, [(label, x, RATE, (-3.0, 3.0)) for label, x in leads], seconds=1,
                     plus="C", tals=tals)


def best(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


def readers(path):
    """name → a function returning the lead as an array (host) or a device tensor."""
    out = {"zerohop (host, all cores)":
           lambda: np.from_dlpack(ecg.read_edf(path, leads=[LEAD])[0][LEAD])}
    try:
        import zerohop.cuda

        if zerohop.cuda.is_available():
            zerohop.cuda.preload_nvrtc()

            def on_gpu():
                table, _ = ecg.read_edf(path, leads=[LEAD], device="cuda:0")
                return table[LEAD]
            out["zerohop (into GPU memory)"] = on_gpu
    except ImportError:
        pass
    try:
        import edfio

        out["edfio"] = lambda: edfio.read_edf(path, lazy_load_data=True).get_signal(LEAD).data
    except ImportError:
        pass
    try:
        import pyedflib

        def flib():
            with pyedflib.EdfReader(str(path)) as f:
                return f.readSignal(f.getSignalLabels().index(LEAD))
        out["pyedflib"] = flib
    except ImportError:
        pass
    try:
        import mne

        out["mne"] = lambda: mne.io.read_raw_edf(path, include=[LEAD], preload=True,
                                                 verbose="error").get_data()[0]
    except ImportError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = make_file(Path(tmp) / "holter.edf", args.hours)
        size = path.stat().st_size
        reference = np.from_dlpack(ecg.read_edf(path, leads=[LEAD])[0][LEAD])
        rows = []
        for name, fn in readers(path).items():
            fn()  # warm: page cache, kernels compiled, imports done
            seconds, values = best(fn, args.repeat)
            if "GPU" in name:
                import torch
                values = torch.from_dlpack(values).cpu().numpy()
            same = np.allclose(np.asarray(values, np.float64), reference, rtol=2e-7, atol=1e-6)
            rows.append((name, seconds, same))
    peers = [s for name, s, _ in rows if not name.startswith("zerohop")]
    fastest = min(peers) if peers else None
    lines = [f"# Reading one lead of a {args.hours:g}-hour EDF+ Holter file",
             "",
             f"{date.today()}, {platform.node()}, {os.cpu_count()} cores; file "
             f"{size / 2**20:.0f} MiB (3 leads at {RATE} Hz, 1-s records, a beat annotation "
             f"a second); best of {args.repeat} warm reads.",
             "",
             "| reader | seconds | MB/s of file | vs fastest peer | values match |",
             "|---|---:|---:|---:|:---:|"]
    for name, seconds, same in rows:
        ratio = f"{fastest / seconds:.1f}×" if fastest else "–"
        lines.append(f"| {name} | {seconds:.4f} | {size / seconds / 1e6:,.0f} | {ratio} | "
                     f"{'yes' if same else 'NO'} |")
    ours = min(s for name, s, _ in rows if name.startswith("zerohop (host"))
    if fastest:
        verdict = "met" if fastest / ours >= 5 else "missed"
        lines += ["", f"Goal ≥ 5× the fastest peer on the host: {fastest / ours:.1f}× "
                      f"({verdict})."]
    emit(lines, args.out)
    if not all(same for _, _, same in rows):
        sys.exit("a reader's values differ from zerohop's")


if __name__ == "__main__":
    main()
