"""One training step of the job's VAE — forward, backward, the gradients averaged over
torchrun's ranks, Adam — over parameters and gradients that are views of two flat buffers.

On a GPU the step is captured once in a CUDA graph and replayed: the model is small, so an
eager step is bound by launching its ~170 kernels (about 2 ms on an H100) rather than by
their work, and under DistributedDataParallel its per-parameter hooks and all-reduce doubled
that. A replay launches them all at once, the all-reduce inside it.

With `fuse` the forward pass (and so autograd's backward of it) and Adam are compiled by
torch.compile: Inductor fuses the elementwise work and reductions between the convolutions,
so a replayed step runs fewer, larger kernels. That costs a compilation once (tens of
seconds) and pays off on long runs and on several GPUs, where each rank's share of the
batch is small and a step's fixed cost is what is left (bench/ecg_step.py, bench/ecg_ddp.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from . import adam, shared_pool
from .adam import Adam

#: Eager steps before the capture: cuDNN picks its algorithms, NCCL builds its communicator
#: and the caching allocator reaches its steady state on these, not inside the graph.
WARMUP_STEPS = 3

#: Elements between the starts of two parameters in the flat buffers (64 bytes of float32).
ALIGN = 16


class FlatParameters:
    """The model's parameters made views of one flat buffer (`values`), their gradients views
    of another (`grads`): backward accumulates into `grads` in place, so zeroing it is one
    kernel and reducing it over ranks is one all-reduce."""

    def __init__(self, model: torch.nn.Module) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"parameters of mixed dtypes {sorted(map(str, dtypes))}")
        device = params[0].device
        # Each tensor starts on a 64-byte boundary, as a tensor of its own would: oneDNN's
        # convolutions took 8 % longer over weights packed end to end.
        starts = [0]
        for p in params:
            starts.append(starts[-1] + -(-p.numel() // ALIGN) * ALIGN)
        self.values = torch.zeros(starts[-1], dtype=params[0].dtype, device=device)
        self.grads = torch.zeros_like(self.values)
        with torch.no_grad():
            for p, offset in zip(params, starts):
                n = p.numel()
                self.values[offset:offset + n].copy_(p.reshape(-1))
                p.data = self.values[offset:offset + n].view_as(p)
                p.grad = self.grads[offset:offset + n].view_as(p)
        self.params = params
        self.grad_views = [p.grad for p in params]

    def views_intact(self) -> bool:
        """Whether every parameter and gradient still lives in the flat buffers (autograd
        replacing a gradient tensor instead of adding into it would break the step)."""
        base_v, base_g = self.values.data_ptr(), self.grads.data_ptr()
        end_v, end_g = base_v + self.values.nbytes, base_g + self.grads.nbytes
        return all(p.grad is not None and base_v <= p.data_ptr() < end_v
                   and base_g <= p.grad.data_ptr() < end_g for p in self.params)


Loss = Callable[[torch.Tensor], torch.Tensor]
Reduce = Callable[[torch.Tensor], None]
#: The loss of the rows `batch`, its gradients written to the flat gradient buffer: a
#: backward pass without autograd (`cpu_pass.CpuPass`).
Gradients = Callable[[torch.Tensor], torch.Tensor]


class TrainingStep:
    """`step(batch)` trains on the rows `batch` (an index tensor on the data's device) of
    `data`; the summed loss of every step accumulates in `total` on the device, read once an
    epoch. Full batches of `batch_size` rows replay a CUDA graph when `capture` is set and
    the data is on a GPU; any other batch runs eagerly, with the same effect. With `fuse`
    full batches run the compiled forward pass and Adam (see the module's note); should
    compiling fail, the step says why in `why_unfused` and goes on unfused.
    `setup_seconds` is the time the warm-up steps, the compilation and the capture took.
    With `gradients` set (see `Gradients`), unfused steps take the loss and gradients from it
    instead of a forward pass and autograd."""

    def __init__(self, model: torch.nn.Module, data: torch.Tensor, loss: Loss,
                 batch_size: int, lr: float, reduce: Reduce | None = None,
                 capture: bool = True, fuse: bool = False) -> None:
        self.model, self.data, self.loss = model, data, loss
        self.flat = FlatParameters(model)
        self.optimiser = Adam(self.flat.values, self.flat.grads, lr=lr)
        self.reduce = reduce
        self.batch_size = batch_size
        self.total = torch.zeros((), device=data.device)
        self.capture = capture and data.device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.why_eager = None if self.capture else "not on a GPU" if capture else "asked"
        self._batch = torch.zeros(batch_size, dtype=torch.long, device=data.device)
        self._full_steps = 0
        self.fuse = fuse
        self.why_unfused: str | None = None if fuse else "asked"
        self._fused_forward: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._fused_update: Callable[..., None] | None = None
        self._fused_ran = False
        self._was_captured = False
        self.setup_seconds = 0.0
        self.gradients: Gradients | None = None

    @property
    def captured(self) -> bool:
        return self.graph is not None or self._was_captured

    @property
    def fused(self) -> bool:
        """Whether full batches ran the compiled forward pass and Adam."""
        return self._fused_ran

    def close(self) -> None:
        """Drops the CUDA graph and the compiled functions once training is over. The
        compiled functions refer back to the step, so without this the graph (and the NCCL
        work captured in it) lived until the garbage collector found the cycle: after
        torchrun's process group was torn down, where two ranks with fused, captured steps
        hung. `captured` and `fused` keep their answers; later steps run eagerly."""
        self._was_captured = self.captured
        self.graph = None
        self.capture = self.fuse = False
        self._fused_forward = self._fused_update = None
        if self.data.device.type == "cuda":
            torch.cuda.synchronize(self.data.device)

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.loss(self.data.index_select(0, batch).unsqueeze(1))

    def _run(self, batch: torch.Tensor, fused: bool = False) -> None:
        if self.gradients is not None and not fused:
            loss = self.gradients(batch)
            self._update(loss, fused)
            return
        forward = self._fused_forward if fused and self._fused_forward else self._forward
        self._finish(forward(batch), fused)

    def _finish(self, loss: torch.Tensor, fused: bool) -> None:
        """Backward, the ranks' reduction (the step's one collective) and Adam."""
        # The gradients come back as tensors and are copied into the flat buffer by one
        # multi-tensor kernel: accumulating into each parameter's .grad took a zeroing and
        # one addition per parameter (21 kernels of a step's ~170).
        grads = torch.autograd.grad(loss, self.flat.params, allow_unused=True,
                                    materialize_grads=True)
        torch._foreach_copy_(self.flat.grad_views, grads)
        self._update(loss, fused)

    def _update(self, loss: torch.Tensor, fused: bool) -> None:
        """The ranks' reduction of the gradients, Adam, and the loss counted."""
        if self.reduce is not None:
            self.reduce(self.flat.grads)
        if fused and self._fused_update is not None:
            self._fused_update(*self.optimiser.state, *self.optimiser.hyperparameters)
        else:
            self.optimiser.step()
        self.total.add_(loss.detach())

    def _compile(self) -> None:
        """The compiled forward pass and Adam step, once; on failure the reason is kept and
        steps go on unfused."""
        try:
            forward = torch.compile(self._forward, fullgraph=True, dynamic=False)
            update = torch.compile(adam.update, fullgraph=True, dynamic=False)
        except Exception as error:  # noqa: BLE001 - any failure leaves the unfused step
            self._unfuse(error)
            return
        self._fused_forward, self._fused_update = forward, update

    def _unfuse(self, error: BaseException) -> None:
        first = str(error).strip().splitlines()
        self.why_unfused = f"compiling failed: {type(error).__name__}: " \
            f"{first[0] if first else ''}"
        self.fuse = False
        self._fused_forward = self._fused_update = None

    def _full(self, batch: torch.Tensor) -> None:
        """A full batch's step before any capture: compiled when fusing (the first one
        compiles; a compiler that fails leaves the step as it was, and it runs unfused)."""
        if self.fuse and self._fused_forward is None:
            self._compile()
        if not self.fuse:
            self._run(batch)
            return
        if self._fused_ran:
            self._run(batch, fused=True)
            return
        # The first fused step compiles both functions before the step's collective, so a
        # compiler that fails on one rank leaves it one unfused step with one all-reduce,
        # as every other rank's: Adam on copies of its state, then the forward pass (a
        # compiler's error is raised before the compiled code runs: nothing has moved).
        assert self._fused_forward is not None and self._fused_update is not None
        try:
            self._fused_update(*(t.clone() for t in self.optimiser.state),
                               *self.optimiser.hyperparameters)
            loss = self._fused_forward(batch)
        except Exception as error:  # noqa: BLE001 - the compiler's errors have many types
            self._unfuse(error)
            self._run(batch)
            return
        self._finish(loss, fused=True)
        self._fused_ran = True

    def __call__(self, batch: torch.Tensor) -> None:
        full = len(batch) == self.batch_size
        if not full:
            self._run(batch)
            return
        if not self.capture:
            began = time.perf_counter() if self._full_steps < WARMUP_STEPS else None
            self._full_steps += 1
            self._full(batch)
            if began is not None:
                self.setup_seconds += time.perf_counter() - began
            return
        if self.graph is not None:
            self._batch.copy_(batch)
            self.graph.replay()
            return
        began = time.perf_counter()
        self._full_steps += 1
        if self._full_steps <= WARMUP_STEPS:
            self._warm(batch)
        else:
            self._capture()
            self._batch.copy_(batch)
            if self.graph is not None:
                self.graph.replay()
            else:
                self._full(batch)
        torch.cuda.synchronize(self.data.device)
        self.setup_seconds += time.perf_counter() - began

    def _warm(self, batch: torch.Tensor) -> None:
        # A capture must follow eager work on a side stream (PyTorch's rule for graphs
        # with backward passes: autograd's streams then match the capture's).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._batch.copy_(batch)
            self._full(self._batch)
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            # The graph's private memory from the job's shared pool when there is one.
            with torch.cuda.graph(graph, pool=shared_pool.graph_pool()):
                self._run(self._batch, fused=self.fuse)
        except RuntimeError as error:
            # Nothing the capture recorded ran, so the model is as it was: go on eagerly.
            self.why_eager = f"capture failed: {str(error).splitlines()[0]}"
            self.capture = False
            torch.cuda.synchronize()
            return
        if not self.flat.views_intact():
            self.why_eager = "gradients left the flat buffer"
            self.capture = False
            return
        self.graph = graph
