"""Where a training step of the flagship's VAE spends its time: ms per step against the batch
size, eager and replayed from a CUDA graph, on one device, side by side in one run. A step
whose time grows with the batch is bound by the GPU's work; one whose time does not, by
launching kernels (or, for a graph, by the kernels' fixed cost). `--fuse` adds the step
compiled by torch.compile (fused kernels) and replayed, at the batches `--fused-batches`
names (each compiles anew: tens of seconds). On the CPU (or with `--cpu` on a GPU machine)
it compares the step through zerohop's CPU training kernels (zerohop_ecg.cpu_pass) with the
same step through torch's autograd, alternating them, on every thread torch uses.

    python bench/ecg_step.py [--width 256] [--fuse] [--fused-batches 64,…] [--cpu] [--out FILE]
"""

import argparse
import os
import platform
import time
from datetime import date

import torch

from benchlib import emit
from zerohop_ecg import cpu_pass
from zerohop_ecg.malloc import keep_freed_memory
from zerohop_ecg.step import TrainingStep
from zerohop_ecg.vae import LightVAE, vae_loss

BATCHES = (64, 128, 256, 512, 1024, 2048, 4096)


def ms_per_step(device, width, batch, capture, steps=60, fuse=False, kernels=False):
    torch.manual_seed(0)
    data = torch.randn(max(4 * batch, 8192), width, device=device)
    model = LightVAE(width).to(device)

    def loss(x):
        recon, mu, logvar = model(x)
        return vae_loss(recon, x, mu, logvar)

    step = TrainingStep(model, data, loss, batch, 1e-3, capture=capture, fuse=fuse)
    if kernels:
        step.gradients, why = cpu_pass.for_model(model, step.flat, data)
        if why is not None:
            raise SystemExit(f"zerohop's CPU kernels cannot train this model: {why}")
    batches = torch.randint(0, len(data), (steps + 10, batch), device=device)
    for b in batches[:10]:  # warm-up and capture
        step(b)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    begun = time.perf_counter()
    for b in batches[10:]:
        step(b)
    sync()
    if fuse and not step.fused:
        raise SystemExit(f"batch {batch}: the step was not fused: {step.why_unfused}")
    return (time.perf_counter() - begun) / steps * 1e3, step.captured


CPU_BATCHES = (256, 1024, 4096)


def cpu_kernels_table(width, rounds=3):
    """ms per CPU step through torch's autograd and through zerohop's kernels, alternated
    `rounds` times (the median of each kept): the host's drift hits both alike."""
    lines = ["", f"CPU step, {torch.get_num_threads()} threads: torch's autograd against "
             f"zerohop's training kernels (zerohop_ecg.cpu_pass; median of {rounds} alternated "
             "runs of 40 steps; forward, backward and Adam)", "",
             "| batch | autograd ms/step | zerohop kernels ms/step | speed-up |",
             "|---:|---:|---:|---:|"]
    for batch in CPU_BATCHES:
        times = {True: [], False: []}
        for _ in range(rounds):
            for on in (False, True):
                times[on].append(ms_per_step("cpu", width, batch, False, steps=40,
                                             kernels=on)[0])
        plain, ours = (sorted(times[k])[rounds // 2] for k in (False, True))
        lines.append(f"| {batch} | {plain:.2f} | {ours:.2f} | {plain / ours:.2f}× |")
    return lines


def kernel_profile(width, batch, steps=10, top=12):
    """The GPU's time per step by operator (eager steps: a graph replays the same kernels)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    data = torch.randn(2 * batch, width, device="cuda")
    model = LightVAE(width).cuda()

    def loss(x):
        recon, mu, logvar = model(x)
        return vae_loss(recon, x, mu, logvar)

    step = TrainingStep(model, data, loss, batch, 1e-3, capture=False)
    batches = torch.randint(0, len(data), (steps + 3, batch), device="cuda")
    for b in batches[:3]:
        step(b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for b in batches[3:]:
            step(b)
        torch.cuda.synchronize()

    def device_us(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)

    events = sorted(prof.key_averages(), key=device_us, reverse=True)
    total = sum(device_us(e) for e in events)
    lines = ["", f"GPU time per eager step at batch {batch}, by operator (self time; "
             f"{total / steps / 1e3:.3f} ms in all):", "",
             "| operator | calls per step | µs per step | share |", "|---|---:|---:|---:|"]
    for e in events[:top]:
        if device_us(e) <= 0:
            break
        lines.append(f"| `{e.key[:60]}` | {e.count / steps:.0f} | {device_us(e) / steps:.1f} | "
                     f"{device_us(e) / total * 100:.1f} % |")
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="let cuDNN time its algorithms for each shape and keep the fastest")
    p.add_argument("--fuse", action="store_true",
                   help="also the step compiled by torch.compile, replayed from a CUDA graph")
    p.add_argument("--fused-batches", type=lambda v: [int(b) for b in v.split(",")],
                   default=[64, 1024, 2048, 4096])
    p.add_argument("--cpu", action="store_true",
                   help="only the CPU comparison of autograd and zerohop's training kernels "
                   "(see the module's note)")
    p.add_argument("--out")
    args = p.parse_args()
    # One compilation per batch (and model): more than dynamo keeps by default.
    torch._dynamo.config.cache_size_limit = 64
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    if device == "cpu":
        # As the job does: otherwise every autograd step faults its activations in afresh.
        keep_freed_memory()
        name = platform.processor() or platform.machine()
        emit([f"# A CPU training step of the flagship's VAE ({date.today()})", "",
              f"{platform.node()}: {name}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
              f"beats of {args.width} samples; glibc's malloc keeping freed memory, as the job "
              "does."] + cpu_kernels_table(args.width), args.out)
        return
    cudnn = ("benchmark mode (fastest algorithm per shape, timed)" if args.cudnn_benchmark
             else "heuristics (the default)")
    name = torch.cuda.get_device_name(0)
    lines = [f"# A training step of the flagship's VAE against its batch ({date.today()})", "",
             f"{platform.node()}: {device} ({name}), torch {torch.__version__}; beats of "
             f"{args.width} samples; mean over 60 steps after 10; cuDNN {cudnn}.", "",
             "| batch | eager ms/step | graph ms/step | graph µs per beat | eager / graph | "
             "fused graph ms/step | graph / fused graph |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for batch in BATCHES:
        eager, _ = ms_per_step(device, args.width, batch, False)
        graph, captured = ms_per_step(device, args.width, batch, True)
        fused = "– | –"
        if args.fuse and batch in args.fused_batches:
            ms, _ = ms_per_step(device, args.width, batch, True, fuse=True)
            fused = f"{ms:.3f} | {graph / ms:.2f}×"
        if not captured:
            lines.append(f"| {batch} | {eager:.3f} | – | – | – | {fused} |")
            continue
        lines.append(f"| {batch} | {eager:.3f} | {graph:.3f} | {graph / batch * 1e3:.2f} | "
                     f"{eager / graph:.2f}× | {fused} |")
    if device == "cuda":
        lines += kernel_profile(args.width, 4096)
    emit(lines, args.out)


if __name__ == "__main__":
    main()
