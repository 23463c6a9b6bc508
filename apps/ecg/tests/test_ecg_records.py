"""The ECG job over many recordings (`--records`): local worker processes, Ray and Dask hand
every record's beat rows to PyTorch without a copy (pointer identity, and the memory mapping
the rows lie in), a killed worker fails only its record, and bad arguments are refused first."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import zerohop_ecg as ecg
from conftest import requires_torch
from zerohop_ecg.__main__ import main
from zerohop_ecg.batch import run_batch
from zerohop_ecg.errors import EcgInputError
from zerohop_ecg.pipeline import Config
from zerohop_ecg.records import KILL_SWITCH, find_records, where_it_lives


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Record 100 (WFDB, annotated) and three 2.5-minute synthetic CSV recordings (each over Ray's 100 KiB inline limit)."""
    root = tmp_path_factory.mktemp("records")
    for f in Path(ecg.RECORD_100).parent.glob("mitdb100.*"):
        shutil.copy(f, root / f.name)
    for seed, bpm in enumerate((55, 95, 140)):
        signal, _, _ = ecg.synthesize(150.0, rate=360.0, heart_rate=bpm, ectopic=0.05, seed=seed)
        np.savetxt(root / f"synthetic{bpm}.csv", np.from_dlpack(signal), fmt="%.4f",
                   header="mV", comments="")
    return root


def job(folder, out, **kw):
    config = Config(out=out, records=str(folder), rate=360.0, epochs=1, progress=False,
                    plots=False, **kw)
    return run_batch(config, say=lambda *_: None)


def test_records_are_found_by_folder_glob_and_name(folder, tmp_path):
    names = [p.name for p in find_records(str(folder))]
    assert names == ["mitdb100.hea", "synthetic140.csv", "synthetic55.csv", "synthetic95.csv"]
    assert [p.name for p in find_records(str(folder / "*.csv"))] == names[1:]
    assert [p.name for p in find_records(str(folder / "mitdb100.dat"))] == ["mitdb100.hea"]
    assert [p.name for p in find_records(str(folder / "mitdb100"))] == ["mitdb100.hea"]
    with pytest.raises(EcgInputError, match="no WFDB headers"):
        find_records(str(tmp_path))


def assert_zero_copy(result, place):
    assert [h["record"] for h in result.hand_offs] == ["mitdb100", "synthetic140", "synthetic55",
                                                       "synthetic95"]
    for h in result.hand_offs:
        assert h["same"] and h["place"] == place and h["copied"] == 0, h
    assert result.bytes_copied == 0 and not result.failures


@requires_torch
def test_local_workers_hand_rows_over_in_shared_memory(folder, tmp_path):
    result = job(folder, tmp_path / "out", workers=2)
    assert_zero_copy(result, "shared memory")
    assert len({r.worker for r in result.records}) == 2, "two worker processes did the work"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| mitdb100 | 360 | 0:30:06 | 100.0 % | 2,271 |" in report
    assert "4/4 with the same pointer; bytes copied on the way: 0" in report
    assert "Detection over the 1 annotated record(s)" in report


@requires_torch
def test_in_process_the_rows_are_this_process_memory(folder, tmp_path):
    result = job(folder, tmp_path / "out")
    assert_zero_copy(result, "process memory")


@requires_torch
def test_a_killed_worker_fails_only_its_record(folder, tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_SWITCH, "synthetic95")
    result = job(folder, tmp_path / "out", workers=2)
    assert [f.name for f in result.failures] == ["synthetic95"]
    assert "killed by SIGKILL" in result.failures[0].error
    assert [r.name for r in result.records] == ["mitdb100", "synthetic140", "synthetic55"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Failed records" in report and "| synthetic95 | the worker" in report
    with pytest.raises(EcgInputError, match="synthetic95 failed.*--stop-on-error"):
        job(folder, tmp_path / "stopped", workers=2, stop_on_error=True)
    assert not (tmp_path / "stopped").exists()


@requires_torch
def test_ray_hands_rows_over_in_its_object_store(folder, tmp_path):
    ray = pytest.importorskip("ray")
    started = ray.is_initialized()
    result = job(folder, tmp_path / "out", ray="local")
    assert_zero_copy(result, "Ray object store")
    assert ray.is_initialized() == started, "a Ray the job started is shut down again"


@requires_torch
def test_dask_workers_on_this_machine_hand_rows_over_in_shared_memory(folder, tmp_path,
                                                                      monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv(KILL_SWITCH, "synthetic55")
    result = job(folder, tmp_path / "out", dask="local", workers=2)
    assert [f.name for f in result.failures] == ["synthetic55"]
    assert "KilledWorker" in result.failures[0].error
    for h in result.hand_offs:
        assert h["same"] and h["place"] == "shared memory" and h["copied"] == 0, h


@requires_torch
def test_records_queued_on_a_killed_dask_worker_are_not_blamed_for_its_death(folder, tmp_path,
                                                                             monkeypatch):
    """One worker of one thread: Dask queues two records on it at a time, so the worker that
    synthetic55 kills also takes synthetic95 down with it, every time. Only synthetic55 fails."""
    pytest.importorskip("distributed")
    monkeypatch.setenv(KILL_SWITCH, "synthetic55")
    result = job(folder, tmp_path / "out", dask="local", workers=1)
    assert [f.name for f in result.failures] == ["synthetic55"]
    assert "KilledWorker" in result.failures[0].error
    assert [r.name for r in result.records] == ["mitdb100", "synthetic140", "synthetic95"]


@requires_torch
def test_rows_of_different_widths_are_refused_with_the_rates(folder, tmp_path):
    with pytest.raises(EcgInputError, match=r"differ in width.*1000 Hz.*run each rate"):
        run_batch(Config(out=tmp_path / "out", records=str(folder), rate=1000.0, epochs=1,
                         progress=False, plots=False), say=lambda *_: None)
    assert not (tmp_path / "out").exists()


def test_where_it_lives_reads_the_memory_map():
    assert where_it_lives(np.zeros(10).ctypes.data) == "process memory"
    import zerohop
    import zerohop.memory as zm

    zm.set_current(zm.Shared())
    try:
        t = zerohop.zeros((1000,), "float32")
    finally:
        zm.reset_current()
    assert where_it_lives(t.data_ptr) == "shared memory"


@requires_torch
def test_the_cli_runs_records_and_refuses_engine_options_without_them(folder, tmp_path,
                                                                       capsys):
    assert main(["--records", str(folder), "--rate", "360", "--epochs", "1", "--workers", "2",
                 "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "4 record(s) trained on, 0 failed" in printed and "bytes copied: 0" in printed
    assert (tmp_path / "out" / "latent.png").exists()
    for extra in (["--workers", "2"], ["--ray", "local"], ["--dask", "local"]):
        with pytest.raises(SystemExit) as exit:
            main(["--synthetic", "0.01", "--out", str(tmp_path / "never"), *extra])
        assert exit.value.code == 2 and "go with --records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--records", str(folder), "--ray", "local", "--dask", "local"])
    assert not (tmp_path / "never").exists()


@requires_torch
def test_torchrun_trains_one_model_over_ranks_each_with_its_own_records(folder, tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "zerohop_ecg", "--records", str(folder), "--rate", "360",
         "--epochs", "2", "--threads", "1", "--no-plots", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("report:") == 1, "only rank 0 writes the report"
    report = (out / "report.md").read_text()
    assert "data-parallel over 2 ranks" in report
    assert "| epoch | training loss | held-out loss | seconds | steps (s) | held-out (s) |" \
        in report and "\n| 2 | " in report
    assert "on each of 2 torchrun ranks" in report
    for name in ("mitdb100", "synthetic140", "synthetic55", "synthetic95"):
        assert f"| {name} | 360 |" in report
    assert "4/4 with the same pointer; bytes copied on the way: 0" in report


RANKS_STAY_IN_STEP = """
import os, torch, torch.distributed as dist
from zerohop_ecg.vae import train
dist.init_process_group("gloo")
rank = dist.get_rank()
# Each rank its own beats, a different number of them.
beats = torch.randn(600 + 200 * rank, 64, generator=torch.Generator().manual_seed(rank))
shared = train(beats, epochs=2, batch_size=16, progress=False, threads=1)
whole = train(beats, epochs=2, batch_size=16, progress=False, threads=1, batch_per_rank=True)
# Shared out, each rank takes half the batch; per rank, a whole one and half the steps.
assert (shared["batch_size"], whole["batch_size"]) == (8, 16), (shared, whole)
assert (shared["steps"], whole["steps"]) == (2 * 57, 2 * 29), (shared, whole)
for trained in (shared, whole):
    values = torch.cat([p.detach().reshape(-1) for p in trained["model"].parameters()])
    gathered = [torch.empty_like(values) for _ in range(2)]
    dist.all_gather(gathered, values)
    assert torch.equal(gathered[0], gathered[1]), "the ranks' models differ"
# Each rank watches its share of 320 held-out beats per epoch: rank 0 all of its 150,
# rank 1 160 of its 200; the final loss over every one needs both ranks, rank 0 included.
watched = train(beats, epochs=2, batch_size=16, progress=False, threads=1, monitored=320)
assert (watched["monitored_beats"], watched["held_out_beats"]) == (310, 350), watched
losses = [torch.zeros(1, dtype=torch.float64) for _ in range(2)]
dist.all_gather(losses, torch.tensor([watched["test_loss"]], dtype=torch.float64))
assert torch.equal(losses[0], losses[1]), "the ranks' final held-out losses differ"
dist.barrier()
dist.destroy_process_group()
print("identical")
"""


@requires_torch
def test_ranks_train_one_model_whose_parameters_stay_identical(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "ranks.py"
    script.write_text(RANKS_STAY_IN_STEP)
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", str(script)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("identical") == 2  # both ranks reached the check


@requires_torch
def test_a_worker_that_hangs_fails_only_its_record_after_the_time_limit(folder, tmp_path,
                                                                        monkeypatch):
    from zerohop_ecg.records import STOP_SWITCH

    monkeypatch.setenv(STOP_SWITCH, "synthetic140")
    result = job(folder, tmp_path / "out", workers=2, record_timeout=3.0)
    assert [f.name for f in result.failures] == ["synthetic140"]
    assert "took longer than 3 s (--record-timeout)" in result.failures[0].error
    assert [r.name for r in result.records] == ["mitdb100", "synthetic55", "synthetic95"]


@requires_torch
def test_a_time_limit_with_one_worker_stops_the_hung_record_in_a_child(folder, tmp_path,
                                                                       monkeypatch):
    """--workers 1 --record-timeout: the records run in one worker process, which the job
    stops and replaces when a record hangs (record-timeout-one-worker)."""
    from zerohop_ecg.records import STOP_SWITCH, RecordOptions
    from zerohop_ecg.workers import LocalProcesses, backend

    # In this process the hung record would stop pytest itself: fail here instead.
    assert isinstance(backend(find_records(str(folder)), RecordOptions(), timeout=3.0),
                      LocalProcesses)
    monkeypatch.setenv(STOP_SWITCH, "synthetic140")
    result = job(folder, tmp_path / "out", record_timeout=3.0)
    assert [f.name for f in result.failures] == ["synthetic140"]
    assert "took longer than 3 s (--record-timeout)" in result.failures[0].error
    assert [r.name for r in result.records] == ["mitdb100", "synthetic55", "synthetic95"]


def test_a_time_limit_is_refused_with_ray_or_dask(folder, tmp_path, capsys):
    for engine in (["--dask", "local"], ["--ray", "local"]):
        args = ["--records", str(folder), "--record-timeout", "5", *engine, "--out",
                str(tmp_path / "out")]
        assert main(args) == 2
        assert "--record-timeout stops local worker processes; it does not go with --ray " \
               "or --dask" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@requires_torch
def test_a_dask_worker_that_dies_while_it_starts_costs_no_record(folder, tmp_path,
                                                                 monkeypatch):
    """dask-worker-dies-at-start: its nanny gives up and the LocalCluster with it; the job
    starts the cluster again and every record is processed."""
    pytest.importorskip("distributed")
    from zerohop_ecg.workers import START_FAULT

    monkeypatch.setenv(START_FAULT, f"1:{tmp_path / 'starts'}")
    result = job(folder, tmp_path / "out", dask="local", workers=2)
    assert (tmp_path / "starts").read_text() == "x", "one Dask worker start failed"
    assert not result.failures and len(result.records) == 4


@requires_torch
def test_workers_that_fail_to_start_are_replaced_and_then_given_up_on(folder, tmp_path,
                                                                      monkeypatch):
    from zerohop_ecg.workers import START_FAULT

    monkeypatch.setenv(START_FAULT, f"2:{tmp_path / 'starts'}")
    result = job(folder, tmp_path / "out", workers=2)
    assert not result.failures and len(result.records) == 4
    assert (tmp_path / "starts").read_text() == "xx", "two starts failed, then it went on"
    monkeypatch.setenv(START_FAULT, f"100:{tmp_path / 'always'}")
    with pytest.raises(EcgInputError, match=r"no worker process could start \(3 tried: "
                                            r"pid \d+, exit code 3"):
        job(folder, tmp_path / "never", workers=2)
    assert not (tmp_path / "never").exists()


@requires_torch
def test_sigterm_leaves_no_staging_folder_behind(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "zerohop_ecg", "--synthetic", "0.3",
                             "--epochs", "200", "--no-plots", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        begun = time.monotonic()
        while not list(tmp_path.glob(".out.partial-*")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() - begun < 120, "the job never staged its output"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert not list(tmp_path.glob(".out.partial-*")), "the staging folder was left behind"
    assert not out.exists()


@requires_torch
def test_a_record_failing_under_dask_is_one_line_and_dask_s_log_only_with_verbose(
        folder, tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv(KILL_SWITCH, "synthetic55")
    args = ["--records", str(folder), "--rate", "360", "--epochs", "1", "--no-plots",
            "--dask", "local", "--workers", "2"]
    assert main([*args, "--out", str(tmp_path / "quiet")]) == 0
    captured = capsys.readouterr()
    assert "failed: synthetic55: KilledWorker" in captured.out
    assert "Traceback" not in captured.err and "ERROR" not in captured.err, captured.err[-2000:]
