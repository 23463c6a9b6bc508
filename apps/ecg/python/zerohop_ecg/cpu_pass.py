"""LightVAE's training pass on the CPU in zerohop's own kernels (`zerohop_ecg::vae`, Rust):
the loss of a batch and every parameter's gradient, written straight into the training
step's flat gradient buffer.

Why: the model's layers have 1 to 16 channels, so torch spends a CPU step moving whole-batch
activations between ~60 operators and starting threads for each, not computing. The kernels
carry 16 beats at once through every layer, one per vector lane, with the activations kept
in a core's cache. A step of 1,024 beats of 256 samples took 7.8 ms on this repository's
2-core machine against 41 ms through autograd (bench/ecg_step.py --cpu,
crates/zerohop-ecg/benches/vae_pass.rs).

The pass computes what `LightVAE` and `vae_loss` define, with the same reparameterisation
noise (drawn from torch's generator as `randn_like` would), up to float rounding
(tests/test_ecg_cpu_pass.py holds it against autograd). Its result does not depend on the
thread count."""

from __future__ import annotations

import torch

from . import kernels as _ecg
from .step import ALIGN, FlatParameters


class CpuPass:
    """`pass_(batch)`: the summed loss of the rows `batch` (int64 indices) of `data` (beats ×
    width, float32, CPU); their gradients written to `flat.grads`. `pass_.loss(batch)`: the
    loss alone."""

    def __init__(self, native: _ecg.VaeCpu, flat: FlatParameters, data: torch.Tensor,
                 latent: int) -> None:
        self.native, self.flat, self.data, self.latent = native, flat, data, latent

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self.native.loss_and_gradients(self.flat.values, self.data, batch.long(),
                                              self._noise(batch), self.flat.grads)
        return torch.tensor(loss, dtype=torch.float32)

    def loss(self, batch: torch.Tensor) -> float:
        return self.native.loss(self.flat.values, self.data, batch.long(), self._noise(batch))

    def _noise(self, batch: torch.Tensor) -> torch.Tensor:
        """Each beat's ε, drawn from torch's generator as the model's `randn_like` draws it,
        so a run's random stream is the same whichever computes the pass."""
        return torch.randn(len(batch), self.latent)


def for_model(model: torch.nn.Module, flat: FlatParameters, data: torch.Tensor,
              threads: int | None = None) -> tuple[CpuPass | None, str | None]:
    """The pass for `model` (a LightVAE) whose parameters are `flat`'s views, trained on
    `data`, on `threads` threads (default: torch's); or None and why it cannot be taken."""
    if data.device.type != "cpu" or flat.values.device.type != "cpu":
        return None, "not on the CPU"
    if data.dtype != torch.float32 or flat.values.dtype != torch.float32:
        return None, "not float32"
    width = getattr(model, "width", None)
    head = getattr(model, "mu_head", None)
    if not isinstance(width, int) or head is None:
        return None, "not a LightVAE"
    if data.dim() != 2 or int(data.shape[1]) != width or not data.is_contiguous():
        return None, f"the beats are not compact rows of {width} samples"
    latent = int(head.out_channels)
    try:
        native = _ecg.VaeCpu(width, latent=latent, align=ALIGN,
                             threads=threads or torch.get_num_threads())
    except ValueError as error:
        return None, str(error)
    base = flat.values.data_ptr()
    offsets = [(p.data_ptr() - base) // p.element_size() for p in flat.params]
    shapes = [list(p.shape) for p in flat.params]
    if shapes != native.shapes() or offsets != native.offsets() or \
            flat.values.numel() != native.size:
        return None, "the model's parameters are not LightVAE's"
    return CpuPass(native, flat, data, latent), None
