"""The VAE's layers on the CPU, with backward passes that autograd and oneDNN do slowly for
so few channels (1 to 16) done another way. Measured on two threads, a batch of 1,024 beats
of 256 samples (a training step took 41 ms without them and 32 ms with them, glibc's malloc
keeping freed memory as the job has it; on more than MAX_THREADS threads oneDNN's own are
faster, and they are kept):

- the gradient of a convolution's input: oneDNN's took 12.5 ms for the decoder's last layer
  (2 → 1 channels), a forward convolution of the gradient with the kernel reversed 0.9 ms;
- convolutions with one channel on either side (1 → 4, 2 → 1, and the 1 → 2 of the latter's
  gradient) as the columns of the input times the weights (im2col and one matrix product,
  aten's "slow" convolution): forward 0.4–0.5 ms against oneDNN's 0.9–1.0, the weights'
  gradient 0.8 against 1.4–2.0 (oneDNN is faster from 8 → 16 channels on);
- the fixed downsampling's gradient written out (each output sample feeds three inputs with
  weights 1, 2, 1) instead of a transposed depthwise convolution.

(The swish's gradient as one fused kernel, aten's silu_backward, gained nothing in a whole
step on 2 or 16 threads, so the swish stays autograd's.)

The values are those of autograd's own backward passes up to rounding
(tests/test_ecg_vae.py). Used on the CPU while gradients are recorded; on a GPU cuDNN's
kernels are fast, and torch.compile traces the plain operations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    # mypy does not read torch (tests/typing/mypy.ini), so Function is Any to it, and
    # --strict forbids subclassing Any: the base as mypy sees it, what is used of it.
    class _Function:
        @classmethod
        def apply(cls, *args: Any) -> Any: ...
else:
    _Function = torch.autograd.Function

Gradients = tuple[torch.Tensor | None, ...]


#: The most CPU threads torch may use for these layers to be taken. A step at batch 1,024 on
#: an H100 host's 16-core CPU, autograd's layers against these (ms): 4 threads 35.7 against
#: 28.5, 8 threads 22.6 against 20.5, 16 threads 16.6 against 20.2 — with many threads
#: oneDNN's convolutions split better than the matrix products and written-out gradients.
MAX_THREADS = 8


def wanted(x: torch.Tensor) -> bool:
    """Whether the layers applied to `x` should take this module's backward passes: a CPU
    tensor with gradients recorded, outside torch.compile, on at most MAX_THREADS threads."""
    return (x.device.type == "cpu" and torch.is_grad_enabled()
            and not torch.compiler.is_compiling() and torch.get_num_threads() <= MAX_THREADS)


def by_matrix_product(weight: torch.Tensor) -> bool:
    """Whether a convolution with `weight` (out, in, k) runs as im2col and a matrix product
    rather than by oneDNN: with one channel on either side (see the module's note)."""
    return int(weight.shape[0]) * int(weight.shape[1]) <= 4


def _convolve(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """conv1d of stride 1, padded to keep the length (odd kernel)."""
    pad = weight.shape[-1] // 2
    if by_matrix_product(weight):
        out: torch.Tensor = torch._C._nn.thnn_conv2d(
            x.unsqueeze(2), weight.unsqueeze(2), (1, weight.shape[-1]), bias, (1, 1), (0, pad))
        return out.squeeze(2)
    return F.conv1d(x, weight, bias, padding=pad)


class _SameConv(_Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _convolve(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Gradients:
        x, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            # Input sample l fed output l - j + pad through weight[..., j]: a correlation of
            # the gradient with the kernel reversed and its two channel axes swapped.
            grad_x = _convolve(grad, weight.transpose(0, 1).flip(-1), None)
        mask = [False, ctx.needs_input_grad[1], ctx.needs_input_grad[2] and ctx.has_bias]
        if not (mask[1] or mask[2]):
            return grad_x, None, None
        pad = weight.shape[-1] // 2
        if by_matrix_product(weight):
            _, grad_w, grad_b = torch.ops.aten._slow_conv2d_backward.output_mask(
                grad.unsqueeze(2), x.unsqueeze(2), weight.unsqueeze(2),
                [1, weight.shape[-1]], [1, 1], [0, pad], mask)
            return grad_x, grad_w.squeeze(2) if grad_w is not None else None, grad_b
        _, grad_w, grad_b = torch.ops.aten.convolution_backward(
            grad, x, weight, [weight.shape[0]] if ctx.has_bias else None, [1], [pad], [1],
            False, [0], 1, mask)
        return grad_x, grad_w, grad_b


def same_conv(conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """`conv(x)` for a Conv1d of stride 1, dilation 1, one group and an odd kernel padded to
    keep the length (the VAE's), with the backward pass above."""
    out: torch.Tensor = _SameConv.apply(x, conv.weight, conv.bias)
    return out


class _HalveLength(_Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, kernel, stride=2, padding=1, groups=x.shape[1])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Gradients:
        # out[i] = x[2i − 1] + 2 x[2i] + x[2i + 1]: x[2i] receives 2 out[i], and x[2i + 1]
        # receives out[i] + out[i + 1] (nothing past the end).
        grad_x = grad.new_empty((*grad.shape, 2))
        torch.mul(grad, 2, out=grad_x[..., 0])
        torch.add(grad[..., :-1], grad[..., 1:], out=grad_x[..., :-1, 1])
        grad_x[..., -1, 1] = grad[..., -1]
        return grad_x.view(*grad.shape[:-1], 2 * grad.shape[-1]), None


def halve_length(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """The fixed downsampling of `x` (an even length) by the [1, 2, 1] `kernel` (channels,
    1, 3) with stride 2 and padding 1, with the backward pass above."""
    out: torch.Tensor = _HalveLength.apply(x, kernel)
    return out
