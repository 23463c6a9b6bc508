"""The GPU ECG job's training with one shared zerohop pool (the default: the reader, zerohop's
kernels and torch with its CUDA graphs draw from it) against torch's own caching allocator
(`--no-shared-pool`), side by side: each run a fresh process, the modes alternating.

    python bench/ecg_shared_pool.py [--runs 3] [--synthetic-hours 1] [--out FILE]

Prints the median "train LightVAE" stage and the whole job per mode, and their ratio.
Goal (issue 42): shared pool ≤ 1.0× torch's allocator's training time.
"""

import argparse
import datetime
import re
import statistics
import subprocess
import sys
import tempfile

TRAIN = "train LightVAE (PyTorch)"


def one_run(args: list[str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "zerohop_ecg", "--device", "cuda",
                               "--no-plots", "--out", out, *args],
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the job failed: {done.stderr[-2000:]}")
    stages = {}
    for line in done.stdout.splitlines():
        match = re.match(r"(.+?)\s+(\d+\.\d+)\s+[\d,]+$", line.strip())
        if match:
            stages[match.group(1).strip()] = float(match.group(2))
    return stages[TRAIN], sum(stages.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synthetic-hours", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()
    job = ["--synthetic", str(args.synthetic_hours), "--epochs", str(args.epochs)]
    modes = {"shared zerohop pool": [], "torch's own allocator": ["--no-shared-pool"]}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode, extra in modes.items():
            times[mode].append(one_run(job + extra))
    lines = [f"# The GPU job's training: shared pool vs torch's allocator ({datetime.date.today()})",
             "", f"job: `python -m zerohop_ecg --device cuda {' '.join(job)} --no-plots`, "
             f"{args.runs} runs per mode, fresh processes, medians", "",
             "| mode | train stage (s) | stages in all (s) |", "|---|---|---|"]
    med = {}
    for mode, runs in times.items():
        train = statistics.median(t for t, _ in runs)
        total = statistics.median(a for _, a in runs)
        med[mode] = train
        lines.append(f"| {mode} | {train:.3f} | {total:.3f} |")
    ratio = med["shared zerohop pool"] / med["torch's own allocator"]
    # Each run beside the other mode's run of the same round: the pairs' ratios, and how
    # often the shared pool was the faster, say whether the medians' ratio is more than noise.
    pairs = [s[0] / o[0] for s, o in zip(*times.values())]
    faster = sum(r < 1.0 for r in pairs)
    lines += ["", f"shared / own (training): {ratio:.3f}× (goal ≤ 1.0×); pairs' ratios: median "
              f"{statistics.median(pairs):.3f}×, {min(pairs):.3f}–{max(pairs):.3f}×, the shared "
              f"pool faster in {faster} of {len(pairs)}"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
