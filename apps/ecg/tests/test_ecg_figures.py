"""The job's figures drawn by worker processes (machines with cores to spare) are the ones the
job draws itself; a worker that dies leaves its figures to the job."""

import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from zerohop_ecg import plots  # noqa: E402
from zerohop_ecg.figure_workers import Drawing, figure_workers  # noqa: E402
from zerohop_ecg.sources import Truth  # noqa: E402


def figure_inputs():
    """Every figure's inputs, as the job makes them, for a small annotated recording."""
    rate, n = 360.0, 400
    rng = np.random.default_rng(3)
    signal = rng.standard_normal(int(rate * 60)).astype(np.float32)
    beat_peaks = np.sort(rng.choice(np.arange(200, len(signal) - 200), n, replace=False))
    beats = rng.standard_normal((n, 256)).astype(np.float32)
    symbols = np.where(np.arange(n) % 25 == 0, "V", "N")
    truth = Truth(samples=beat_peaks.astype(np.int64), symbols=list(symbols), name="test")
    params = {"rate": rate, "before": 90, "after": 166, "width": 256}

    def rows(indices):
        return beats[indices]

    mu = rng.standard_normal((n, 2)).astype(np.float32)
    error = rng.random(n).astype(np.float32)
    classes = plots.beat_classes(beat_peaks, truth, rate)
    figures = plots.input_figures(
        signal=signal, units="mV", energy=signal ** 2, r_peaks=beat_peaks, truth=truth,
        params=params, beat_peaks=beat_peaks, classes=classes, width=256, rows=rows)
    figures.update(plots.model_figures(
        params=params, width=256, units="mV", beat_peaks=beat_peaks, classes=classes, mu=mu,
        error=error, losses=[1.0, 0.5, 0.3], held_out=[1.1, 0.6, 0.35], best_epoch=3,
        decoded=rng.standard_normal((25, 256)).astype(np.float32),
        grid=[(a, b) for b in range(5) for a in range(5)], rows=rows))
    return figures


def test_how_many_workers_a_machine_gets():
    assert [figure_workers(c) for c in (1, 2, 3, 4, 7, 8, 16, 128)] == [0, 0, 0, 2, 2, 4, 4, 4]


def test_workers_draw_the_same_figures_as_the_job_itself(tmp_path):
    figures = figure_inputs()
    assert set(figures) == set(plots.FIGURES)
    (tmp_path / "here").mkdir()
    (tmp_path / "workers").mkdir()
    with Drawing(tmp_path / "here", 0) as here:
        here.import_here()
        here.submit(figures)
        drawn_here = here.finish()
    with Drawing(tmp_path / "workers", 2) as workers:
        assert workers.workers == 2
        workers.submit({k: v for k, v in figures.items() if k in plots.INPUT_FIGURES})
        workers.submit({k: v for k, v in figures.items() if k not in plots.INPUT_FIGURES})
        drawn_by_workers = workers.finish()
    assert list(drawn_here) == list(drawn_by_workers) == list(plots.FIGURES), "report order"
    assert here.pickled_bytes == 0 and here.drawn_here == list(plots.FIGURES)
    assert workers.drawn_here == []
    # Only what each figure draws is pickled: the beat rows drawn, not the whole matrix.
    assert 0 < workers.pickled_bytes < 400 * 256 * 4
    for name in plots.FIGURES:
        assert drawn_here[name].read_bytes() == drawn_by_workers[name].read_bytes(), name


def test_a_dead_worker_leaves_its_figures_to_the_job(tmp_path):
    figures = figure_inputs()
    with Drawing(tmp_path, 2) as drawing:
        drawing.submit({"loss": figures["loss"]})
        pool = drawing._pool
        assert pool is not None
        pool.submit(int).result()  # the workers are up
        for pid in list(pool._processes):
            os.kill(pid, signal.SIGKILL)
        drawing.submit({k: v for k, v in figures.items() if k != "loss"})
        drawn = drawing.finish()
    assert list(drawn) == list(plots.FIGURES)
    assert set(drawing.drawn_here) >= set(plots.FIGURES) - {"loss"}, "drawn by the job"
    assert all(path.stat().st_size > 1000 for path in drawn.values())


def ignores_sigint(pid):
    with open(f"/proc/{pid}/status") as status:
        mask = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_is_the_jobs_to_handle_not_the_workers(tmp_path):
    """Ctrl-C reaches the whole process group; the workers leave it to the job."""
    figures = figure_inputs()
    with Drawing(tmp_path, 2) as drawing:
        pool = drawing._pool
        assert pool is not None
        pool.submit(int).result()  # the workers are up
        pids = list(pool._processes)
        deadline = time.monotonic() + 60
        while not all(ignores_sigint(pid) for pid in pids):  # each worker started
            assert time.monotonic() < deadline, "the workers never ignored SIGINT"
            time.sleep(0.05)
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        drawing.submit(figures)
        drawn = drawing.finish()
    assert list(drawn) == list(plots.FIGURES) and drawing.drawn_here == []


def test_an_error_in_a_figure_is_raised_by_finish(tmp_path):
    with Drawing(tmp_path, 2) as drawing:
        drawing.submit({"loss": {"losses": [1.0], "held_out": None, "best_epoch": None,
                                 "unexpected": 1}})
        with pytest.raises(TypeError, match="unexpected"):
            drawing.finish()


def test_the_job_with_figure_workers_reports_what_it_pickled_to_them(tmp_path, monkeypatch):
    """A machine with cores to spare (faked here): the job's figures come from workers, and
    the report's stage row counts the bytes their inputs took."""
    pytest.importorskip("torch")
    from zerohop_ecg import figure_workers
    from zerohop_ecg.__main__ import main

    monkeypatch.setattr(figure_workers, "figure_workers", lambda cores: 2)
    out = tmp_path / "out"
    assert main(["--synthetic", "0.05", "--epochs", "1", "--no-progress", "--out",
                 str(out)]) == 0
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(plots.FIGURES)
    row = next(line for line in (out / "report.md").read_text().splitlines()
               if line.startswith("| plots"))
    assert "2 worker processes" in row and not row.endswith("| 0 B |"), row
