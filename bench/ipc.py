"""A tensor handed to another process, side by side in one run: zerohop (shared memory: the
pickle holds a handle), torch.multiprocessing (shared-memory file descriptors), and plain
pickle of a NumPy array (the bytes go through the pipe); with --cuda, zerohop's CUDA IPC
against torch.multiprocessing's CUDA tensors.

Each hand-off is a round trip over a multiprocessing pipe to a long-lived consumer process:
send the object, the consumer unpickles it and reads its first and last elements, and answers.
With --write the consumer also adds 1 to the first element through a torch view and (CUDA)
synchronises the device before it answers, as a consumer that works on the data would; the
table then gives the consumer's own shares too (making the torch view; the write; the
synchronisation). Prints µs per hand-off (median of `--repeat`) for 1 MiB to 1 GiB, and the
paired ratio per size (the median of the two makers' per-round ratios, each round running
both back to back); the goal is zerohop at or below torch.multiprocessing at every size by
both figures, and flat in size (no copy).

    python bench/ipc.py [--cuda] [--write] [--max-mib 1024] [--out bench/results/ipc.md]
"""

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date

import numpy as np

from benchlib import emit


def consumer(conn, kind, write, view="dlpack"):
    """Receives objects until None; answers with the first and last element it reads and the
    seconds it took to make its view and (with `write`) to write and to synchronise."""
    import torch

    if kind.startswith("torch") or kind == "any-cuda":
        import torch.multiprocessing  # noqa: F401 - installs torch's reducers
    import zerohop  # noqa: F401 - the rebuild functions

    shared = kind == "any-cuda"
    while True:
        obj = conn.recv()
        if obj is None:
            return
        begun = time.perf_counter()
        if shared:
            kind = "torch-cuda" if isinstance(obj, torch.Tensor) else "zerohop-cuda"
        if kind == "zerohop-cuda":
            # CUDA array interface (v3, with the stream), DLPack (both standard views), or
            # zerohop's own hand-over (torch's raw current stream, then a capsule).
            if view == "cai":
                x = torch.as_tensor(obj, device="cuda")
            elif view == "to_framework":
                x = obj.to_framework("torch")
            else:
                x = torch.from_dlpack(obj)
        elif kind == "torch-cuda":
            x = obj
        elif hasattr(obj, "__dlpack__"):
            x = torch.from_dlpack(obj) if write else np.from_dlpack(obj)
        else:
            x = torch.from_numpy(obj) if write else np.asarray(obj)
        viewed = written = time.perf_counter()
        if write:
            x[0] += 1
            written = time.perf_counter()
            if x.device.type == "cuda":
                torch.cuda.synchronize()
        synced = time.perf_counter()
        conn.send((float(x[0]), float(x[-1]), viewed - begun, written - viewed, synced - written))
        del obj, x


def producers(cuda, event=False):
    import torch

    import zerohop
    import zerohop.memory as zm

    shared = zm.Shared()

    def zerohop_shared(n):
        zm.set_current(shared)
        try:
            t = zerohop.zeros((n,), "float32")
        finally:
            zm.reset_current()
        np.from_dlpack(t)[-1] = 1.0
        return t

    def torch_shared(n):
        t = torch.zeros(n)
        t[-1] = 1.0
        return t.share_memory_()

    def numpy_pickle(n):
        a = np.zeros(n, np.float32)
        a[-1] = 1.0
        return a

    if not cuda:
        return {"zerohop (Shared, handle)": ("zerohop", zerohop_shared),
                "torch.multiprocessing (shm fd)": ("torch", torch_shared),
                "pickle of NumPy (bytes)": ("numpy", numpy_pickle)}

    def zerohop_cuda(n):
        t = torch.zeros(n, device="cuda")
        t[-1] = 1.0
        torch.cuda.synchronize()
        return zerohop.from_dlpack(t)

    def torch_cuda(n):
        t = torch.zeros(n, device="cuda")
        t[-1] = 1.0
        torch.cuda.synchronize()
        return t

    makers = {"zerohop (CUDA IPC)": ("zerohop-cuda", zerohop_cuda),
              "torch.multiprocessing (CUDA)": ("torch-cuda", torch_cuda)}
    if event:
        class WithWorkLeft:
            """Pickles as its zerohop tensor, after queuing ~1 µs of GPU work on the tensor's
            stream: the handle then carries an event (a finished stream's carries none)."""

            def __init__(self, n):
                self.stream = torch.cuda.Stream()
                self.tensor = zerohop_cuda(n)
                self.tensor.set_stream(self.stream.cuda_stream)

            def __reduce_ex__(self, protocol):
                with torch.cuda.stream(self.stream):
                    torch.cuda._sleep(20_000)
                return self.tensor.__reduce_ex__(protocol)

        makers["zerohop (CUDA IPC, an event)"] = ("zerohop-cuda", WithWorkLeft)
    return makers


def measure(makers, sizes, repeat, write=False, warmup=20, view="dlpack", per_allocation=10,
            one_consumer=False):
    """µs per round trip (median of `repeat`, after `warmup` round trips before the first size
    and one more at each size) and the consumer's view, write and synchronisation shares,
    for every maker at every size. Each maker has a consumer of its own (with
    `one_consumer`, CUDA makers share one), and
    the makers take turns round by round (their order swapped every round), so a drift of the
    machine (clocks, other work) falls on all of them alike."""
    import torch.multiprocessing as tmp

    kind_of = {name: kind for name, (kind, _) in makers.items()}
    ctx = tmp.get_context("spawn")
    ends = {}
    for name, (kind, _) in makers.items():
        if one_consumer and ends:
            ends[name] = next(iter(ends.values()))
            continue
        parent, child = ctx.Pipe()
        kind = "any-cuda" if one_consumer else kind
        process = ctx.Process(target=consumer, args=(child, kind, write, view))
        process.start()
        ends[name] = (parent, process)
    results = {name: {} for name in makers}
    try:
        # Every consumer's first round trips pay for its start (CUDA context, caches, lazy
        # imports): run them before the first size, so its figures are not the start's.
        objs = {name: make(sizes[0] // 4) for name, (_, make) in makers.items()}
        for _ in range(warmup):
            for name in makers:
                ends[name][0].send(objs[name])
                ends[name][0].recv()
        del objs
        for nbytes in sizes:
            samples = {name: ([], [], [], []) for name in makers}
            firsts = {}
            order = list(makers)
            kept = []
            for round_ in range(repeat + 1):              # the first round trip warms up
                if round_ % per_allocation == 0:
                    # Fresh tensors every few rounds, the earlier ones kept (so the allocator
                    # cannot hand the same block back): where an allocation lands moved a
                    # whole series of CUDA round trips by up to 40 %, for either maker, so
                    # each size's figure is taken over several allocations.
                    objs = {name: make(nbytes // 4) for name, (_, make) in makers.items()}
                    kept.append(objs)
                    firsts = {}
                for name in order:
                    parent = ends[name][0]
                    started = time.perf_counter()
                    parent.send(objs[name])
                    first, last, *shares = parent.recv()
                    elapsed = time.perf_counter() - started
                    for series, value in zip(samples[name], (elapsed, *shares)):
                        series.append(value)
                    firsts[name] = firsts.get(name, 0) + 1
                    assert first == firsts[name] or kind_of[name] == "numpy" or not write, \
                        (name, nbytes, first, firsts[name])
                    assert last == 1.0, (name, nbytes, first, last)
                order.reverse()
            for name in makers:
                results[name][nbytes] = tuple(statistics.median(t[1:]) * 1e6
                                              for t in samples[name]) + (samples[name][0][1:],)
            del objs, kept
    finally:
        for parent, process in dict.fromkeys(ends.values()):
            parent.send(None)
            process.join(timeout=60)
    return results


def paired_ratio(ours, theirs):
    """The median of per-round ratios: round i of both makers ran back to back."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def verdict(of_medians, paired):
    missed = [name for name, worst in (("of the medians", of_medians), ("paired", paired))
              if worst > 1.0]
    return "met" if not missed else "missed " + " and ".join(missed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda", action="store_true", help="CUDA IPC instead of host memory")
    parser.add_argument("--write", action="store_true",
                        help="the consumer writes through a torch view and synchronises")
    parser.add_argument("--max-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--cuda-view", choices=["dlpack", "cai", "to_framework"],
                        default="dlpack",
                        help="how the zerohop consumer makes its torch view: torch.from_dlpack, "
                             "torch.as_tensor (CUDA array interface) or "
                             "Tensor.to_framework('torch')")
    parser.add_argument("--event", action="store_true",
                        help="with --cuda, a third maker: zerohop tensors whose stream has work "
                             "left when pickled, so that their handles carry an event")
    parser.add_argument("--one-consumer", action="store_true",
                        help="with --cuda, one consumer process for every maker (a pipeline's "
                             "two processes), instead of one each: a GPU switching between "
                             "several consumers' contexts costs each round trip ~100 µs")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = [1 << 20 << k for k in range(0, 11) if (1 << k) <= args.max_mib]
    measured = measure(producers(args.cuda, args.event), sizes, args.repeat, args.write,
                       view=args.cuda_view,
                       per_allocation=10 if args.cuda else args.repeat + 1,
                       one_consumer=args.one_consumer and args.cuda)
    columns = {name: {size: m[size][0] for size in sizes} for name, m in measured.items()}
    names = list(columns)
    where = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {sys.version.split()[0]}")
    lines = [
        f"# A tensor handed to another process ({'CUDA' if args.cuda else 'host'}), µs per "
        f"round trip (median of {args.repeat})"
        + (", the consumer writing and synchronising" if args.write else ""),
        "",
        f"- date: {date.today()}; {where}; "
        + ("one consumer process for every maker" if args.one_consumer and args.cuda else
           "a consumer process for each maker"),
        "",
        "| size | " + " | ".join(names) + f" | {names[0]} / {names[1]} |"
        + ("".join(f" {n}: view; write; sync |" for n in names) if args.write else ""),
        "|---|" + "---|" * (len(names) + 1) + ("---|" * len(names) if args.write else ""),
    ]
    for nbytes in sizes:
        row = [f"{columns[n][nbytes]:.0f}" for n in names]
        ratio = columns[names[0]][nbytes] / columns[names[1]][nbytes]
        parts = "".join(" " + "; ".join(f"{share:.0f}" for share in measured[n][nbytes][1:4])
                        + " |" for n in names) if args.write else ""
        lines.append(f"| {nbytes >> 20} MiB | " + " | ".join(row) + f" | {ratio:.2f}× |"
                     + parts)
    first, last = (columns[names[0]][s] for s in (sizes[0], sizes[-1]))
    worst = max(columns[names[0]][s] / columns[names[1]][s] for s in sizes)
    paired = {s: paired_ratio(measured[names[0]][s][4], measured[names[1]][s][4])
              for s in sizes}
    worst_paired = max(paired.values())
    lines += [
        "",
        f"Paired: the median over rounds of {names[0]}'s round trip over {names[1]}'s in the "
        "same round (the two run back to back, so a slow spell of the host weighs on both "
        "sides of each ratio): "
        + ", ".join(f"{s >> 20} MiB {paired[s]:.2f}×" for s in sizes) + ".",
        "",
        f"zerohop from {sizes[0] >> 20} MiB to {sizes[-1] >> 20} MiB: {first:.0f} → {last:.0f} "
        f"µs ({last / first:.2f}×, flat means no copy); worst ratio to {names[1]}: "
        f"{worst:.2f}× of the medians, {worst_paired:.2f}× paired (goal ≤ 1: "
        f"{verdict(worst, worst_paired)}).",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
