"""The whole ECG job on a day-long (Holter) recording read from a CSV file, as a lab exports
it: a 24-hour synthetic record (70 bpm ± 30 % over the day, 5 % ectopic beats, wander and
noise) written with a time column in seconds and the lead in mV, then
`python -m zerohop_ecg --csv FILE` run in a fresh process per run (interpreter start and
`import torch` included, plots included), timed from outside, with its peak memory.

    python bench/ecg_holter.py [--device cpu] [--device cuda] [--runs 2] [--hours 24] [--edf]
                               [--compare PYTHONPATH] [--out bench/results/ecg_holter.md]

`--edf` writes the same day as an EDF+C file with a beat annotation per R peak (as a Holter
recorder exports it) and runs `--edf FILE` instead.

`--compare PATH` runs each job a second time with PYTHONPATH=PATH (another build of zerohop),
the two alternating run by run, this build first, so a change is measured against the
previous build on one machine in one call.

Goals (issue 26): on the GPU machine ≤ 12 s with its GPU and ≤ 40 s on its 16 CPU cores, on a
2-core machine ≤ 2 min; the figures ≤ 2 s of it; peak memory ≤ 1.5 GiB on the CPU path.
"""

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from benchlib import emit

RATE = 360.0
GOALS = {"cpu": {2: 120.0, 16: 40.0}, "cuda": 12.0}
# Runs the job as its only child, so the child's peak memory is the job's own.
WRAPPER = """
import resource, subprocess, sys, time
begun = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - begun
sys.stdout.write(done.stdout + done.stderr)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"@@ rc={done.returncode} wall={wall:.3f} peak_kb={peak}")
"""


def write_record(path, hours, seed=7):
    """The synthetic day as a lab export: `time_s` (4 decimals) and `MLII` (mV, 3 decimals)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pc

    import zerohop_ecg as ecg

    signal, peaks, _ = ecg.synthesize(hours * 3600.0, rate=RATE, heart_rate=70.0, seed=seed,
                                      day_swing=0.3, ectopic=0.05)
    mv = np.from_dlpack(signal).astype(np.float64)
    table = pa.table({"time_s": np.round(np.arange(len(mv)) / RATE, 4),
                      "MLII": np.round(mv, 3)})
    with open(path, "wb") as f:
        f.write(b"time_s,MLII\n")
        pc.write_csv(table, f, pc.WriteOptions(include_header=False))
    return len(mv), len(np.from_dlpack(peaks))


def write_edf_record(path, hours, seed=7):
    """The same synthetic day as an EDF+C file, as a Holter recorder exports it: MLII in mV at
    360 Hz in 1-s data records, with one beat annotation (N or V) per R peak."""
    import numpy as np

    import zerohop_ecg as ecg

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps" / "ecg" / "tests"))
    from edf_files import tal, write_edf

    signal, peaks, ectopic = ecg.synthesize(hours * 3600.0, rate=RATE, heart_rate=70.0,
                                            seed=seed, day_swing=0.3, ectopic=0.05)
    mv = np.from_dlpack(signal).astype(np.float64)
    peaks = np.from_dlpack(peaks)
    seconds = int(len(mv) // RATE)
    tals = [b""] * seconds
    for p, v in zip(peaks, ectopic):
        second = int(p // RATE)
        if second < seconds:
            tals[second] += tal(p / RATE, "V" if v else "N")
    write_edf(Path(path), [("ECG MLII", mv[:seconds * int(RATE)], int(RATE), (-8.0, 8.0))],
              seconds=1, plus="C", tals=tals)
    return seconds * int(RATE), len(peaks)


def run_job(record, device, out, show=False, pythonpath=None, kind="csv"):
    cmd = [sys.executable, "-m", "zerohop_ecg", f"--{kind}", record, "--device", device,
           "--out", out]
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True,
                          env=env)
    text = done.stdout + done.stderr
    if show:
        print(text, flush=True)
    tail = re.search(r"@@ rc=(-?\d+) wall=([\d.]+) peak_kb=(\d+)", text)
    if tail is None or tail.group(1) != "0":
        sys.exit(f"the job failed on {device}:\n{text[-3000:]}")
    stages = {m.group(1).strip(): float(m.group(2))
              for m in re.finditer(r"^(\S.*?)\s{2,}([\d.]+)\s+\d+$", text, re.M)}
    find = lambda prefix: next((v for k, v in stages.items() if k.startswith(prefix)), 0.0)
    return {"wall": float(tail.group(2)), "peak": int(tail.group(3)) * 1024,
            "read": find("parse CSV") or find("read EDF"), "train": find("train"),
            "plots": find("plots")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--out")
    parser.add_argument("--edf", action="store_true",
                        help="the day as an EDF+C file with beat annotations instead of a CSV")
    parser.add_argument("--show-output", action="store_true", help="print each job's output")
    parser.add_argument("--compare", metavar="PYTHONPATH",
                        help="also run each job with this PYTHONPATH (another build), alternating")
    args = parser.parse_args()
    builds = [("this build", None)] + ([("compared", args.compare)] if args.compare else [])
    devices = args.device or ["cpu"]
    cores = os.cpu_count()
    with tempfile.TemporaryDirectory() as scratch:
        kind = "edf" if args.edf else "csv"
        csv = os.path.join(scratch, f"holter.{kind}")
        begun = time.perf_counter()
        samples, beats = (write_edf_record if args.edf else write_record)(csv, args.hours)
        os.sync()  # the file's dirty pages go to disk now, not during the first timed run
        written = time.perf_counter() - begun
        size = os.path.getsize(csv)
        what = ("EDF+C file (MLII in mV, 1-s records, a beat annotation per R peak"
                if args.edf else "CSV (time in s, MLII in mV")
        lines = [
            f"# The ECG job on a {args.hours:g}-hour record from a{'n EDF' if args.edf else ' CSV'}"
            f" file ({date.today()}, {platform.machine()}, {cores} cores)",
            "",
            f"{samples:,} samples at {RATE:g} Hz ({beats:,} beats), a {size / 2**20:.0f} MiB "
            f"{what}; written in {written:.1f} s, not timed below). "
            f"`python -m zerohop_ecg --{kind} FILE --device D`, a fresh process per run, plots "
            "included; wall time from outside the process.",
            "",
            f"| device | build | run | wall (s) | read {kind.upper()} (s) | training (s) | "
            "plots (s) | peak RSS (GiB) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        verdicts = []
        for device in devices:
            runs = []  # this build's: the verdict is about them
            for k in range(1, args.runs + 1):
                for n, (build, path) in enumerate(builds):
                    r = run_job(csv, device, os.path.join(scratch, f"out-{device}-{k}-{n}"),
                                args.show_output, path, kind)
                    if path is None:
                        runs.append(r)
                    lines.append(f"| {device} | {build} | {k} | {r['wall']:.2f} | {r['read']:.2f} | "
                                 f"{r['train']:.2f} | {r['plots']:.2f} | {r['peak'] / 2**30:.2f} |")
                    print(lines[-1], flush=True)
            best = min(r["wall"] for r in runs)
            goal = GOALS["cuda"] if device == "cuda" else GOALS["cpu"].get(cores)
            plots = max(r["plots"] for r in runs)
            verdict = f"{device}: best {best:.1f} s"
            if goal is not None:
                verdict += f" (goal ≤ {goal:g} s: {'met' if best <= goal else 'missed'})"
            verdict += f", figures ≤ {plots:.2f} s (goal ≤ 2 s: {'met' if plots <= 2 else 'missed'})"
            if device == "cpu":
                peak = max(r["peak"] for r in runs) / 2**30
                verdict += f", peak {peak:.2f} GiB (goal ≤ 1.5: {'met' if peak <= 1.5 else 'missed'})"
            verdicts.append(verdict)
    lines += ["", "Goals: " + "; ".join(verdicts) + "."]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
