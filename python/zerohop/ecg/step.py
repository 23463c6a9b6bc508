"""One training step of the job's VAE — forward, backward, the gradients averaged over
torchrun's ranks, Adam — over parameters and gradients that are views of two flat buffers.

On a GPU the step is captured once in a CUDA graph and replayed: the model is small, so an
eager step is bound by launching its ~170 kernels (about 2 ms on an H100) rather than by
their work, and under DistributedDataParallel its per-parameter hooks and all-reduce doubled
that. A replay launches them all at once, the all-reduce inside it."""

from __future__ import annotations

from collections.abc import Callable

import torch

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

    def views_intact(self) -> bool:
        """Whether every parameter and gradient still lives in the flat buffers (autograd
        replacing a gradient tensor instead of adding into it would break the step)."""
        base_v, base_g = self.values.data_ptr(), self.grads.data_ptr()
        end_v, end_g = base_v + self.values.nbytes, base_g + self.grads.nbytes
        return all(p.grad is not None and base_v <= p.data_ptr() < end_v
                   and base_g <= p.grad.data_ptr() < end_g for p in self.params)


Loss = Callable[[torch.Tensor], torch.Tensor]
Reduce = Callable[[torch.Tensor], None]


class TrainingStep:
    """`step(batch)` trains on the rows `batch` (an index tensor on the data's device) of
    `data`; the summed loss of every step accumulates in `total` on the device, read once an
    epoch. Full batches of `batch_size` rows replay a CUDA graph when `capture` is set and
    the data is on a GPU; any other batch runs eagerly, with the same effect."""

    def __init__(self, model: torch.nn.Module, data: torch.Tensor, loss: Loss,
                 batch_size: int, lr: float, reduce: Reduce | None = None,
                 capture: bool = True) -> None:
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

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _run(self, batch: torch.Tensor) -> None:
        x = self.data.index_select(0, batch).unsqueeze(1)
        loss = self.loss(x)
        self.flat.grads.zero_()
        loss.backward()
        if self.reduce is not None:
            self.reduce(self.flat.grads)
        self.optimiser.step()
        self.total.add_(loss.detach())

    def __call__(self, batch: torch.Tensor) -> None:
        if len(batch) != self.batch_size or not self.capture:
            self._run(batch)
            return
        if self.graph is not None:
            self._batch.copy_(batch)
            self.graph.replay()
            return
        self._full_steps += 1
        if self._full_steps <= WARMUP_STEPS:
            self._warm(batch)
        else:
            self._capture()
            self._batch.copy_(batch)
            if self.graph is not None:
                self.graph.replay()
            else:
                self._run(batch)

    def _warm(self, batch: torch.Tensor) -> None:
        # A capture must follow eager work on a side stream (PyTorch's rule for graphs
        # with backward passes: autograd's streams then match the capture's).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._batch.copy_(batch)
            self._run(self._batch)
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._run(self._batch)
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
