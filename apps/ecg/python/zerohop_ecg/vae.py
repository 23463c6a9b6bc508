"""LightVAE, the small variational autoencoder of the Part 3 pipeline, for beats of any
power-of-two width: three conv + swish + fixed [1, 2, 1] stride-2 downsampling stages, a
2-d latent (mean over length of two conv heads), and a mirrored decoder."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Self, TextIO, TypeAlias, TypedDict, TypeVar

import torch
from torch import nn
import torch.nn.functional as F

from . import cpu_pass
from .step import Reduce, TrainingStep

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    # mypy does not read torch (tests/typing/mypy.ini), so nn.Module is Any to it, and
    # --strict forbids subclassing Any: the models' base as mypy sees it, what they use of it.
    class _Module:
        def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
        def parameters(self) -> Iterator[torch.Tensor]: ...
        def buffers(self) -> Iterator[torch.Tensor]: ...
        def register_buffer(self, name: str, tensor: torch.Tensor | None) -> None: ...
        def to(self, device: Device) -> Self: ...
        def to_empty(self, *, device: Device) -> Self: ...
        def train(self, mode: bool = True) -> Self: ...
        def eval(self) -> Self: ...
else:
    _Module = nn.Module

#: A torch device or its name ("cpu", "cuda", "cuda:1").
Device: TypeAlias = "str | torch.device"
#: The training beats: one (rows, width) tensor, or one per record.
Beats: TypeAlias = "torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, ...]"
#: How training shows progress: a bar (True), a line every few seconds ("lines"), none.
Progress: TypeAlias = "bool | str"

#: Adam's learning rate for batches up to LR_BATCH beats. The Part 3 blog trains with Adam's
#: default, 1e-3; twice that gave a held-out loss 3 times lower after the same 30 epochs
#: (a 4-hour record on the CPU: 0.070 against 0.024) and half the time to a given loss on a
#: GPU (bench/results/gpu-h200x2-2026-11-26-lr.md); 4e-3 and 8e-3 gained little more.
LR = 2e-3

#: Held-out beats the loss is measured on after each epoch, to decide when training stops:
#: a day-long record holds 25,000 beats out, and measuring every one of them after each of
#: 30 epochs took 3 s of a 40-s job on 16 CPU cores (8 s of 2 minutes on 2). The same
#: beats each epoch, so epochs compare on equal terms; the loss once training has ended is
#: measured over every held-out beat.
MONITORED_BEATS = 8192


class Swish(_Module):
    """x · sigmoid(α x) with one learnable α, shared by every layer that uses the instance."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.alpha * x)


class Down(_Module):
    """Fixed (not learned) depthwise [1, 2, 1] filter with stride 2: halves the length."""

    kernel: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.register_buffer("kernel", torch.tensor([1.0, 2.0, 1.0]).repeat(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and x.shape[-1] % 2 == 0:
            # Written as strided slices (y[i] = x[2i-1] + 2 x[2i] + x[2i+1], x[-1] = 0),
            # which Inductor fuses with the swish before it, forwards and backwards; eagerly
            # one depthwise convolution is fewer kernels.
            left = F.pad(x, (1, 0))[..., 0:-1:2]
            return left + 2 * x[..., 0::2] + x[..., 1::2]
        return F.conv1d(x, self.kernel, stride=2, padding=1, groups=self.channels)


class LightVAE(_Module):
    def __init__(self, width: int = 256, latent: int = 2) -> None:
        super().__init__()
        if width < 8 or width & (width - 1):
            raise ValueError(f"width {width} must be a power of two >= 8")
        self.width = width
        self.swish = Swish()
        self.enc = nn.ModuleList([nn.Conv1d(1, 4, 3, padding=1), nn.Conv1d(4, 8, 3, padding=1),
                                  nn.Conv1d(8, 16, 3, padding=1)])
        self.down = nn.ModuleList([Down(4), Down(8), Down(16)])
        self.mu_head = nn.Conv1d(16, latent, 3, padding=1)
        self.logvar_head = nn.Conv1d(16, latent, 3, padding=1)
        self.project = nn.Linear(latent, 8 * (width // 8))
        self.dec = nn.ModuleList([nn.Conv1d(8, 4, 3, padding=1), nn.Conv1d(4, 2, 3, padding=1),
                                  nn.Conv1d(2, 1, 3, padding=1)])

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for conv, down in zip(self.enc, self.down):
            x = down(self.swish(conv(x)))
        return self.mu_head(x).mean(-1), self.logvar_head(x).mean(-1)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        x = self.project(z).view(-1, 8, self.width // 8)
        for i, conv in enumerate(self.dec):
            x = conv(double_length(x))
            if i < 2:
                x = self.swish(x)
        return x

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


def double_length(x: torch.Tensor) -> torch.Tensor:
    """Every sample repeated once along the last axis: nearest-neighbour upsampling by 2, the
    values and gradients of `F.interpolate(x, scale_factor=2, mode="nearest")` bit for bit.
    On an H100 F.interpolate's 1-d kernels took 69 % of a training step's GPU time
    (bench/ecg_step.py); this is a broadcast and, backwards, a sum of pairs."""
    return x.unsqueeze(-1).expand(*x.shape, 2).reshape(*x.shape[:-1], 2 * x.shape[-1])


#: Nats of KL divergence each latent dimension of a beat may carry for free ("free bits",
#: Kingma et al., "Improved Variational Inference with Inverse Autoregressive Flow", 2016).
FREE_NATS = 0.5


def vae_loss(recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor,
             logvar: torch.Tensor) -> torch.Tensor:
    """Σ over the batch of the per-beat mean squared error, plus the Part 3 notebook's KL term
    (weight 0.1 on −(1 + logvar − μ² − e^logvar), i.e. 0.2 × the KL in nats, averaged over the
    latent dimensions), with each beat's KL per dimension floored at FREE_NATS.

    Without the floor the latent collapses, as it did in the notebook (|μ| ≲ 0.04): the
    divergence costs more than the beats' differences save in reconstruction, so every μ sits
    at the prior's mean, the decoder ignores it and the decoded grid shows 25 copies of one
    beat. Below the floor the divergence costs nothing more, so the encoder uses the latent:
    on MIT-BIH record 100 the reconstruction error fell from 0.074 to 0.061 (normalised units)
    and the grid's beats differ by up to 0.5. The floor is per beat, so the loss stays a sum
    over beats: ranks that share a batch out still train as one process does."""
    mse = ((recon - x) ** 2).mean(dim=(1, 2)).sum()
    nats = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
    return mse + 0.2 * nats.clamp(min=FREE_NATS).mean(dim=1).sum()


#: Seconds between progress lines when the output is not a terminal (a log, a pipe, CI).
PROGRESS_EVERY_S = 5.0


def _progress(epoch: int, epochs: int, loss: float, started: float, mode: Progress = True,
              state: dict[str, float] | None = None, stream: TextIO | None = None) -> None:
    """A bar redrawn in place on a terminal (`mode` True); with `mode` "lines", one line every
    PROGRESS_EVERY_S seconds (and at the end) with the time left, for logs and pipes."""
    stream = stream if stream is not None else sys.stderr  # the one in force now
    elapsed = time.perf_counter() - started
    if mode == "lines":
        state = state if state is not None else {}
        if epoch < epochs and elapsed - state.get("last", 0.0) < PROGRESS_EVERY_S:
            return
        state["last"] = elapsed
        left = elapsed / epoch * (epochs - epoch)
        stream.write(f"  training: epoch {epoch}/{epochs}, loss {loss:.5f}, {elapsed:.0f} s"
                     + (f", about {left:.0f} s left\n" if epoch < epochs else ", done\n"))
        stream.flush()
        return
    done = int(30 * epoch / epochs)
    stream.write(f"\r  training [{'#' * done}{'.' * (30 - done)}] epoch {epoch}/{epochs} "
                 f"loss {loss:.5f} {elapsed:5.1f}s")
    if epoch == epochs:
        stream.write("\n")
    stream.flush()


def training_threads(requested: int | None = None) -> int:
    """CPU threads for training: `requested`, else the cores this process may use less the
    ones other work keeps busy (the 1-minute load average), but never fewer than its physical
    cores: load from other work is shared by the scheduler, and a day-long record trained on
    one thread of a busy machine took minutes. At most MAX_TRAINING_THREADS."""
    if requested is not None:
        return max(1, int(requested))
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    busy = int(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
    return max(1, min(max(physical_cores(allowed), len(allowed) - busy), MAX_TRAINING_THREADS))


#: The most CPU threads training takes by default. On a 16-core machine a day-long record
#: trained in 30 s on 16 threads against 39 s on 8 (bench/results/gpu-h200-2026-11-26.md);
#: larger machines are not measured.
MAX_TRAINING_THREADS = 16


def physical_cores(cpus: Sequence[int]) -> int:
    """How many physical cores the logical `cpus` belong to (hyper-threads share one), from
    Linux's topology files; `len(cpus)` where they cannot be read."""
    cores: set[str] = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


class Training(TypedDict):
    """What `_train` returns; `train` adds the CPU threads used (`Trained`)."""

    model: LightVAE
    center: float
    scale: float
    train_idx: torch.Tensor
    test_idx: torch.Tensor
    losses: list[float]
    held_out: list[float]
    epoch_seconds: list[float]
    epoch_split: list[tuple[float, float]]
    test_loss: float
    batch_size: int
    lr: float
    epochs_run: int
    best_epoch: int
    stopped_early: bool
    steps: int
    captured: bool
    why_eager: str | None
    fused: bool
    why_unfused: str | None
    #: Whether the CPU steps ran zerohop's kernels (`cpu_pass`), and why not (None when they
    #: did; "asked", "not on the CPU", ...).
    cpu_kernels: bool
    why_autograd: str | None
    setup_seconds: float
    beats_trained: int
    #: Held-out beats (every rank's), and how many of them the loss was measured on after
    #: each epoch (`monitored`); `test_loss` is over all of them.
    held_out_beats: int
    monitored_beats: int


class Trained(Training):
    """What `train` returns (see there)."""

    threads: int


def train(beats: Beats, *, epochs: int = 30, batch_size: int | None = None, lr: float = LR,
          seed: int = 42, device: Device = "cpu", progress: Progress = True,
          threads: int | None = None, cuda_graph: bool = True, fuse: bool = False,
          batch_per_rank: bool = False, monitored: int | None = None,
          cpu_kernels: bool = True, ends: NDArray[np.int64] | None = None) -> Trained:
    """Trains on 75 % of `beats` (n, width) and tests on the rest. Beats are normalised by one
    global shift and scale (their mean and standard deviation), so the model, its losses and
    the outlier scores are the same whatever the input's units (mV or ADC counts); the KL
    term's free nats (`vae_loss`) keep the latent in use. Each beat's baseline is levelled
    first (`level_baseline_`; to its own part's end with `ends`, one per row in order).
    The batch (default: `default_batch`) shrinks to a sixteenth of the training
    set when that is smaller, so a short recording still gets enough optimiser steps; above
    LR_BATCH beats the learning rate grows with the batch's square root. Under torchrun the
    ranks share the batch out (the same training as one process, sooner), or with
    `batch_per_rank` each rank takes a whole batch: N ranks step on N batches at once, an
    epoch has N times fewer steps and the learning rate grows with the combined batch.

    Training stops early once the held-out loss has not improved for PATIENCE epochs; that
    loss is measured after each epoch on `monitored` of the held-out beats (the same ones
    every epoch; None: MONITORED_BEATS, 0: all of them), and once training ends on all.
    On a GPU each full batch's step replays one CUDA graph (see `step.TrainingStep`) unless
    `cuda_graph` is False. With `fuse` the steps run a forward pass and Adam compiled by
    torch.compile (fewer, fused kernels, after a compilation of tens of seconds). On the CPU
    (unfused) each step's loss and gradients come from zerohop's kernels (`cpu_pass`: the
    same values, several times faster than autograd) unless `cpu_kernels` is False.

    Returns a dict: model, center, scale, train_idx, test_idx, losses and held_out (per
    epoch run), epoch_seconds (since training began, at the end of each epoch), epoch_split
    (per epoch: seconds in the steps, seconds measuring the held-out loss), test_loss
    (the last model's held-out loss over every held-out beat), held_out_beats and
    monitored_beats (how many beats per-epoch `held_out` was measured on), epochs_run,
    best_epoch, stopped_early, batch_size and lr (the ones used), steps, beats_trained,
    captured (whether steps replayed a CUDA graph) and why_eager (why not, or None), fused
    (whether steps ran compiled code) and why_unfused (why not, or None), cpu_kernels
    (whether steps ran zerohop's CPU kernels) and why_autograd (why not, or None),
    setup_seconds (warm-up steps, compilation and capture), threads (CPU threads used, see
    `training_threads`)."""
    if monitored is not None and monitored < 0:
        raise ValueError(f"monitored={monitored}: the held-out beats to watch are 0 (all) or "
                         "more")
    threads = training_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = _train(beats, epochs, batch_size, lr, seed, device, progress, cuda_graph,
                        fuse, batch_per_rank, monitored, cpu_kernels, ends)
    finally:
        torch.set_num_threads(before)
    return {**result, "threads": threads}


def warm_up(device: Device, width: int = 256, rows: int = 64) -> None:
    """One forward and backward pass of a LightVAE over zeros on `device`, so that the GPU's
    first-use costs (cuDNN's and cuBLAS's handles, loading kernels, choosing convolution
    algorithms: 0.5–0.9 s on an H100) are paid before training rather than in its first
    epoch. The host's random generator is restored after the model is built, so no result
    changes (and training seeds every generator before it draws anything).

    Not built on the meta device: torch's meta kernels import sympy (through
    `torch.fx.experimental.symbolic_shapes`), which took 3 s of the GPU job's critical path
    on the GPU machine."""
    with torch.random.fork_rng(devices=[]):
        model = LightVAE(width)
    model = model.to(device)
    x = torch.zeros(rows, 1, width, device=device)
    mu, logvar = model.encode(x)
    loss = ((model.decode(mu) - x) ** 2).mean(dim=(1, 2)).sum() + logvar.exp().sum()
    loss.backward()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def warm_up_in_background(device: Device) -> Callable[[], None]:
    """`warm_up(device)` in a thread, for while the records are read; returns the function
    that waits for it (it never raises: warming up only saves time). Nothing on the CPU."""
    import threading

    if torch.device(device).type != "cuda":
        return lambda: None
    thread = threading.Thread(target=_quietly, args=(warm_up, device), daemon=True,
                              name="zerohop-ecg-warm-up")
    thread.start()
    return thread.join


def _quietly(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a failure here shows again, clearly, in training
        pass


def _parts(beats: Beats) -> tuple[list[torch.Tensor], int]:
    """The training beats as a list of (rows, width) tensors: one tensor, or one per record
    (views of the memory the records arrived in, never concatenated)."""
    parts = list(beats) if isinstance(beats, (list, tuple)) else [beats]
    widths = {int(p.shape[1]) for p in parts}
    if len(widths) != 1:
        raise ValueError(f"beats of different widths {sorted(widths)} cannot train one model")
    return parts, widths.pop()


def _distributed() -> ModuleType | None:
    """torch.distributed's world when a job runs under torchrun with more than one rank."""
    import torch.distributed as dist

    module: ModuleType = dist  # Any to mypy, which does not read torch
    return module if dist.is_available() and dist.is_initialized() and \
        dist.get_world_size() > 1 else None


def _all_reduce(values: Sequence[float], device: Device,
                op: Literal["sum", "min"] = "sum") -> list[float]:
    """`values` (floats) reduced over every rank (as they are when there is one)."""
    dist = _distributed()
    if dist is None:
        return list(values)
    # NCCL reduces device tensors only; gloo reduces host ones.
    on = device if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.float64, device=on)
    dist.all_reduce(t, op=dist.ReduceOp.MIN if op == "min" else dist.ReduceOp.SUM)
    reduced: list[float] = t.tolist()
    return reduced


def level_baseline_(rows: torch.Tensor, ends: NDArray[np.int64] | None = None
                    ) -> torch.Tensor:
    """Removes each beat's baseline in place: the straight line through the mean of its first
    and of its last sixteenth (the quiet stretches before the P wave and after the T wave).
    Baseline wander is slow beside a beat, so over one beat it is nearly that line; left in,
    it made normal beats on a wandering baseline the job's "outliers". With `ends` (per row,
    where its own part ends: `outliers.own_beat_span`) the last sixteenth is the one before
    that end: a window's end that holds the next, early beat's QRS would tilt the line and
    make the whole beat an outlier."""
    width = int(rows.shape[1])
    if width < 8 or rows.shape[0] == 0:
        return rows
    k = max(2, width // 16)
    start = rows[:, :k].mean(dim=1, keepdim=True)
    # Each stretch's mean sits (k - 1) / 2 samples from its end: the line passes through them.
    a = (k - 1) / 2 / (width - 1)
    if ends is None:
        end = rows[:, -k:].mean(dim=1, keepdim=True)
        b: float | torch.Tensor = 1 - a
    else:
        last = torch.as_tensor(ends, device=rows.device).clamp(2 * k + 1, width)[:, None] - k
        end = rows.gather(1, last + torch.arange(k, device=rows.device)).mean(dim=1,
                                                                                keepdim=True)
        b = (last.to(rows.dtype) + (k - 1) / 2) / (width - 1)
    ramp = torch.linspace(0.0, 1.0, width, dtype=rows.dtype, device=rows.device)
    slope = (end - start) / (b - a)
    rows.sub_(start + slope * (ramp - a))
    return rows


def _normalise(parts: Sequence[torch.Tensor], device: Device,
               ends: NDArray[np.int64] | None = None) -> tuple[torch.Tensor, float, float]:
    """The training tensor on `device`: every beat with its baseline levelled (to its own
    part's end, with `ends` over all rows in order), then one shift and scale for all beats
    (every rank's, under torchrun), the mean and standard deviation over every sample, so
    beats keep their sizes relative to one another."""
    n = sum(int(p.shape[0]) for p in parts)
    normalised = torch.empty((n, int(parts[0].shape[1])), dtype=torch.float32, device=device)
    row = 0
    for p in parts:
        rows = normalised[row:row + p.shape[0]]
        level_baseline_(rows.copy_(p, non_blocking=True),
                        None if ends is None else ends[row:row + p.shape[0]])
        row += p.shape[0]
    # Mean and variance combined exactly over ranks (Chan et al.).
    var, mean = map(float, torch.var_mean(normalised, correction=0)) if n else (0.0, 0.0)
    k = normalised.numel()
    count, weighted = _all_reduce([k, k * mean], device)
    center = weighted / count
    (squares,) = _all_reduce([k * (var + (mean - center) ** 2)], device)
    scale = math.sqrt(squares / max(1, count - 1)) or 1.0
    normalised.sub_(center).div_(scale)
    return normalised, center, scale


def _train(beats: Beats, epochs: int, batch_size: int | None, lr: float, seed: int,
           device: Device, progress: Progress, capture: bool, fuse: bool = False,
           batch_per_rank: bool = False, monitored: int | None = None,
           cpu_kernels: bool = True, ends: NDArray[np.int64] | None = None) -> Training:
    started = time.perf_counter()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    parts, width = _parts(beats)
    n = sum(int(p.shape[0]) for p in parts)
    order = torch.randperm(n, generator=generator)
    split = max(1, int(0.75 * n))
    train_idx, test_idx = order[:split], order[split:]
    dist = _distributed()
    ranks: int = dist.get_world_size() if dist is not None else 1
    # Under torchrun every rank trains on its own records' beats, and the ranks share out the
    # batch one process would use for all of them (the gradients are averaged over ranks), so
    # N ranks take the steps one process would, each on a Nth of the work: the same training,
    # sooner; with batch_per_rank each takes a whole one (N times the batch, N times fewer
    # steps: a step's fixed cost, which a Nth of a batch does not shrink, is paid N times
    # less often). Every rank takes the same number of steps (the fewest any rank has),
    # since a rank that stopped early would leave the others waiting.
    (everywhere,) = _all_reduce([split], device)
    (smallest,) = _all_reduce([split], device, op="min")
    batch_size = (batch_size or default_batch(device, int(everywhere))) * \
        (ranks if batch_per_rank else 1)
    combined = max(1, min(batch_size, int(everywhere), max(16, int(everywhere) // 16)))
    batch_size = max(1, min(-(-combined // ranks), int(smallest)))
    lr = lr * math.sqrt(max(1.0, combined / LR_BATCH))
    model = LightVAE(width).to(device)
    # Everything a step touches lives on the training device: the normalised beats (made once),
    # the indices, and the running loss, read once an epoch, so a step never waits for the host.
    normalised, center, scale = _normalise(parts, device, ends)

    def loss(x: torch.Tensor) -> torch.Tensor:
        recon, mu, logvar = model(x)
        return vae_loss(recon, x, mu, logvar)

    # NCCL's all-reduce can be captured in a CUDA graph; gloo's (ranks sharing one GPU)
    # goes through the host and cannot.
    capturable = dist is None or dist.get_backend() == "nccl"
    step = TrainingStep(model, normalised, loss, batch_size, lr, reduce=_averager(dist, ranks),
                        capture=capture and capturable, fuse=fuse)
    if capture and not capturable and torch.device(device).type == "cuda":
        step.why_eager = "gloo's all-reduce cannot be captured in a CUDA graph"
    why_autograd: str | None = "asked"
    native: cpu_pass.CpuPass | None = None
    if fuse:
        why_autograd = "the step is compiled by torch.compile"
    elif cpu_kernels:
        native, why_autograd = cpu_pass.for_model(model, step.flat, normalised)
        step.gradients = native
    if dist is not None:  # every rank starts from rank 0's parameters
        dist.broadcast(step.flat.values, 0)
        # and draws its own reparameterisation noise: one stream on every rank would give
        # each rank's rows the same noise, less than one process's batch gets.
        torch.manual_seed(seed + dist.get_rank())
    # The fewest steps any rank has: the rank with the fewest training beats has them.
    steps = math.ceil(int(smallest) / batch_size)
    train_on_device = train_idx.to(device)
    # Each epoch's shuffle is drawn where the indices live (the CPU generator on the CPU, so
    # CPU runs keep their order; a generator of the training device on a GPU).
    shuffler = generator if torch.device(device).type == "cpu" else \
        torch.Generator(device=device).manual_seed(seed)
    test_on_device = test_idx.to(device)
    # The held-out beats are in random order, so the first ones are a random sample; each
    # rank watches its share of `monitored`.
    monitored = MONITORED_BEATS if monitored is None else monitored
    watched = test_on_device[:-(-monitored // ranks)] if monitored else test_on_device
    held_out_beats, monitored_beats = map(
        int, _all_reduce([len(test_on_device), len(watched)], device))
    losses: list[float] = []
    held_out: list[float] = []
    seconds: list[float] = []
    split_seconds: list[tuple[float, float]] = []
    best, seen = 0, 0
    shown: dict[str, float] = {}
    for epoch in range(epochs):
        model.train()
        step.total.zero_()
        before, begun = seen, time.perf_counter()
        order = train_on_device[torch.randperm(split, generator=shuffler, device=device)]
        for batch in order.split(batch_size)[:int(steps)]:
            step(batch)
            seen += len(batch)
        summed, count = _all_reduce([float(step.total), seen - before], device)
        losses.append(summed / count)
        stepped = time.perf_counter()
        # Every rank sees the same reduced held-out loss, so all stop at the same epoch.
        held_out.append(_held_out_loss(model, normalised, watched, device, native))
        seconds.append(time.perf_counter() - started)
        split_seconds.append((stepped - begun, time.perf_counter() - stepped))
        if held_out[-1] < held_out[best] * (1 - MIN_IMPROVEMENT):
            best = epoch
        stop = epoch - best >= PATIENCE
        if progress:
            _progress(epochs if stop else epoch + 1, epochs, losses[-1], started, progress,
                      shown)
        if stop:
            break
    ran = len(losses)
    step.close()
    test_loss = held_out[-1] if held_out else math.nan
    if held_out and monitored_beats < held_out_beats:  # the same on every rank
        test_loss = _held_out_loss(model, normalised, test_on_device, device, native)
    return {"model": model, "center": center, "scale": scale, "train_idx": train_idx,
            "test_idx": test_idx, "losses": losses, "held_out": held_out,
            "epoch_seconds": seconds, "epoch_split": split_seconds,
            "test_loss": test_loss, "held_out_beats": held_out_beats,
            "monitored_beats": monitored_beats, "batch_size": batch_size,
            "lr": lr, "epochs_run": ran, "best_epoch": best + 1,
            "stopped_early": ran < epochs, "steps": int(steps) * ran,
            "captured": step.captured, "why_eager": step.why_eager,
            "fused": step.fused, "why_unfused": step.why_unfused,
            "cpu_kernels": step.gradients is not None, "why_autograd": why_autograd,
            "setup_seconds": step.setup_seconds,
            "beats_trained": int(_all_reduce([seen], device)[0])}


def _averager(dist: ModuleType | None, ranks: int) -> Reduce | None:
    """The gradients' mean over ranks, in place; None with one rank."""
    if dist is None:
        return None

    def average(grads: torch.Tensor) -> None:
        dist.all_reduce(grads)
        grads.div_(ranks)

    return average


def default_batch(device: Device, training_beats: int) -> int:
    """The largest batch when none is asked for: 1024 on the CPU. On a GPU a step's time
    grows with its batch only above about 1,000 beats (bench/ecg_step.py), so a larger
    batch makes an epoch cheaper there and leaves each of several GPUs work enough to
    share: up to 4096, while an epoch keeps at least 64 steps."""
    if torch.device(device).type == "cpu":
        return 1024
    return max(1024, min(4096, training_beats // 64))


#: The learning rate given is for batches up to LR_BATCH beats; Adam's grows with the square
#: root of a larger batch (the noise of the gradient falls with it).
LR_BATCH = 1024

#: Training stops once the held-out loss has not improved by MIN_IMPROVEMENT (relative) for
#: PATIENCE epochs: it has converged, and more epochs would only fit the training beats.
PATIENCE = 5
MIN_IMPROVEMENT = 1e-3


def convergence_note(trained: Training, epochs: int) -> str:
    """Whether training converged, in words for the report."""
    ran, best = trained["epochs_run"], trained["best_epoch"]
    if trained["stopped_early"]:
        return (f"stopped after epoch {ran} of {epochs}: the held-out loss had not improved "
                f"for {PATIENCE} epochs (best at epoch {best}), so training had converged")
    if best == ran and ran > 1:
        return (f"ran all {epochs} epochs and the held-out loss was still improving at the "
                f"last: not converged, more --epochs may help")
    return f"ran all {epochs} epochs; the held-out loss was lowest at epoch {best}"


_F = TypeVar("_F", bound=Callable[..., object])


def _no_grad(fn: _F) -> _F:
    """`@torch.no_grad()`, keeping `fn`'s type (torch's decorator is Any to mypy)."""
    decorated: _F = torch.no_grad()(fn)
    return decorated


def evaluation_chunk(device: Device) -> int:
    """Beats per forward pass when only evaluating (the held-out loss, the embedding): 8192
    on a GPU, where larger is cheaper per beat; 1024 on the CPU, where a pass over 25,000
    held-out beats took 0.27 s in chunks of 1024 against 0.46 s in chunks of 8192 (their
    activations no longer stay in the caches) — for a day-long record, 30 epochs, 6 s."""
    return 8192 if torch.device(device).type == "cuda" else 1024


@_no_grad
def _held_out_loss(model: LightVAE, normalised: torch.Tensor, indices: torch.Tensor,
                   device: Device, native: cpu_pass.CpuPass | None = None) -> float:
    """The loss per beat over the held-out beats (every rank's), in chunks summed on the
    device and read once; by `native` (the CPU kernels' forward pass) when given."""
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=normalised.device)
    for idx in indices.split(evaluation_chunk(normalised.device)):
        if native is not None:
            total += native.loss(idx)
            continue
        x = normalised.index_select(0, idx).unsqueeze(1)
        recon, mu, logvar = model(x)
        total += vae_loss(recon, x, mu, logvar)
    summed, count = _all_reduce([float(total), len(indices)], device)
    return summed / count if count else math.nan


@_no_grad
def embed(model: LightVAE, beats: Beats, scale: float, device: Device = "cpu",
          batch_size: int | None = None, center: float = 0.0, reconstructions: bool = True,
          spans: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Latent means, log-variances, reconstructions (in input units) and per-beat
    reconstruction error (the mean square error of the normalised beat, so in units of the
    beats' variance, the same for mV and ADC counts) for every beat; with `spans` (per beat,
    the first and end columns: `outliers.own_beat_span`) the error is over those columns
    alone. With `reconstructions=False` the third is None: a day-long record's are as large
    as its beats (100 MB), twice that while they are gathered, and the job does not need them.
    Beats go through the model `batch_size` at a time (default: `evaluation_chunk`)."""
    model.eval()
    batch_size = batch_size or evaluation_chunk(device)
    mus: list[torch.Tensor] = []
    logvars: list[torch.Tensor] = []
    recons: list[torch.Tensor] = []
    errors: list[torch.Tensor] = []
    parts, width = _parts(beats)
    columns = torch.arange(width, device=device)
    done = 0
    ends = None if spans is None else spans[1]
    for normalised in _normalised_batches(parts, width, batch_size, device, center, scale,
                                          ends):
        mu, logvar = model.encode(normalised.unsqueeze(1))
        decoded = model.decode(mu).squeeze(1)
        mus.append(mu.cpu())
        logvars.append(logvar.cpu())
        if reconstructions:
            recons.append((decoded * scale + center).cpu())
        squared = (decoded - normalised) ** 2
        rows = int(normalised.shape[0])
        if spans is None:
            errors.append(squared.mean(dim=1).cpu())
        else:
            lo, hi = (torch.as_tensor(s[done:done + rows], device=device) for s in spans)
            inside = (columns >= lo[:, None]) & (columns < hi[:, None])
            errors.append(((squared * inside).sum(dim=1)
                           / inside.sum(dim=1).clamp(min=1)).cpu())
        done += rows
    return (torch.cat(mus), torch.cat(logvars), torch.cat(recons) if reconstructions else None,
            torch.cat(errors))


def _normalised_batches(parts: Sequence[torch.Tensor], width: int, batch_size: int,
                        device: Device, center: float, scale: float,
                        ends: NDArray[np.int64] | None = None) -> Iterator[torch.Tensor]:
    """The parts' beats, normalised, in batches of `batch_size` rows (the last one shorter):
    thousands of small records make a few large batches rather than a pass each. Each beat is
    read once, straight into the batch (normalising writes a new tensor anyway)."""
    import torch

    total = sum(int(p.shape[0]) for p in parts)
    done = 0
    pending = ((p, 0) for p in parts)
    part: torch.Tensor | None
    part, start = next(pending, (None, 0))
    while done < total:
        rows = min(batch_size, total - done)
        batch = torch.empty((rows, width), dtype=torch.float32, device=device)
        filled = 0
        while filled < rows:
            assert part is not None  # `total` counts the parts' rows: rows left, a part left
            take = min(rows - filled, int(part.shape[0]) - start)
            out = batch[filled:filled + take]
            level_baseline_(out.copy_(part[start:start + take]),
                            None if ends is None else ends[done + filled:done + filled + take])
            out.sub_(center).div_(scale)
            filled, start = filled + take, start + take
            if start == int(part.shape[0]):
                part, start = next(pending, (None, 0))
        done += rows
        yield batch
