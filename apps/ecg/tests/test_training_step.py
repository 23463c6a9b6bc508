"""The job's training step over flat parameter buffers (zerohop_ecg.step): the same training
as a plain autograd loop, gradients that stay in the flat buffer, and the eager path taken
where there is no GPU or a batch is short. tests/gpu/test_ecg_training_graph.py checks the
captured CUDA graph."""

import pytest

torch = pytest.importorskip("torch")

from zerohop_ecg import step as training  # noqa: E402
from zerohop_ecg.step import ALIGN, FlatParameters, TrainingStep  # noqa: E402
from zerohop_ecg.vae import LightVAE, vae_loss  # noqa: E402


def _loss_of(model):
    def loss(x):
        recon, mu, logvar = model(x)
        return vae_loss(recon, x, mu, logvar)
    return loss


def test_parameters_and_gradients_are_views_of_the_flat_buffers():
    model = LightVAE(64)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    flat = FlatParameters(model)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name  # the values moved, unchanged
        offset = (p.data_ptr() - flat.values.data_ptr()) // 4
        assert offset % ALIGN == 0, name
        assert p.grad.data_ptr() - flat.grads.data_ptr() == offset * 4, name
    x = torch.randn(8, 1, 64)
    _loss_of(model)(x).backward()
    # backward added into the buffer in place rather than replacing the gradients
    assert flat.views_intact()
    assert flat.grads.abs().sum() > 0
    assert float(flat.grads.abs().sum()) == pytest.approx(
        sum(float(p.grad.abs().sum()) for p in model.parameters()))


def test_a_step_trains_as_a_plain_loop_does():
    torch.manual_seed(1)
    data = torch.randn(96, 64)
    ours, theirs = LightVAE(64), LightVAE(64)
    theirs.load_state_dict(ours.state_dict())
    step = TrainingStep(ours, data, _loss_of(ours), batch_size=32, lr=1e-3)
    reference = torch.optim.Adam(theirs.parameters(), lr=1e-3)
    expected = 0.0
    for i, batch in enumerate(torch.arange(96).split(32) * 3):
        torch.manual_seed(i)
        step(batch)
        torch.manual_seed(i)
        reference.zero_grad()
        loss = _loss_of(theirs)(data[batch].unsqueeze(1))
        loss.backward()
        reference.step()
        expected += float(loss.detach())
    assert float(step.total) == pytest.approx(expected, rel=1e-5)
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_gradients_go_through_the_reducer_before_the_update():
    model = LightVAE(64)
    seen = []

    def halve(grads):
        seen.append(grads.data_ptr())
        grads.mul_(0.0)  # a reducer that zeroes the gradients: Adam then moves nothing

    step = TrainingStep(model, torch.randn(16, 64), _loss_of(model), 16, 1e-2, reduce=halve)
    before = step.flat.values.clone()
    step(torch.arange(16))
    assert seen == [step.flat.grads.data_ptr()]
    assert torch.equal(step.flat.values, before)


def test_without_a_gpu_nothing_is_captured_and_the_reason_is_kept():
    model = LightVAE(64)
    step = TrainingStep(model, torch.randn(64, 64), _loss_of(model), 16, 1e-3)
    for batch in torch.arange(64).split(16) * (training.WARMUP_STEPS + 2):
        step(batch)
    assert not step.captured and step.why_eager == "not on a GPU"
    off = TrainingStep(model, torch.randn(64, 64), _loss_of(model), 16, 1e-3, capture=False)
    assert off.why_eager == "asked"


def test_mixed_dtypes_are_refused():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="mixed dtypes"):
        FlatParameters(model)


def test_warming_up_draws_no_random_numbers():
    from zerohop_ecg.vae import warm_up, warm_up_in_background

    state = torch.random.get_rng_state()
    warm_up("cpu", width=64, rows=4)
    assert torch.equal(state, torch.random.get_rng_state())
    warm_up_in_background("cpu")()  # nothing to warm on the CPU: returns at once


def test_warming_up_imports_no_sympy():
    """The warm-up runs on the GPU job's critical path; built on the meta device, its model
    imported sympy through torch's meta kernels (3 s on the GPU machine)."""
    import subprocess
    import sys

    probe = ("import sys, torch; before = 'sympy' in sys.modules; "
             "from zerohop_ecg.vae import warm_up; warm_up('cpu', width=64, rows=4); "
             "print(before, 'sympy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    before, after = done.stdout.split()
    if before == "True":
        pytest.skip("this torch imports sympy when it is imported")
    assert after == "False", "warming up imported sympy"


def test_doubling_the_length_is_nearest_upsampling_bit_for_bit():
    import torch.nn.functional as F

    from zerohop_ecg.vae import double_length

    x = torch.randn(5, 3, 17, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    ours, theirs = double_length(x), F.interpolate(y, scale_factor=2, mode="nearest")
    assert ours.shape == (5, 3, 34) and torch.equal(ours, theirs)
    weights = torch.randn(5, 3, 34)
    (ours * weights).sum().backward()
    (theirs * weights).sum().backward()
    assert torch.equal(x.grad, y.grad)


def test_evaluation_passes_stay_in_the_caches_on_the_cpu_and_grow_on_a_gpu():
    from zerohop_ecg.vae import evaluation_chunk

    assert evaluation_chunk("cpu") == 1024 and evaluation_chunk(torch.device("cpu")) == 1024
    assert evaluation_chunk("cuda:1") == 8192


def test_the_held_out_loss_and_the_embedding_keep_no_autograd_graph():
    """Evaluated with gradients on, a day-long record's held-out loss took 2.5 GiB."""
    from zerohop_ecg.vae import LightVAE, _held_out_loss, embed

    model = LightVAE(64)
    data = torch.randn(300, 64)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        _held_out_loss(model, data, torch.arange(300), "cpu")
        embed(model, data, 1.0)
        assert not saved, f"{len(saved)} tensors kept for a backward pass"
        model(data[:8].unsqueeze(1))[0].sum()
    assert saved, "the hook sees a graph when there is one"


def test_the_default_batch_grows_on_a_gpu_while_epochs_keep_64_steps():
    from zerohop_ecg.vae import default_batch

    assert default_batch("cpu", 10**6) == 1024
    assert default_batch("cuda", 10**6) == 4096
    assert default_batch("cuda", 64 * 2000) == 2000
    assert default_batch("cuda:1", 5000) == 1024  # a sixteenth of them, in train()


def _trained(model, fuse, batches):
    step = TrainingStep(model, torch.randn(64, 64, generator=torch.Generator().manual_seed(5)),
                        _loss_of(model), 16, 1e-3, fuse=fuse)
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        step(batch)
    return step


@pytest.mark.parametrize("where", ["compile", "first call"])
def test_a_compiler_that_fails_leaves_the_step_unfused_and_says_why(monkeypatch, where):
    def broken(fn, **kwargs):
        if where == "compile":
            raise RuntimeError("no C++ compiler found\nsecond line")

        def first_call(*args):
            raise RuntimeError("no C++ compiler found")
        return first_call

    monkeypatch.setattr(torch, "compile", broken)
    torch.manual_seed(0)
    ours, theirs = LightVAE(64), LightVAE(64)
    theirs.load_state_dict(ours.state_dict())
    batches = torch.arange(64).split(16) * 2
    failed, plain = _trained(ours, True, batches), _trained(theirs, False, batches)
    assert not failed.fused
    assert failed.why_unfused == "compiling failed: RuntimeError: no C++ compiler found"
    assert plain.why_unfused == "asked"
    # nothing ran twice or half-way: the same training as a step never asked to fuse
    assert torch.equal(failed.flat.values, plain.flat.values)
    assert failed.optimiser.steps == plain.optimiser.steps == len(batches)


def test_compiled_code_that_fails_after_it_has_worked_is_a_fault(monkeypatch):
    calls = []

    def flaky(fn, **kwargs):
        def wrapper(*args):
            calls.append(1)
            if len(calls) > 3:  # the first step: Adam's dry run, forward, Adam
                raise RuntimeError("device lost")
            return fn(*args)
        return wrapper

    monkeypatch.setattr(torch, "compile", flaky)
    model = LightVAE(64)
    step = TrainingStep(model, torch.randn(64, 64), _loss_of(model), 16, 1e-3, fuse=True)
    step(torch.arange(16))
    assert step.fused
    with pytest.raises(RuntimeError, match="device lost"):
        step(torch.arange(16))


def test_closing_drops_the_compiled_functions_and_later_steps_run_plainly(monkeypatch):
    compiled = []

    def counting(fn, **kwargs):
        def wrapper(*args):
            compiled.append(fn.__name__)
            return fn(*args)
        return wrapper

    monkeypatch.setattr(torch, "compile", counting)
    model = LightVAE(64)
    step = TrainingStep(model, torch.randn(64, 64), _loss_of(model), 16, 1e-3, fuse=True)
    step(torch.arange(16))
    assert step.fused and compiled == ["update", "_forward", "update"]
    step.close()
    step(torch.arange(16))
    assert step.fused  # the answer for the training that ran
    assert compiled == ["update", "_forward", "update"]  # nothing compiled ran again
    assert step.optimiser.steps == 2


def test_the_report_says_how_the_steps_ran():
    from zerohop_ecg.report import step_mode

    gpu = {"device": "cuda", "captured": True, "why_eager": None}
    assert step_mode({**gpu, "fused": False, "why_unfused": "asked"}) == \
        ", each step one CUDA graph replay"
    assert step_mode({**gpu, "fused": True, "why_unfused": None, "setup_seconds": 14.06}) == \
        ", each step one CUDA graph replay, kernels fused by torch.compile (14.1 s to warm " \
        "up, compile and capture)"
    failed = "compiling failed: RuntimeError: no C++ compiler found"
    assert step_mode({"device": "cpu", "captured": False, "why_eager": "not on a GPU",
                       "fused": False, "why_unfused": failed}) == f", not fused: {failed}"
    assert step_mode({"device": "cpu", "fused": False, "why_unfused": "asked"}) == ""


FAULTS_PER_STEP = """
import resource, sys, torch
from zerohop_ecg.malloc import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
def step():  # a step's largest temporaries: allocated, written, freed
    for rows in (12288, 9216, 12288):
        torch.empty(rows, 4, 256).fill_(1.0)
for _ in range(5):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(applied, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


@pytest.mark.skipif(not __import__("platform").libc_ver()[0] == "glibc", reason="glibc only")
def test_kept_freed_memory_spares_a_cpu_step_its_page_faults():
    import subprocess
    import sys

    def run(mode):
        out = subprocess.run([sys.executable, "-c", FAULTS_PER_STEP, mode], check=True,
                             capture_output=True, text=True, timeout=120).stdout.split()
        return out[0], float(out[1])

    (applied, kept), (_, default) = run("keep"), run("default")
    assert applied == "True"
    # Blocks of 36-48 MB, above the 32 MB up to which glibc's own threshold moves, are mapped
    # afresh and faulted in on every allocation by default (~34,000 faults a step here); kept,
    # at most the heap's growth once (0-1,300 a step over these 10). A real step's
    # temporaries (2-4 MB at batch 1024) fault in bursts as glibc moves its threshold and
    # trims its heap, up to 3,500 a step and in some runs none, so they make no deterministic
    # test; the 24-hour job counted 30 M faults before the setting.
    assert default > 20_000 and kept < default / 10, (kept, default)
