"""Adam, computed as torch.optim.Adam computes it with its defaults (no weight decay, no
AMSGrad), for the job's training loop. torch.optim's step imports torch._dynamo on first use:
about 4.7 s on the GPU machine, more than the rest of a two-epoch job after `import torch`.
The moments live on the parameters' device and a step only queues kernels (one per update
for all parameters at once), so training never waits for the host."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class Adam:
    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.steps = [0] * len(self.params)
        self.mean = [torch.zeros_like(p, memory_format=torch.preserve_format)
                     for p in self.params]
        self.square = [torch.zeros_like(p, memory_format=torch.preserve_format)
                       for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        with torch.no_grad():
            # Parameters without a gradient this step keep their state, as in torch.optim.
            live = [i for i, p in enumerate(self.params) if p.grad is not None]
            if not live:
                return
            for i in live:
                self.steps[i] += 1
            params = [self.params[i] for i in live]
            grads = [self.params[i].grad for i in live]
            mean = [self.mean[i] for i in live]
            square = [self.square[i] for i in live]
            torch._foreach_lerp_(mean, grads, 1 - self.beta1)
            torch._foreach_mul_(square, self.beta2)
            torch._foreach_addcmul_(square, grads, grads, 1 - self.beta2)
            step_sizes = [-self.lr / (1 - self.beta1 ** self.steps[i]) for i in live]
            roots = [math.sqrt(1 - self.beta2 ** self.steps[i]) for i in live]
            denominators = torch._foreach_sqrt(square)
            torch._foreach_div_(denominators, roots)
            torch._foreach_add_(denominators, self.eps)
            torch._foreach_addcdiv_(params, mean, denominators, step_sizes)
