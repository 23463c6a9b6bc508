"""Adam over one flat buffer of parameters, computed as torch.optim.Adam computes it with its
defaults (no weight decay, no AMSGrad), for the job's training loop.

Why not torch.optim: its step imports torch._dynamo on first use, about 4.7 s on the GPU
machine, more than the rest of a two-epoch job after `import torch`.

Why one flat buffer: the model has about 1,600 parameters in 20 tensors, so a step is a
handful of kernels whatever its size, and the gradients reach every rank in one all-reduce.
The step count lives on the parameters' device (float64, so the bias corrections round as
torch.optim's Python floats do), so a step only queues kernels: it never waits for the host
and can be captured in a CUDA graph.

On the CPU the step is zerohop's (`zerohop_ecg.kernels.adam_step`: the same operations in the same
order, equal to float32 rounding). torch ran parts of this one on its OpenMP threads, which
then spun for milliseconds on the cores the next training pass (`cpu_pass`) wanted: 10 ms a
step on 2 threads against 7.4."""

from __future__ import annotations

import torch

from . import kernels as _ecg


class Adam:
    def __init__(self, values: torch.Tensor, grads: torch.Tensor, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        if values.shape != grads.shape or values.dim() != 1:
            raise ValueError(f"Adam takes one flat parameter buffer and its gradient buffer, "
                             f"not shapes {tuple(values.shape)} and {tuple(grads.shape)}")
        self.values, self.grads = values, grads
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.count = torch.zeros((), dtype=torch.float64, device=values.device)
        self.mean = torch.zeros_like(values)
        self.square = torch.zeros_like(values)

    @property
    def steps(self) -> int:
        """Steps taken (reading it waits for the device)."""
        return int(self.count)

    @property
    def state(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                             torch.Tensor]:
        """The tensors `update` takes, in its order."""
        return self.values, self.grads, self.mean, self.square, self.count

    @property
    def hyperparameters(self) -> tuple[float, float, float, float]:
        return self.lr, self.beta1, self.beta2, self.eps

    def step(self) -> None:
        if self.values.device.type == "cpu":
            _ecg.adam_step(*self.state, *self.hyperparameters)
            return
        update(*self.state, *self.hyperparameters)


def update(values: torch.Tensor, grads: torch.Tensor, mean: torch.Tensor, square: torch.Tensor,
           count: torch.Tensor, lr: float, beta1: float, beta2: float, eps: float) -> None:
    """One Adam step, in place, as a function of tensors alone: torch.compile can compile it
    on copies of the state (see step.TrainingStep) and run the result on the real one."""
    with torch.no_grad():
        count.add_(1)
        mean.lerp_(grads, 1 - beta1)
        square.mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
        first = 1 - torch.pow(beta1, count)
        second = (1 - torch.pow(beta2, count)).sqrt()
        # values -= lr / first · mean / (sqrt(square) / second + eps)
        denominator = square.sqrt().div_(second).add_(eps)
        denominator.mul_(first / -lr)
        values.addcdiv_(mean, denominator)
