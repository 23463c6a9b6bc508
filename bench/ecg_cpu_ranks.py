"""The flagship's CPU training split over processes instead of threads, side by side in one run:
a day-long synthetic record's beats (made once) trained by P gloo ranks of T threads each
(P × T = the cores), every rank on a Pth of the beats, the ranks sharing one batch out (the
same training as one process). A step of this small model on 16 threads spends most of its
time in the threads' hand-offs (its layers have 1 to 16 channels), so fewer threads per
step and more steps' parts at once may use the cores better. Prints ms per step, training
seconds and the held-out loss for each split.

    python bench/ecg_cpu_ranks.py [--hours 24] [--epochs 10] [--splits 1x16,2x8,4x4,8x2]
                                  [--pin] [--out FILE]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from benchlib import emit


def make_beats(hours, path):
    import numpy as np
    import zerohop_ecg as ecg

    signal, _, _ = ecg.synthesize(hours * 3600.0, rate=360.0, heart_rate=70.0, ectopic=0.05,
                                  day_swing=0.3, seed=7)
    seg = ecg.segment(signal, 360.0)
    beats = np.from_dlpack(seg["beats"])
    np.save(path, beats)
    return beats.shape


def worker(args):
    """One rank under torchrun: its slice of the beats, then vae.train."""
    import numpy as np
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cpus[rank * args.threads:(rank + 1) * args.threads])
    dist.init_process_group("gloo")
    from zerohop_ecg.vae import train

    beats = np.load(args.worker, mmap_mode="r")
    n = len(beats)
    mine = torch.from_numpy(np.ascontiguousarray(beats[rank * n // world:(rank + 1) * n // world]))
    began = time.perf_counter()
    # Every held-out beat each epoch (monitored=0): each split samples its own otherwise,
    # and the held-out losses are compared across splits.
    result = train(mine, epochs=args.epochs, threads=args.threads, progress=False,
                   monitored=0)
    seconds = time.perf_counter() - began
    if rank == 0:
        steps = sum(s for s, _ in result["epoch_split"])
        held = sum(h for _, h in result["epoch_split"])
        print("RESULT " + json.dumps({
            "seconds": seconds, "steps": result["steps"], "step_s": steps, "held_s": held,
            "best": min(result["held_out"]), "last": result["held_out"][-1],
            "epochs": result["epochs_run"], "batch": result["batch_size"],
            "threads": result["threads"]}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def run_split(beats_file, ranks, threads, epochs, pin):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(ranks), __file__, "--worker", str(beats_file), "--threads", str(threads),
           "--epochs", str(epochs)] + (["--pin"] if pin else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{ranks}x{threads} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return {**json.loads(line[7:]), "wall": wall, "ranks": ranks}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--splits", default="1x16,2x8,4x4,8x2,16x1")
    p.add_argument("--pin", action="store_true", help="each rank on its own cores")
    p.add_argument("--worker")
    p.add_argument("--threads", type=int)
    p.add_argument("--out")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    folder = Path(tempfile.mkdtemp())
    beats_file = folder / "beats.npy"
    shape = make_beats(args.hours, beats_file)
    import torch

    rows = []
    for split in args.splits.split(","):
        ranks, threads = (int(v) for v in split.split("x"))
        r = run_split(beats_file, ranks, threads, args.epochs, args.pin)
        rows.append(r)
        print(f"{split}: {r}", file=sys.stderr, flush=True)
    base = rows[0]["step_s"]
    lines = [f"# CPU training: ranks × threads ({date.today()})", "",
             f"vm: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
             f"{torch.__version__}; {shape[0]:,} beats of {shape[1]} samples ({args.hours:g} h "
             f"synthetic, 70 bpm ± 30 %, 5 % ectopic), {args.epochs} epochs, "
             f"{'pinned' if args.pin else 'unpinned'}", "",
             "| ranks × threads | batch per rank | steps | ms per step | steps (s) | held-out "
             "(s) | training (s) | vs first | best held-out | wall with start (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['ranks']} × {r['threads']} | {r['batch']} | {r['steps']} | "
                     f"{r['step_s'] / r['steps'] * 1e3:.2f} | {r['step_s']:.2f} | "
                     f"{r['held_s']:.2f} | {r['seconds']:.2f} | {base / r['step_s']:.2f}× | "
                     f"{r['best']:.5f} | {r['wall']:.1f} |")
    emit(lines, args.out)


if __name__ == "__main__":
    main()
