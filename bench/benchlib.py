"""What every cross-framework bench script shares: timing and writing its table."""

import statistics
import timeit
from pathlib import Path


def median_us(fn, number, repeat=7, sync=None):
    """Median over `repeat` runs of the mean µs per call of `fn` (after one warm-up call).
    `sync` (e.g. torch.cuda.synchronize) runs after the warm-up."""
    fn()
    if sync is not None:
        sync()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def interleaved_median_us(bodies, rounds=15):
    """Median µs per call of each `(fn, number)` in `bodies`, measured in interleaved rounds
    (every body once per round), so that a noisy neighbour slows all of them alike instead of
    whichever happened to run at that moment."""
    for fn, _ in bodies:
        fn()
    times = [[] for _ in bodies]
    for _ in range(rounds):
        for slot, (fn, number) in zip(times, bodies):
            slot.append(timeit.timeit(fn, number=number) / number * 1e6)
    return [statistics.median(slot) for slot in times]


def emit(lines, out=None):
    """Prints the Markdown table and, with `out`, writes it there too."""
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return text


def best_fresh_run(script, which, csv, runs=2):
    """Runs `script --child which csv` in fresh processes (so peak memory is the run's own)
    and returns the parsed JSON result with the smallest total time."""
    import json
    import subprocess
    import sys

    best = None
    for _ in range(runs):
        out = subprocess.run([sys.executable, script, "--child", which, str(csv)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{which} failed:\n{out.stderr[-4000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or sum(result["times"].values()) < sum(best["times"].values()):
            best = result
    return best


def child_run_args(doc, child, samples=20_000_000):
    """The arguments of an ECG bench script: `--samples`, `--out`, and the hidden `--child
    which csv` that best_fresh_run uses. Runs `child(which, csv)` and returns None in a child
    process; returns the parsed arguments in the parent."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--out")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return None
    return args


def blog_reference_stages(xp, maximum_filter1d, signal, lap):
    """The blog's segmentation in array-library style, for NumPy/SciPy or CuPy/cupyx (`xp`
    and its `maximum_filter1d`): FFT curvature with a 30-tap Ricker wavelet, a 180-sample
    sliding-maximum gate with the plateau fix, pruning to 100..256 samples, beats embedded in
    256-wide rows. `lap(name)` is called after each stage. Returns the beat matrix."""
    w = 30
    x = xp.linspace(-3, 3, w)
    kernel = xp.zeros(len(signal), xp.float32)
    kernel[:w] = xp.exp(-x * x / 2) * (1 - x * x) * 2 / xp.sqrt(w)
    curv = xp.fft.irfft(xp.fft.rfft(signal) * xp.fft.rfft(kernel), len(signal)).astype(xp.float32)
    lap("curvature")
    window = 180
    centre = (window + 1) // 2
    # maximum over curv[p .. p+window-1], compared with curv[p + centre]
    peak = maximum_filter1d(curv, size=window, origin=-(window // 2), mode="nearest")
    n_out = len(curv) - window + 1
    gates = (peak[:n_out] == curv[centre:centre + n_out]).astype(xp.int8)
    gates[1:] = gates[1:] * ((gates[1:] - gates[:-1]) == 1)
    indices = xp.flatnonzero(gates)
    lap("gates")
    lengths = xp.diff(indices)
    keep = (lengths >= 100) & (lengths <= 256)
    starts, lens = indices[:-1][keep], lengths[keep]
    cols = xp.arange(256)
    take = starts[:, None] + cols[None, :]
    mask = cols[None, :] < lens[:, None]
    beats = xp.where(mask, signal[xp.minimum(take, len(signal) - 1)], 0.0).astype(xp.float32)
    lap("prune + embed")
    return beats
