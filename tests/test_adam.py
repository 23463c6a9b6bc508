"""The training loop's Adam: bitwise torch.optim.Adam's updates, without importing
torch._dynamo (which torch.optim's first step does, for seconds)."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from zerohop.ecg.adam import Adam  # noqa: E402
from zerohop.ecg.vae import LightVAE, vae_loss  # noqa: E402


def test_updates_equal_torch_optim_adam_bit_for_bit():
    torch.manual_seed(0)
    ours, theirs = LightVAE(64), LightVAE(64)
    theirs.load_state_dict(ours.state_dict())
    initial = [p.detach().clone() for p in ours.parameters()]
    optimisers = ((ours, Adam(ours.parameters(), lr=3e-3)),
                  (theirs, torch.optim.Adam(theirs.parameters(), lr=3e-3)))
    x = torch.randn(32, 1, 64)
    for step in range(6):
        for model, optimiser in optimisers:
            torch.manual_seed(step)  # the same reparameterisation noise for both
            recon, mu, logvar = model(x)
            optimiser.zero_grad()
            vae_loss(recon, x, mu, logvar).backward()
            optimiser.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name
    # The comparison is of trained parameters, not of two untouched models.
    assert all(not torch.equal(a, b) for a, b in zip(ours.parameters(), initial))


def test_a_parameter_without_a_gradient_keeps_its_state():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimiser = Adam([a, b], lr=0.1)
    (a * 2).sum().backward()
    optimiser.step()
    assert optimiser.steps == [1, 0]
    assert torch.equal(b, torch.ones(3)) and not torch.equal(a, torch.ones(3))
    optimiser.zero_grad()
    assert a.grad is None and b.grad is None
    optimiser.step()  # nothing to update: no error, no step counted
    assert optimiser.steps == [1, 0]


def test_training_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\n"
        "from zerohop.ecg.vae import train\n"
        "train(torch.randn(64, 64), epochs=1, progress=False, threads=1)\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
