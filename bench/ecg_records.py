"""The ECG job over many recordings, scaled over local worker processes, side by side in one
run: N synthetic 30-minute WFDB records (format 16, 360 Hz, 60–100 bpm with 5 % ectopic
beats) read, detected and cut into beat rows by 1, 2, 4, … workers (each with its share of the
cores for zerohop's parallel stages); the rows come back in shared memory (bytes copied: 0).
Workers are started before the clock runs (their start is shown beside); the goal is ≥ 12×
from 1 to 16 workers on a 16-core machine.

Training over torchrun ranks has its own bench: bench/ecg_ddp.py.

    python bench/ecg_records.py [--records 128] [--max-workers 16] [--out FILE]
    python bench/ecg_records.py --counts 128,2000 --minutes 1 --max-workers 2
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

from benchlib import emit

RATE = 360.0


def make_records(folder, count, minutes):
    import zerohop_ecg as ecg

    for i in range(count):
        signal, _, _ = ecg.synthesize(minutes * 60.0, rate=RATE, heart_rate=60.0 + (i % 5) * 10,
                                      ectopic=0.05, seed=i)
        adc = np.clip(np.rint(np.from_dlpack(signal) * 200.0) + 1024, -32768, 32767)
        name = f"s{i:04d}"
        adc.astype("<i2").tofile(folder / f"{name}.dat")
        (folder / f"{name}.hea").write_text(
            f"{name} 1 {RATE:g} {len(adc)}\n{name}.dat 16 200/mV 16 1024 0 0 0 MLII\n")


def scale(folder, workers_list, threads=None, paths=None):
    from zerohop_ecg.records import RecordFailure, RecordOptions, find_records
    from zerohop_ecg.workers import LocalProcesses, boot_id

    paths = paths if paths is not None else find_records(str(folder))
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


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def counts(folder, numbers, workers):
    """Records/s and the job's open descriptors for the first N records, for each N, with the
    same workers: the rows of thousands of records come back through a few pooled segments
    per worker, and that must cost neither throughput nor descriptors."""
    import threading

    from zerohop_ecg.records import find_records

    paths = find_records(str(folder))
    out = []
    for n in numbers:
        peak, done = [open_descriptors()], threading.Event()

        def watch():
            while not done.wait(0.02):
                peak[0] = max(peak[0], open_descriptors())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        ((_, _, seconds, rate, _),) = scale(folder, [workers], paths=paths[:n])
        done.set()
        watcher.join()
        out.append((n, seconds, rate, peak[0]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=128)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--max-workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--counts", type=lambda v: [int(n) for n in v.split(",")],
                   help="instead of scaling workers: records/s and peak descriptors for each "
                   "record count (e.g. 128,2000) with --max-workers workers")
    p.add_argument("--out")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    if args.counts:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            make_records(folder, max(args.counts), args.minutes)
            found = counts(folder, args.counts, args.max_workers)
        base = found[0][2]
        lines = [f"# The ECG job over many recordings: record counts ({date.today()})", "",
                 f"{platform.node()}, {cores} cores, Python {platform.python_version()}; "
                 f"synthetic WFDB records of {args.minutes:g} min at {RATE:g} Hz, "
                 f"{args.max_workers} worker(s) (started before timing); rows back in pooled "
                 f"shared memory (`Monotonic(Shared())` per worker). Peak descriptors: the "
                 f"job's open files, sampled every 20 ms.", "",
                 "| records | seconds | records/s | vs the first count | peak descriptors |",
                 "|---:|---:|---:|---:|---:|"]
        lines += [f"| {n:,} | {seconds:.2f} | {rate:.1f} | {rate / base:.2f}× | {peak} |"
                  for n, seconds, rate, peak in found]
        emit(lines, args.out)
        return
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
        emit(lines, args.out)


if __name__ == "__main__":
    main()
