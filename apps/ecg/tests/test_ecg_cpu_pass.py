"""The VAE's CPU training pass in zerohop's kernels (zerohop_ecg.cpu_pass): the loss and every
gradient autograd gives through LightVAE and vae_loss, read and written in place (no copy),
the same whatever the thread count, and taken by training on the CPU only."""

import pytest

torch = pytest.importorskip("torch")

from zerohop_ecg import kernels as _ecg  # noqa: E402
from zerohop_ecg import cpu_pass  # noqa: E402
from zerohop_ecg.step import FlatParameters, TrainingStep  # noqa: E402
from zerohop_ecg.vae import LightVAE, train, vae_loss  # noqa: E402


def _model(width, seed=0):
    torch.manual_seed(seed)
    model = LightVAE(width)
    with torch.no_grad():
        model.swish.alpha.fill_(1.3)  # away from 1, where a wrong gradient could hide
    return model, FlatParameters(model)


def _beats(n, width, seed=3):
    g = torch.Generator().manual_seed(seed)
    # Beat-like rows: smooth, with a sharp peak, on a slope.
    t = torch.linspace(-1, 1, width)
    peak = torch.exp(-((t[None, :] - 0.1 * torch.randn(n, 1, generator=g)) / 0.05) ** 2)
    return (1.5 * peak + 0.3 * torch.randn(n, 1, generator=g) * t
            + 0.05 * torch.randn(n, width, generator=g)).contiguous()


def _autograd(model, flat, data, rows, noise):
    """Loss and flat gradients through autograd, with `noise` as the reparameterisation's ε."""
    x = data.index_select(0, rows).unsqueeze(1)
    mu, logvar = model.encode(x)
    z = mu + noise * torch.exp(0.5 * logvar)
    loss = vae_loss(model.decode(z), x, mu, logvar)
    grads = torch.autograd.grad(loss, flat.params)
    flat_grads = torch.zeros_like(flat.grads)
    base = flat.values.data_ptr()
    for p, g in zip(flat.params, grads):
        start = (p.data_ptr() - base) // 4
        flat_grads[start:start + p.numel()] = g.reshape(-1)
    return float(loss.detach()), flat_grads


@pytest.mark.parametrize("width", [8, 64, 256])
@pytest.mark.parametrize("batch", [1, 37, 96])
def test_the_pass_gives_autograds_loss_and_gradients(width, batch):
    model, flat = _model(width)
    data = _beats(200, width)
    rows = torch.randperm(200)[:batch]
    noise = torch.randn(batch, 2)
    native, why = cpu_pass.for_model(model, flat, data, threads=2)
    assert why is None and native is not None
    loss = native.native.loss_and_gradients(flat.values, data, rows, noise, flat.grads)
    want_loss, want = _autograd(model, flat, data, rows, noise)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    base = flat.values.data_ptr()
    for name, p in model.named_parameters():
        start = (p.data_ptr() - base) // 4
        got, ref = flat.grads[start:start + p.numel()], want[start:start + p.numel()]
        scale = ref.abs().max().item()
        assert scale > 0, name
        assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5 * scale), name
    # and nothing in the padding between parameters
    used = torch.zeros_like(flat.grads, dtype=torch.bool)
    for p in flat.params:
        start = (p.data_ptr() - base) // 4
        used[start:start + p.numel()] = True
    assert not flat.grads[~used].any()


def test_the_result_does_not_depend_on_the_threads():
    model, flat = _model(64)
    data = _beats(300, 64)
    rows, noise = torch.randint(0, 300, (250,)), torch.randn(250, 2)
    results = []
    for threads in (1, 2, 5):
        native = _ecg.VaeCpu(64, threads=threads)
        grads = torch.zeros_like(flat.grads)
        loss = native.loss_and_gradients(flat.values, data, rows, noise, grads)
        results.append((loss, grads))
    for loss, grads in results[1:]:
        assert loss == results[0][0]
        assert torch.equal(grads, results[0][1])


def test_the_loss_alone_is_the_pass_without_gradients():
    model, flat = _model(32)
    data = _beats(100, 32)
    native, _ = cpu_pass.for_model(model, flat, data, threads=2)
    rows = torch.randperm(100)[:70]
    torch.manual_seed(4)
    with_grads = float(native(rows))
    flat.grads.fill_(3.0)
    torch.manual_seed(4)  # the same ε
    assert native.loss(rows) == pytest.approx(with_grads, rel=1e-6)
    assert bool((flat.grads == 3.0).all())  # no gradient written


def test_the_buffers_are_used_in_place():
    model, flat = _model(16)
    data = _beats(20, 16)
    grads_before = flat.grads.data_ptr()
    native, _ = cpu_pass.for_model(model, flat, data, threads=1)
    loss = native(torch.arange(10))
    assert flat.grads.data_ptr() == grads_before  # written where the parameters' .grad live
    assert flat.grads.abs().sum() > 0
    assert all(p.grad.data_ptr() >= grads_before for p in flat.params)
    assert float(loss) > 0


def test_bad_arguments_are_refused_by_name_and_the_gradients_are_left_alone():
    model, flat = _model(16)
    data = _beats(20, 16)
    native = _ecg.VaeCpu(16, threads=1)
    rows, noise = torch.arange(4), torch.randn(4, 2)
    flat.grads.fill_(7.0)
    cases = [
        ((flat.values, data, torch.tensor([0, 1, 2, 20]), noise, flat.grads), "beat 20"),
        ((flat.values, data, rows, torch.randn(3, 2), flat.grads), "noise"),
        ((flat.values[:-16], data, rows, noise, flat.grads), "values"),
        ((flat.values, data, rows.int(), noise, flat.grads), "rows"),
        ((flat.values, data.double(), rows, noise, flat.grads), "data"),
        ((flat.values, data, rows, noise, flat.values), "shares memory with values"),
        ((flat.values, data, rows, noise, flat.grads[::2]), "grads"),
    ]
    for args, words in cases:
        with pytest.raises(ValueError, match=words):
            native.loss_and_gradients(*args)
    assert bool((flat.grads == 7.0).all())
    with pytest.raises(ValueError, match="width"):
        _ecg.VaeCpu(100)
    with pytest.raises(ValueError, match="latent"):
        _ecg.VaeCpu(64, latent=0)


def test_only_a_lightvae_on_the_cpu_gets_the_pass():
    model, flat = _model(16)
    data = _beats(20, 16)
    assert cpu_pass.for_model(model, flat, data.double())[1] == "not float32"
    assert "rows of 16" in cpu_pass.for_model(model, flat, _beats(20, 32))[1]
    other = torch.nn.Sequential(torch.nn.Linear(16, 16))
    assert cpu_pass.for_model(other, FlatParameters(other), data)[1] == "not a LightVAE"


def test_a_training_step_takes_the_pass_and_trains_as_autograd_does():
    """Two steps, one through the pass and one through autograd, from the same parameters
    and noise: the same parameters after Adam (rounding aside)."""
    data = _beats(256, 32)
    batch = torch.randperm(256)[:64]
    after = []
    for native in (True, False):
        model, _ = _model(32, seed=5)

        def loss(x, model=model):
            recon, mu, logvar = model(x)
            return vae_loss(recon, x, mu, logvar)

        step = TrainingStep(model, data, loss, 64, 1e-3)
        if native:
            step.gradients, why = cpu_pass.for_model(model, step.flat, data)
            assert why is None
        torch.manual_seed(11)  # the same ε
        for _ in range(3):
            step(batch)
        after.append((step.flat.values.clone(), float(step.total)))
    assert torch.allclose(after[0][0], after[1][0], atol=1e-5)
    assert after[0][1] == pytest.approx(after[1][1], rel=1e-5)


def test_training_on_the_cpu_uses_the_kernels_unless_told_not_to():
    beats = _beats(400, 32)
    fast = train(beats, epochs=3, progress=False, threads=2)
    slow = train(beats, epochs=3, progress=False, threads=2, cpu_kernels=False)
    assert fast["cpu_kernels"] and fast["why_autograd"] is None
    assert not slow["cpu_kernels"] and slow["why_autograd"] == "asked"
    # the same training up to rounding: same noise, same order, same steps
    assert fast["losses"] == pytest.approx(slow["losses"], rel=1e-4)
    assert fast["held_out"] == pytest.approx(slow["held_out"], rel=1e-4)
    assert fast["test_loss"] == pytest.approx(slow["test_loss"], rel=1e-4)
