"""torch's own tools with zerohop's pool underneath, measured: each tool a torch user reaches
for, run in a fresh process per way of installing the pool, and a table of what works.

    python bench/torch_tools.py [--modes torch,allocator,mempool] [--out FILE]

Modes: "torch" (torch's own allocator, the reference), "allocator" (zerohop replaces torch's
allocator: `install(torch=True, torch_mode="allocator")`), "mempool" (torch's caching allocator
keeps its bookkeeping and takes its segments from zerohop: the default `install(torch=True)`).
Needs a CUDA GPU. A row passes only when the tool gives the right answer, not merely no error:
graph replays are compared with eager results after the memory around them was reused.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("torch", "allocator", "mempool")
MiB = 1 << 20


def install(mode: str, *, cupy: bool = False, limit: int | None = None, late: bool = False):
    if mode == "torch":
        return None
    import zerohop.memory as zm

    if late:
        import torch

        torch.empty(1, device="cuda")

    resource = zm.Pool(zm.CudaDevice(0))
    if limit is not None:
        resource = zm.Limit(resource, limit)
    return zm.install(torch=True, cupy=cupy, resource=resource, torch_mode=mode)


def zerohop_bytes(installed) -> int | None:
    if installed is None:
        return None
    return installed.stats()["torch"]["current_bytes"]


def small_model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)
    ).cuda()


def train(torch, model, steps: int, compiled=None):
    run = compiled or model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 256, device="cuda", generator=g)
        loss = (run(x) - x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def row_compile(torch, installed, mode_kw):
    model = small_model(torch)
    eager = small_model(torch)
    got = train(torch, model, 20, torch.compile(model, **mode_kw))
    want = train(torch, eager, 20)
    close = all(abs(a - b) <= 1e-3 * max(1.0, abs(b)) for a, b in zip(got, want))
    return close, f"last loss {got[-1]:.5f} (eager {want[-1]:.5f})"


def row_torch_compile(torch, installed):
    return row_compile(torch, installed, {})


def row_reduce_overhead(torch, installed):
    return row_compile(torch, installed, {"mode": "reduce-overhead"})


def row_graph_replay(torch, installed, pool=None):
    model = small_model(torch)
    static_in = torch.randn(64, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    before = zerohop_bytes(installed)
    with torch.no_grad(), torch.cuda.graph(graph, pool=None if pool is None else pool.id):
        static_out = model(static_in)
    grown = None if before is None else zerohop_bytes(installed) - before
    in_graph_pool = sum(
        s["total_size"] for s in torch.cuda.memory_snapshot()
        if tuple(s.get("segment_pool_id", ())) == tuple(graph.pool())
    )
    # Eager work after the capture may reuse any memory the graph does not own.
    poison = [torch.full((64, 512), float("nan"), device="cuda") for _ in range(32)]
    fresh = torch.randn(64, 256, device="cuda")
    static_in.copy_(fresh)
    graph.replay()
    with torch.no_grad():
        want = model(fresh)
    ok = torch.allclose(static_out, want, atol=1e-5)
    del poison
    if pool is not None:
        ok = ok and grown >= in_graph_pool > 0
    return ok, (f"replay {'matches' if ok else 'DIFFERS from'} eager; graph pool holds "
                f"{in_graph_pool // 1024} KiB; zerohop grew {grown if grown is None else grown // 1024} KiB")


def row_graph_in_zerohop(torch, installed):
    if installed is None or installed.torch_mode != "mempool":
        return False, "needs torch_mode='mempool'"
    return row_graph_replay(torch, installed, installed.graph_pool())


def row_memory_allocated(torch, installed):
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    got = torch.cuda.memory_allocated()
    seen = zerohop_bytes(installed)
    ok = got >= 64 * MiB and (seen is None or seen >= 64 * MiB)
    del x
    return ok, f"memory_allocated {got // MiB} MiB, zerohop's torch share {seen if seen is None else seen // MiB} MiB"


def row_peak(torch, installed):
    torch.cuda.reset_peak_memory_stats()
    y = torch.empty(128 * MiB, dtype=torch.uint8, device="cuda")
    del y
    peak = torch.cuda.max_memory_allocated()
    return peak >= 128 * MiB, f"max_memory_allocated {peak // MiB} MiB"


def row_empty_cache(torch, installed):
    keep = torch.full((1 << 20,), 7.0, device="cuda")
    x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    del x
    before = zerohop_bytes(installed)
    torch.cuda.empty_cache()
    after = zerohop_bytes(installed)
    # A tensor alive across empty_cache keeps its memory and values; its death and the next
    # empty_cache give the rest back.
    churn = [torch.zeros(1 << 20, device="cuda") for _ in range(8)]
    intact = bool((keep == 7.0).all())
    del keep, churn
    torch.cuda.empty_cache()
    last = zerohop_bytes(installed)
    ok = intact and (after is None or (after < 256 * MiB and last == 0))
    return ok, f"zerohop's torch share {before} -> {after} -> {last} bytes; live tensor intact: {intact}"


def row_backward_reach(torch, installed):
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        loss = model(torch.randn(512, 1024, device="cuda")).pow(2).mean()
        loss.backward()
    reserved = torch.cuda.memory_reserved() if installed is None or installed.torch_mode != "allocator" else None
    seen = zerohop_bytes(installed)
    if installed is None:
        return True, f"torch reserves {reserved // MiB} MiB"
    if reserved is None:
        return seen > 0, f"zerohop holds {seen // MiB} MiB (torch cannot say what it reserves)"
    return seen >= reserved, f"torch reserves {reserved // MiB} MiB, zerohop holds {seen // MiB} MiB"


def row_cupy_shares(torch, installed):
    import cupy

    t = torch.ones(MiB, device="cuda")
    c = cupy.ones(MiB, dtype=cupy.float32)
    if installed is None:
        return True, "not shared (torch's own allocator)"
    stats = installed.stats()
    ok = stats["torch"]["current_bytes"] >= 4 * MiB and stats["cupy"]["current_bytes"] >= 4 * MiB
    del t, c
    return ok, f"torch {stats['torch']['current_bytes'] // MiB} MiB, cupy {stats['cupy']['current_bytes'] // MiB} MiB"


def row_out_of_memory(torch, installed):
    try:
        big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    except Exception as e:  # noqa: BLE001 - which error torch raises is what is measured
        cause = e.__cause__ or e.__context__
        text = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        if cause is not None:
            text += f" (cause {type(cause).__name__}: {str(cause)[:160]})"
        notes = getattr(e, "__notes__", [])
        text += "".join(f" (note: {n[:160]})" for n in notes)
        said = "1073741824" in text and "268435456" in text
        return isinstance(e, (torch.OutOfMemoryError, MemoryError)) and said, text
    del big
    return installed is None, "no error (no limit)"


def row_record_stream(torch, installed):
    """Tensors used on a side stream (record_stream, as DataLoader's pinned copies and DDP's
    buckets do), freed and made again 200 times: their memory must be reused, not grow."""
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved() if installed is None or installed.torch_mode != "allocator" else None
    for _ in range(200):
        x = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(side):
            x.add_(1)
        x.record_stream(side)
        del x
    torch.cuda.synchronize()
    if before is None:
        grown = zerohop_bytes(installed)
    else:
        grown = torch.cuda.memory_reserved() - before
    torch.cuda.empty_cache()
    after = zerohop_bytes(installed) if installed is not None else torch.cuda.memory_reserved()
    # torch defers these blocks' events while a pool route is on ("mempool"): their memory
    # comes back at empty_cache, which the row checks; the growth before it is reported.
    return after < 64 * MiB, (f"grew {grown // MiB} MiB over 200 freed 8 MiB tensors; "
                              f"{after // MiB} MiB held after empty_cache")


def row_late_install(torch, installed):
    x = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    seen = zerohop_bytes(installed)
    del x
    return seen is None or seen >= 16 * MiB, f"zerohop's torch share {seen} bytes"


ROWS = {
    "torch.compile, 20 steps": (row_torch_compile, {}),
    'torch.compile mode="reduce-overhead", 20 steps': (row_reduce_overhead, {}),
    "torch.cuda.graph capture, replay after reuse": (row_graph_replay, {}),
    "torch.cuda.graph in installed.graph_pool()": (row_graph_in_zerohop, {}),
    "memory_allocated()": (row_memory_allocated, {}),
    "reset_peak_memory_stats / max_memory_allocated": (row_peak, {}),
    "empty_cache() returns memory": (row_empty_cache, {}),
    "backward's memory from the pool": (row_backward_reach, {}),
    "CuPy and torch share the pool": (row_cupy_shares, {"cupy": True}),
    "1 GiB past a 256 MiB limit": (row_out_of_memory, {"limit": 256 * MiB}),
    "install after torch allocated": (row_late_install, {"late": True}),
    "record_stream on a side stream, 200 tensors": (row_record_stream, {}),
}


def child(mode: str, row: str) -> None:
    import torch

    fn, kw = ROWS[row]
    try:
        installed = install(mode, **kw)
        ok, detail = fn(torch, installed)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any failure is the measured result
        ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    print(json.dumps({"ok": bool(ok), "detail": detail}))


def alloc_free_us(mode: str) -> None:
    """Python-level torch.empty + del pairs, µs each, per size."""
    import torch

    install(mode)
    out = {}
    for label, n in (("256 B", 256), ("1 MiB", MiB), ("64 MiB", 64 * MiB)):
        for _ in range(100):
            torch.empty(n, dtype=torch.uint8, device="cuda")
        reps = 20000
        start = time.perf_counter()
        for _ in range(reps):
            torch.empty(n, dtype=torch.uint8, device="cuda")
        out[label] = (time.perf_counter() - start) / reps * 1e6
    print(json.dumps(out))


SHAPES = [(b, t) for b in (8, 16, 32) for t in (64, 256)]


def training_setup(mode: str, compiled: str):
    """A 6-layer transformer trained on batches of varying shapes (8–32 × 64–256 tokens),
    eager or under torch.compile(mode="reduce-overhead") (CUDA graphs), every shape seen
    three times: torch, what `install` returned, and one step's function."""
    import torch

    installed = install(mode)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(x):
        return model(x).pow(2).mean()

    run = step
    if compiled == "reduce-overhead":
        torch._dynamo.config.recompile_limit = 64
        run = torch.compile(step, mode="reduce-overhead")
    inputs = {shape: torch.randn(*shape, 256, device="cuda") for shape in SHAPES}

    def once(shape):
        loss = run(inputs[shape])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        for shape in SHAPES:
            once(shape)
    torch.cuda.synchronize()
    return torch, installed, once


def timed_steps(torch, once, passes: int) -> float:
    """Milliseconds a step over `passes` passes through every shape."""
    order = SHAPES * passes
    torch.cuda.synchronize()
    start = time.perf_counter()
    for shape in order:
        once(shape)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / len(order) * 1e3


def train_step_ms(mode: str, compiled: str) -> None:
    """Milliseconds per step in one process of `mode`, after every shape was seen."""
    torch, _, once = training_setup(mode, compiled)
    print(json.dumps({"step_ms": timed_steps(torch, once, 10)}))


def train_step_ab(compiled: str, blocks: int) -> None:
    """Both allocators in one process, taking turns: zerohop's route (install's default
    mode) on for one block of steps, off for the next (torch's caching allocator over its own
    cudaMalloc), in alternating order, so the two share the process, its clocks and its
    placement, which swing a process's step time by ±15 % from one process to the next.
    Prints each block's time and the median of the paired ratios."""
    torch, installed, once = training_setup("mempool", compiled)
    route = installed._torch_route
    device, pool = route.device, route.pool

    routed = [True]

    def zerohop_on(on: bool) -> None:
        if on == routed[0]:
            return
        if on:
            torch._C._cuda_beginAllocateToPool(device, pool.id)
        else:
            torch._C._cuda_endAllocateToPool(device, pool.id)
        routed[0] = on

    # torch's own pool warms up as zerohop's did.
    zerohop_on(False)
    timed_steps(torch, once, 3)
    zerohop_on(True)
    times: dict[str, list[float]] = {"zerohop": [], "torch": []}
    for k in range(blocks):
        for name in (("zerohop", "torch") if k % 2 == 0 else ("torch", "zerohop")):
            zerohop_on(name == "zerohop")
            times[name].append(timed_steps(torch, once, 2))
    zerohop_on(True)
    ratios = [z / t for z, t in zip(times["zerohop"], times["torch"])]
    print(json.dumps({"compiled": compiled, "blocks": blocks, "zerohop_ms": times["zerohop"],
                      "torch_ms": times["torch"], "ratio_median": statistics.median(ratios),
                      "ratio_range": [min(ratios), max(ratios)],
                      "zerohop_faster": sum(r < 1.0 for r in ratios),
                      "zerohop_torch_bytes": installed.stats()["torch"]["current_bytes"]}))


def training_table(modes: list[str], repeat: int) -> list[str]:
    lines = ["", f"| training step, 6-layer transformer, shapes varying (median of {repeat} "
             "processes, modes interleaved) | " + " | ".join(modes) + " | mempool / torch |",
             "|---" * (len(modes) + 2) + "|"]
    for compiled in ("eager", "reduce-overhead"):
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(repeat):
            for m in modes:
                runs[m].append(run_child(["--train", m, compiled]))
        got = {}
        for m, measured in runs.items():
            steps = sorted(r["step_ms"] for r in measured if "step_ms" in r)
            got[m] = {"step_ms": steps[len(steps) // 2]} if steps else measured[-1]
        cells = [f"{got[m]['step_ms']:.2f} ms" if "step_ms" in got[m] else got[m].get("detail", "?")
                 for m in modes]
        ratio = ""
        if "step_ms" in got.get("mempool", {}) and "step_ms" in got.get("torch", {}):
            ratio = f"{got['mempool']['step_ms'] / got['torch']['step_ms']:.3f}×"
        lines.append(f"| {compiled} | " + " | ".join(cells) + f" | {ratio} |")
        print(lines[-1], flush=True)
    return lines


def run_child(args: list[str]) -> dict:
    try:
        done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                              timeout=400)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": "timed out (400 s)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "detail": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out")
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "ROW"))
    parser.add_argument("--timing", metavar="MODE")
    parser.add_argument("--train", nargs=2, metavar=("MODE", "COMPILED"))
    parser.add_argument("--no-training", action="store_true", help="leave the training table out")
    parser.add_argument("--training-only", action="store_true",
                        help="only the training table (its processes take most of the time)")
    parser.add_argument("--repeat", type=int, default=3, help="processes per training figure")
    parser.add_argument("--train-ab", metavar="COMPILED", choices=("eager", "reduce-overhead"),
                        help="both allocators taking turns in one process (see train_step_ab)")
    parser.add_argument("--blocks", type=int, default=20, help="block pairs for --train-ab")
    args = parser.parse_args()
    if args.train_ab:
        train_step_ab(args.train_ab, args.blocks)
        return 0
    if args.train:
        train_step_ms(*args.train)
        return 0
    if args.child:
        child(*args.child)
        return 0
    if args.timing:
        alloc_free_us(args.timing)
        return 0
    modes = args.modes.split(",")
    if args.training_only:
        table = "\n".join(training_table([m for m in modes if m != "allocator"], args.repeat))
        print(table)
        if args.out:
            with open(args.out, "w") as f:
                f.write(f"# Training with zerohop's pool under torch\n\n{table}\n")
        return 0
    jobs = {(m, r): ["--child", m, r] for m in modes for r in ROWS}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        results = dict(zip(jobs, ex.map(run_child, jobs.values())))
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.repeat):
        for m in modes:
            runs[m].append(run_child(["--timing", m]))
    timings = {}
    for m, measured in runs.items():
        ok = [r for r in measured if "256 B" in r]
        timings[m] = ({size: sorted(r[size] for r in ok)[len(ok) // 2] for size in ok[0]}
                      if ok else measured[-1])
    lines = ["| what a torch user does | " + " | ".join(modes) + " |",
             "|---" * (len(modes) + 1) + "|"]
    for r in ROWS:
        cells = []
        for m in modes:
            res = results[(m, r)]
            cells.append(("works" if res["ok"] else "**fails**") + ": " + res["detail"].replace("|", "/"))
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    for size in ("256 B", "1 MiB", "64 MiB"):
        cells = [f"{timings[m][size]:.2f} µs" if size in timings[m] else timings[m].get("detail", "?")
                 for m in modes]
        lines.append(f"| torch.empty + free, {size} (median of {args.repeat}) | "
                     + " | ".join(cells) + " |")
    if not args.no_training:
        # "allocator" cannot run reduce-overhead, and its eager steps are torch's own.
        lines += training_table([m for m in modes if m != "allocator"], args.repeat)
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# torch's tools with zerohop's pool\n\n{os.environ.get('ZH_DEVICE', '')}\n\n{table}\n")
    failed = [(m, r) for (m, r), res in results.items() if m == "mempool" and not res["ok"]]
    for m, r in failed:
        print(f"mempool mode fails: {r}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
