"""The ECG job over many recordings, scaled over local worker processes, side by side in one
run: N synthetic 30-minute WFDB records (format 16, 360 Hz, 60–100 bpm with 5 % ectopic
beats) read, detected and cut into beat rows by 1, 2, 4, … workers (each with its share of the
cores for zerohop's parallel stages); the rows come back in shared memory (bytes copied: 0).
Workers are started before the clock runs (their start is shown beside); the goal is ≥ 12×
from 1 to 16 workers on a 16-core machine.

With --ddp it also runs the whole job under torchrun with 1 and with 2 ranks and compares
training throughput (beats per second; goal ≥ 1.8× with 2 GPUs).

    python bench/ecg_records.py [--records 128] [--max-workers 16] [--ddp] [--out FILE]
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

import numpy as np

from benchlib import emit

RATE = 360.0


def make_records(folder, count, minutes):
    import zerohop.ecg as ecg

    for i in range(count):
        signal, _, _ = ecg.synthesize(minutes * 60.0, rate=RATE, heart_rate=60.0 + (i % 5) * 10,
                                      ectopic=0.05, seed=i)
        adc = np.clip(np.rint(np.from_dlpack(signal) * 200.0) + 1024, -32768, 32767)
        name = f"s{i:04d}"
        adc.astype("<i2").tofile(folder / f"{name}.dat")
        (folder / f"{name}.hea").write_text(
            f"{name} 1 {RATE:g} {len(adc)}\n{name}.dat 16 200/mV 16 1024 0 0 0 MLII\n")


def scale(folder, workers_list, threads=None):
    from zerohop.ecg.records import RecordFailure, RecordOptions, find_records
    from zerohop.ecg.workers import LocalProcesses, boot_id

    paths = find_records(str(folder))
    options = RecordOptions(shared_on=boot_id(), job_pid=os.getpid())
    rows = []
    for workers in workers_list:
        with LocalProcesses(paths, options, workers, threads_per_worker=threads) as pool:
            begun = time.perf_counter()
            pool.start()
            started = time.perf_counter() - begun
            begun = time.perf_counter()
            results = list(pool.results())
            seconds = time.perf_counter() - begun
        failed = [r for r in results if isinstance(r, RecordFailure)]
        if failed:
            raise SystemExit(f"{failed[0].name}: {failed[0].error}")
        beats = sum(r.rows for r in results)
        rows.append((workers, started, seconds, len(results) / seconds, beats))
        print(f"{workers:3d} workers ({threads or 'shared'} threads): {seconds:.3f} s for {len(results)} records "
              f"(start {started:.2f} s)", file=sys.stderr)
    return rows


def ddp(folder, ranks, device, epochs):
    out = Path(tempfile.mkdtemp()) / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(ranks), "-m", "zerohop.ecg", "--records", str(folder), "--device", device,
           "--epochs", str(epochs), "--no-plots", "--no-progress", "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"torchrun {ranks} failed:\n{run.stderr[-3000:]}")
    report = (out / "report.md").read_text()
    seconds, per_second = re.search(r", ([\d.]+) s \(([\d,]+) beats/s", report).groups()
    return float(seconds), float(per_second.replace(",", ""))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=128)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--max-workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    workers_list = [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= args.max_workers]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_records(folder, args.records, args.minutes)
        rows = scale(folder, workers_list)
        single = scale(folder, workers_list, threads=1)
        one, one_single = rows[0][2], single[0][2]
        lines = [f"# The ECG job over many recordings: local worker processes ({date.today()})",
                 "",
                 f"{platform.node()}, {cores} cores, Python {platform.python_version()}; "
                 f"{args.records} synthetic WFDB records of {args.minutes:g} min at {RATE:g} Hz "
                 f"({args.records * args.minutes / 60:.0f} h); read + detect + cut rows, rows "
                 f"back in shared memory. Workers started before timing. Left: the cores "
                 f"shared out (each worker runs zerohop's parallel stages on cores/workers "
                 f"threads, so 1 worker already uses every core); right: one thread per "
                 f"worker (process scaling alone).", "",
                 "| workers | seconds | records/s | vs 1 worker | 1 thread each: seconds | "
                 "records/s | vs 1 worker | worker start (s) | beats |",
                 "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (workers, started, seconds, rate, beats), (_, _, s1, r1, _) in zip(rows, single):
            lines.append(f"| {workers} | {seconds:.3f} | {rate:.1f} | {one / seconds:.1f}× | "
                         f"{s1:.3f} | {r1:.1f} | {one_single / s1:.1f}× | {started:.2f} | "
                         f"{beats:,} |")
        if args.ddp:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
            gpus = torch.cuda.device_count() if device == "cuda" else 0
            lines += ["", f"DistributedDataParallel training under torchrun ({device}, {gpus} "
                      f"GPU(s) visible; {args.epochs} epochs):", "",
                      "| ranks | training seconds | beats/s | vs 1 rank |", "|---:|---:|---:|---:|"]
            base = None
            for ranks in (1, 2):
                seconds, per_second = ddp(folder, ranks, device, args.epochs)
                base = base or per_second
                lines.append(f"| {ranks} | {seconds:.2f} | {per_second:,.0f} | "
                             f"{per_second / base:.2f}× |")
            if device == "cuda" and gpus < 2:
                lines += ["", "Both ranks share one GPU here (gloo): this checks the DDP path, "
                          "not the 2-GPU goal."]
        emit(lines, args.out)


if __name__ == "__main__":
    main()
