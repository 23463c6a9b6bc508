"""The flagship's training over torchrun ranks, side by side in one run: the whole ECG job on N
synthetic 30-minute WFDB records (as bench/ecg_records.py makes them) with 1 and with 2
ranks (captured CUDA-graph steps; --eager adds eager ones), for each batch asked for (the
batch one process uses; ranks share it out, so they train as one process would). The figure
that counts is the time to the same held-out loss (goal: 2 GPUs ≥ 1.8× one), read from each
report's per-epoch table: the target is the best held-out loss every run reached, and each
run's time is the first epoch end at or below it, counted from the start of training
(normalisation and the capture included). The table also gives where an epoch's time goes:
steps, and the held-out loss. `--fuse` adds runs whose steps torch.compile fused
(`--fuse-kernels`); their time to the target is also given less the one-time warm-up,
compilation and capture, which a long run amortises. `--lrs 1,2` runs each batch at those
multiples of the job's learning rate (`--lr`, 1e-3 by default, grown with the square root of
batches above 1024), so a 2-GPU gain is not one a better learning rate gives one GPU too: the
last column compares each run with the fastest 1-rank run of its kind. `--per-rank 1,1.41`
adds 2-rank runs in which each rank takes the whole batch (`--batch-per-rank`: twice the
batch, half the steps, the learning rate × √2 by the job's rule), one for each factor on that
learning rate (1.41: × 2 in all).

    python bench/ecg_ddp.py [--records 128] [--minutes 30] [--epochs 20] [--batches 4096,…]
                            [--eager] [--fuse] [--lrs 1,…] [--per-rank 1,…] [--out FILE]
"""

import argparse
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from benchlib import emit
from ecg_records import make_records

ROW = re.compile(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$",
                 re.M)


def run_job(folder, ranks, device, epochs, graph, batch=None, fuse=False, limit=300,
            per_rank=False, lr_factor=1.0):
    out = Path(tempfile.mkdtemp()) / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(ranks), "-m", "zerohop_ecg", "--records", str(folder), "--device", device,
           "--epochs", str(epochs), "--no-plots", "--no-progress", "--out", str(out),
           # Every held-out beat each epoch: a sample of them would differ between 1 and 2
           # ranks (each rank samples its own), and the target loss is compared across both.
           "--held-out-beats", "0"]
    if not graph:
        cmd.append("--no-cuda-graph")
    if batch is not None:
        cmd += ["--batch-size", str(batch)]
    if fuse:
        cmd.append("--fuse-kernels")
    if per_rank:
        cmd.append("--batch-per-rank")
    if lr_factor != 1.0:
        cmd += ["--lr", f"{1e-3 * lr_factor:g}"]
    log = out.parent / "job.log"
    with open(log, "w") as sink:
        # A session of its own, so a job that outlives its limit goes with all its ranks.
        job = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT,
                               start_new_session=True, env={**os.environ,
                                                            "PYTHONFAULTHANDLER": "1"})
        try:
            code = job.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            # SIGABRT first: each rank's faulthandler prints where its threads were.
            os.killpg(job.pid, signal.SIGABRT)
            time.sleep(5)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            raise SystemExit(f"torchrun {ranks} ({' '.join(cmd[7:])}) ran past {limit} s; "
                             f"its output:\n{log.read_text()[-12000:]}") from None
    if code != 0:
        raise SystemExit(f"torchrun {ranks} failed:\n{log.read_text()[-3000:]}")
    report = (out / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("- training:"))
    epochs_table = [tuple(float(v) for v in m.groups()[1:]) for m in ROW.finditer(report)]
    steps = int(re.search(r"([\d,]+) steps\)", line).group(1).replace(",", ""))
    used = int(re.search(r"batch (\d+)", line).group(1))
    lr = float(re.search(r"learning rate ([\d.e-]+)", line).group(1))
    setup = re.search(r"\(([\d.]+) s to warm up, compile and capture\)", line)
    if fuse and setup is None:
        raise SystemExit(f"torchrun {ranks}: the steps were not fused: {line}")
    return {"ranks": ranks, "graph": graph, "asked": batch, "epochs": epochs_table,
            "fuse": fuse, "per_rank": per_rank, "lr_factor": lr_factor, "setup": float(setup.group(1)) if setup else None,
            "steps": steps, "batch": used, "lr": lr, "captured": "CUDA graph replay" in line,
            "line": line}


def time_to(run, target):
    for _, held_out, seconds, _, _ in run["epochs"]:
        if held_out <= target:
            return seconds
    return float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=128)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batches", type=lambda v: [int(b) for b in v.split(",")],
                   default=[0], help="batches one process would use, comma-separated (0: "
                   "the job's default): each runs with 1 and 2 ranks (which share it out)")
    p.add_argument("--eager", action="store_true", help="eager steps too (no CUDA graph)")
    p.add_argument("--fuse", action="store_true",
                   help="steps fused by torch.compile too, at the first batch")
    p.add_argument("--lrs", type=lambda v: [float(f) for f in v.split(",")], default=[1.0],
                   help="factors on the job's learning rate: 1 and 2 ranks run at each")
    p.add_argument("--per-rank", type=lambda v: [float(f) for f in v.split(",")], default=[],
                   help="2-rank runs with a whole batch on each rank too, at every batch, one "
                   "for each of these factors on the learning rate")
    p.add_argument("--job-seconds", type=float, default=300,
                   help="a job still running after this long is stopped (its ranks' stacks "
                   "are printed) and the bench fails")
    p.add_argument("--out")
    args = p.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        begun = time.perf_counter()
        make_records(folder, args.records, args.minutes)
        print(f"{args.records} records made in {time.perf_counter() - begun:.1f} s",
              file=sys.stderr, flush=True)
        runs = []
        first = args.batches[0] or None
        plan = [(ranks, True, first, True, False, 1.0) for ranks in (1, 2)] if args.fuse else []
        for batch in args.batches:
            plan += [(ranks, True, batch or None, False, False, f) for f in args.lrs
                     for ranks in (1, 2)]
            plan += [(2, True, batch or None, False, True, f) for f in args.per_rank]
        if args.eager or device != "cuda":
            plan += [(ranks, False, first, False, False, 1.0) for ranks in (1, 2)]
        for ranks, graph, batch, fuse, per_rank, lr_factor in plan:
            if graph and device != "cuda":
                continue
            begun = time.perf_counter()
            runs.append(run_job(folder, ranks, device, args.epochs, graph, batch, fuse,
                                args.job_seconds, per_rank, lr_factor))
            r = runs[-1]
            print(f"{ranks} rank(s), {'graph' if graph else 'eager'}"
                  f"{', fused' if fuse else ''}{', batch per rank' if per_rank else ''}, "
                  f"batch {r['batch']}: "
                  f"{r['epochs'][-1][2]:.2f} s, held-out {r['epochs'][-1][1]:.5f} "
                  f"(the job: {time.perf_counter() - begun:.1f} s)", file=sys.stderr, flush=True)
    target = max(min(e[1] for e in r["epochs"]) for r in runs)
    lines = [f"# The flagship's training over torchrun ranks ({date.today()})", "",
             f"{platform.node()}: {device}, {gpus} GPU(s) "
             f"({torch.cuda.get_device_name(0) if gpus else 'none'}), torch {torch.__version__}; "
             f"{args.records} synthetic WFDB records of {args.minutes:g} min at 360 Hz, up to "
             f"{args.epochs} epochs with early stopping. Target: held-out loss {target:.5f} "
             f"(the best every run reached). Steady epoch: median over epochs 2 on.", "",
             "| ranks | steps | batch per rank | learning rate | epochs run | best held-out | "
             "steady epoch: steps (s) | held-out (s) | ms per step | time to target (s) | "
             "vs 1 rank, same batch | to target less setup (s) | vs 1 rank | "
             "vs fastest 1 rank |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = {}
    fastest = {}
    for r in runs:
        if r["ranks"] == 1:
            kind = (r["graph"], r["fuse"])
            fastest[kind] = min(fastest.get(kind, math.inf), time_to(r, target))
    for r in runs:
        steady = r["epochs"][1:] or r["epochs"]
        step_s = statistics.median(e[3] for e in steady)
        held_s = statistics.median(e[4] for e in steady)
        per_epoch_steps = r["steps"] / len(r["epochs"])
        reached = time_to(r, target)
        # Against the 1-rank run at its batch and learning rate (a per-rank run: the first).
        key = (r["graph"], r["asked"], r["fuse"],
               args.lrs[0] if r["per_rank"] else r["lr_factor"])
        less = reached - r["setup"] if r["setup"] is not None else None
        base.setdefault(key, (reached, less))
        mode = ("CUDA graph" if r["captured"] else "eager, asked for a graph") if r["graph"] \
            else "eager"
        mode += ", fused" if r["fuse"] else ""
        mode += ", whole batch per rank" if r["per_rank"] else ""
        setup = f"{less:.2f} | {base[key][1] / less:.2f}×" if less else "– | –"
        lines.append(f"| {r['ranks']} | {mode} | {r['batch']} | {r['lr']:.3g} | "
                     f"{len(r['epochs'])} | {min(e[1] for e in r['epochs']):.5f} | "
                     f"{step_s:.3f} | {held_s:.3f} | {step_s / per_epoch_steps * 1e3:.3f} | "
                     f"{reached:.2f} | {base[key][0] / reached:.2f}× | {setup} | "
                     f"{fastest[(r['graph'], r['fuse'])] / reached:.2f}× |")
    lines += ["", "Held-out loss per epoch (seconds since training began):", ""]
    for r in runs:
        mode = ("graph" if r["graph"] else "eager") + (", fused" if r["fuse"] else "") + \
            (", whole batch per rank" if r["per_rank"] else "")
        lines.append(f"- {r['ranks']} rank(s), {mode}, batch {r['batch']}, "
                     f"learning rate {r['lr']:.3g}: " + ", ".join(
            f"{h:.4f} ({t:.2f} s; {s:.2f}+{e:.2f})" for _, h, t, s, e in r["epochs"]))
    if device == "cuda" and gpus < 2:
        lines += ["", "Both ranks share one GPU here (gloo, eager): this checks the path, not "
                  "the 2-GPU goal."]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
