"""The job's training step captured in a CUDA graph (zerohop_ecg.step) on a GPU: it trains as
the eager step does, short batches run eagerly beside it, and under torchrun with two GPUs
the all-reduce is captured with the rest. Skipped without a GPU."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from zerohop_ecg import step as training  # noqa: E402
from zerohop_ecg.step import TrainingStep  # noqa: E402
from zerohop_ecg.vae import LightVAE, train  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _deterministic_loss(model):
    # The latent mean decoded, no sampled noise: eager and captured steps see the same math.
    def loss(x):
        mu, _ = model.encode(x)
        return ((model.decode(mu) - x) ** 2).mean(dim=(1, 2)).sum()
    return loss


def test_replayed_steps_train_as_eager_steps_do():
    torch.manual_seed(3)
    data = torch.randn(4096, 128, device="cuda")
    captured, eager = LightVAE(128).cuda(), LightVAE(128).cuda()
    eager.load_state_dict(captured.state_dict())
    steps = [TrainingStep(m, data, _deterministic_loss(m), 256, 1e-3, capture=c)
             for m, c in ((captured, True), (eager, False))]
    batches = torch.randperm(4096, device="cuda").split(256)
    for batch in batches:
        for step in steps:
            step(batch)
    assert steps[0].captured and steps[0].why_eager is None
    assert not steps[1].captured
    assert steps[0].optimiser.steps == steps[1].optimiser.steps == len(batches)
    torch.testing.assert_close(steps[0].total, steps[1].total, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(steps[0].flat.values, steps[1].flat.values, rtol=1e-3,
                               atol=1e-5)


def test_fused_replayed_steps_train_as_unfused_ones_do():
    torch.manual_seed(4)
    data = torch.randn(2048, 128, device="cuda")
    fused, plain = LightVAE(128).cuda(), LightVAE(128).cuda()
    plain.load_state_dict(fused.state_dict())
    steps = [TrainingStep(m, data, _deterministic_loss(m), 256, 1e-3, fuse=f)
             for m, f in ((fused, True), (plain, False))]
    for batch in torch.randperm(2048, device="cuda").split(256) * 2:
        for step in steps:
            step(batch)
    assert steps[0].fused and steps[0].why_unfused is None and steps[0].captured
    assert not steps[1].fused and steps[1].why_unfused == "asked"
    assert steps[0].setup_seconds > 0
    torch.testing.assert_close(steps[0].total, steps[1].total, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(steps[0].flat.values, steps[1].flat.values, rtol=1e-3,
                               atol=1e-5)


def test_a_short_batch_runs_eagerly_and_the_graph_goes_on():
    data = torch.randn(1000, 64, device="cuda")
    model = LightVAE(64).cuda()
    step = TrainingStep(model, data, _deterministic_loss(model), 128, 1e-3)
    for batch in torch.arange(1000, device="cuda").split(128) * (training.WARMUP_STEPS + 1):
        step(batch)  # every eighth batch is 104 rows: eager
    assert step.captured
    graph = step.graph
    before = step.flat.values.clone()
    step(torch.arange(128, device="cuda"))
    assert step.graph is graph and not torch.equal(step.flat.values, before)
    assert step.flat.views_intact()


def test_training_on_the_gpu_captures_its_steps_and_learns():
    torch.manual_seed(0)
    t = torch.linspace(0, 1, 128)
    beats = torch.exp(-((t - 0.5) / 0.03) ** 2).repeat(20000, 1)
    beats = beats * (1 + 0.2 * torch.rand(20000, 1)) + 0.05 * torch.randn(20000, 128)
    captured = train(beats, epochs=4, batch_size=256, progress=False, device="cuda")
    eager = train(beats, epochs=4, batch_size=256, progress=False, device="cuda",
                  cuda_graph=False)
    assert captured["captured"] and not eager["captured"]
    assert eager["why_eager"] == "asked"
    for result in (captured, eager):
        # An untrained model's loss on normalised beats is about 1 (their variance).
        assert result["held_out"][-1] < 0.9
    assert captured["held_out"][-1] == pytest.approx(eager["held_out"][-1], rel=0.1)


RANKS = """
import torch, torch.distributed as dist
from zerohop_ecg.vae import train
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
beats = torch.randn(8000 + 1000 * rank, 128, generator=torch.Generator().manual_seed(rank))
result = train(beats, epochs=3, progress=False, device=f"cuda:{rank}")
assert result["captured"], result["why_eager"]
values = torch.cat([p.detach().reshape(-1) for p in result["model"].parameters()])
gathered = [torch.empty_like(values) for _ in range(2)]
dist.all_gather(gathered, values)
assert torch.equal(gathered[0], gathered[1]), "the ranks' models differ"
# Each rank watches its share of 4,200 held-out beats per epoch (rank 0 all of its 2,000,
# rank 1 2,100 of its 2,250); the final loss over every one is an all-reduce on both ranks.
watched = train(beats, epochs=2, progress=False, device=f"cuda:{rank}", monitored=4200)
assert (watched["monitored_beats"], watched["held_out_beats"]) == (4100, 4250), watched
losses = [torch.zeros(1, dtype=torch.float64, device=f"cuda:{rank}") for _ in range(2)]
dist.all_gather(losses, torch.tensor([watched["test_loss"]], dtype=torch.float64,
                                     device=f"cuda:{rank}"))
assert torch.equal(losses[0], losses[1]), "the ranks' final held-out losses differ"
dist.barrier()
dist.destroy_process_group()
print("identical")
"""


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_capture_the_all_reduce_and_stay_identical(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", str(script)], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("identical") == 2


def test_warming_up_the_gpu_changes_no_random_stream():
    from zerohop_ecg.vae import warm_up_in_background

    cpu, gpu = torch.random.get_rng_state(), torch.cuda.get_rng_state()
    warm_up_in_background("cuda")()
    assert torch.equal(cpu, torch.random.get_rng_state())
    assert torch.equal(gpu, torch.cuda.get_rng_state())
