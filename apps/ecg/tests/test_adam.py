"""The training loop's Adam over one flat buffer: torch.optim.Adam's updates (to float32
rounding), without importing torch._dynamo (which torch.optim's first step does, for
seconds)."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from zerohop_ecg import kernels as _ecg  # noqa: E402
from zerohop_ecg.adam import Adam, update  # noqa: E402
from zerohop_ecg.step import FlatParameters  # noqa: E402
from zerohop_ecg.vae import LightVAE, vae_loss  # noqa: E402


def test_updates_match_torch_optim_adam():
    torch.manual_seed(0)
    ours, theirs = LightVAE(64), LightVAE(64)
    theirs.load_state_dict(ours.state_dict())
    initial = [p.detach().clone() for p in ours.parameters()]
    flat = FlatParameters(ours)
    adam = Adam(flat.values, flat.grads, lr=3e-3)
    reference = torch.optim.Adam(theirs.parameters(), lr=3e-3)
    x = torch.randn(32, 1, 64)
    for step in range(20):
        torch.manual_seed(step)  # the same reparameterisation noise for both
        flat.grads.zero_()
        vae_loss(*_outputs(ours, x)).backward()
        adam.step()
        torch.manual_seed(step)
        reference.zero_grad()
        vae_loss(*_outputs(theirs, x)).backward()
        reference.step()
    assert adam.steps == 20
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    # The comparison is of trained parameters, not of two untouched models.
    assert all(not torch.equal(a, b) for a, b in zip(ours.parameters(), initial))


def _outputs(model, x):
    recon, mu, logvar = model(x)
    return recon, x, mu, logvar


def test_the_first_step_moves_every_parameter_by_the_learning_rate():
    # Adam's first update is lr · sign(gradient) (bias-corrected moments, eps aside): a check
    # of the bias corrections that needs no reference implementation.
    values = torch.zeros(4)
    grads = torch.tensor([3.0, -0.5, 1e-3, -40.0])
    Adam(values, grads, lr=0.01).step()
    torch.testing.assert_close(values, torch.tensor([-0.01, 0.01, -0.01, 0.01]), rtol=1e-4,
                               atol=0)


def test_the_cpu_step_is_torchs_update():
    """On the CPU the step runs zerohop's Adam; `update` (torch's operations) is what a GPU
    and torch.compile run: the two agree to float32 rounding over many steps."""
    g = torch.Generator().manual_seed(1)
    values = torch.randn(1000, generator=g)
    ours = Adam(values.clone(), torch.zeros(1000), lr=2e-3)
    theirs = [values.clone(), torch.zeros(1000), torch.zeros(1000), torch.zeros(1000),
              torch.zeros((), dtype=torch.float64)]
    for _ in range(50):
        grads = torch.randn(1000, generator=g) * torch.rand(1000, generator=g) * 10
        ours.grads.copy_(grads)
        theirs[1].copy_(grads)
        ours.step()
        update(*theirs, 2e-3, 0.9, 0.999, 1e-8)
    assert ours.steps == 50
    for a, b in zip(ours.state, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # moments reach ~10
    assert not torch.equal(ours.values, values)


def test_the_cpu_step_refuses_buffers_that_share_memory():
    values, grads = torch.zeros(8), torch.zeros(8)
    mean, square = torch.zeros(8), torch.zeros(8)
    count = torch.zeros((), dtype=torch.float64)
    with pytest.raises(ValueError, match="mean: shares memory with values"):
        _ecg.adam_step(values, grads, values, square, count, 1e-3, 0.9, 0.999, 1e-8)
    with pytest.raises(ValueError, match="count: one element"):
        _ecg.adam_step(values, grads, mean, square, torch.zeros(2, dtype=torch.float64),
                       1e-3, 0.9, 0.999, 1e-8)
    with pytest.raises(ValueError, match="square"):
        _ecg.adam_step(values, grads, mean, torch.zeros(7), count, 1e-3, 0.9, 0.999, 1e-8)
    assert not values.any() and float(count) == 0


def test_buffers_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match="one flat parameter buffer"):
        Adam(torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"\(3,\) and \(4,\)"):
        Adam(torch.zeros(3), torch.zeros(4))


def test_training_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\n"
        "from zerohop_ecg.vae import train\n"
        "train(torch.randn(64, 64), epochs=1, progress=False, threads=1)\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
