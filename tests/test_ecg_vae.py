"""The VAE's CPU layers (zerohop.ecg.cpu_layers): the same values and gradients as autograd's
own backward passes through the plain operations, and used only where they should be."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from zerohop.ecg import cpu_layers  # noqa: E402
from zerohop.ecg.vae import LightVAE, vae_loss  # noqa: E402


@pytest.fixture(autouse=True)
def _few_threads():
    """The layers are taken on at most MAX_THREADS threads: as on a 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _plain(monkeypatch):
    monkeypatch.setattr(cpu_layers, "wanted", lambda x: False)


def _gradients(model, x):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # the same reparameterisation noise
    recon, mu, logvar = model(x)
    loss = vae_loss(recon, x, mu, logvar)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("width", [8, 64, 256])
def test_a_training_pass_has_autograds_loss_and_gradients(monkeypatch, width):
    torch.manual_seed(0)
    model = LightVAE(width)
    with torch.no_grad():
        model.swish.alpha.fill_(1.3)  # away from 1, where a wrong gradient could hide
    x = torch.randn(96, 1, width)
    loss, grads = _gradients(model, x)
    _plain(monkeypatch)
    plain_loss, plain_grads = _gradients(model, x)
    assert torch.allclose(loss, plain_loss, rtol=1e-5)
    assert grads.keys() == plain_grads.keys()
    for name, g in grads.items():
        scale = plain_grads[name].abs().max().item()
        assert scale > 0, name
        assert torch.allclose(g, plain_grads[name], rtol=1e-4, atol=1e-5 * scale), name


@pytest.mark.parametrize("channels", [(1, 4), (2, 1), (4, 8), (16, 2)])
def test_a_convolution_and_its_gradients_match_conv1d(channels):
    torch.manual_seed(1)
    conv = torch.nn.Conv1d(*channels, 3, padding=1)
    x = torch.randn(5, channels[0], 32, requires_grad=True)
    g = torch.randn(5, channels[1], 32)
    out = cpu_layers.same_conv(conv, x)
    got = torch.autograd.grad(out, (x, conv.weight, conv.bias), g)
    want_out = conv(x)
    want = torch.autograd.grad(want_out, (x, conv.weight, conv.bias), g)
    assert torch.allclose(out, want_out, atol=1e-5)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4)


def test_the_first_layers_input_gets_no_gradient_computed():
    conv = torch.nn.Conv1d(1, 4, 3, padding=1)
    x = torch.randn(3, 1, 16)  # the beats: no gradient wanted
    grads = torch.autograd.grad(cpu_layers.same_conv(conv, x).sum(), (conv.weight, conv.bias))
    assert all(g is not None for g in grads)
    assert x.grad is None


def test_halving_matches_the_depthwise_convolution():
    torch.manual_seed(2)
    x = torch.randn(4, 8, 32, requires_grad=True)
    kernel = torch.tensor([1.0, 2.0, 1.0]).repeat(8, 1, 1)
    h = torch.randn(4, 8, 16)
    got_x, = torch.autograd.grad(cpu_layers.halve_length(x, kernel), x, h)
    want_x, = torch.autograd.grad(F.conv1d(x, kernel, stride=2, padding=1, groups=8), x, h)
    assert torch.allclose(got_x, want_x, atol=1e-5)


def test_the_layers_are_used_on_the_cpu_while_training_on_few_threads_only():
    x = torch.zeros(2, 1, 8)
    assert cpu_layers.wanted(x)
    with torch.no_grad():
        assert not cpu_layers.wanted(x)
    torch.set_num_threads(cpu_layers.MAX_THREADS + 1)  # oneDNN's layers are faster there
    assert not cpu_layers.wanted(x)
    torch.set_num_threads(2)
    assert cpu_layers.by_matrix_product(torch.zeros(4, 1, 3))
    assert not cpu_layers.by_matrix_product(torch.zeros(16, 8, 3))


def test_a_training_pass_goes_through_the_cpu_layers(monkeypatch):
    used = []
    for name in ("same_conv", "halve_length"):
        original = getattr(cpu_layers, name)
        monkeypatch.setattr(cpu_layers, name,
                            lambda *a, _f=original, _n=name: used.append(_n) or _f(*a))
    model = LightVAE(16)
    recon, mu, logvar = model(torch.randn(4, 1, 16))
    # three encoder and two head convolutions, three decoder ones; three halvings
    assert sorted(used) == sorted(["same_conv"] * 8 + ["halve_length"] * 3)
    used.clear()
    with torch.no_grad():
        model(torch.randn(4, 1, 16))
    assert used == []
