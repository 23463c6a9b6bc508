"""The job over many recordings (`--records`): workers detect and cut beats, the rows reach
PyTorch where the transport left them (shared memory, Ray's object store) with no copy, one
LightVAE trains on every record's beats, and the report lists every record, its detection score
and where its rows lived, and names the records that failed."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import sources
from .errors import EcgInputError
from .output import Staging
from .records import RecordFailure, RecordOptions, find_records, where_it_lives
from .workers import InProcess, backend

#: Where rows may lie without having been copied on their way to this process.
SHARED_PLACES = ("shared memory", "Ray object store")


@dataclass
class BatchResult:
    report: Path
    plots: dict
    records: list
    failures: list
    hand_offs: list
    bytes_copied: int
    losses: list = field(default_factory=list)


def _torch_view(torch, beats):
    """A torch tensor over a record's rows, same memory. Ray's store is read-only and torch has
    no read-only tensors: it gets the rows through NumPy (torch warns that it could write; the
    job never writes beats, training reads them once to normalise them)."""
    if not beats.readonly:
        return torch.from_dlpack(beats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.from_dlpack(beats))


def _check_widths(records):
    widths = {}
    for r in records:
        widths.setdefault(int(r.beats.shape[1]), []).append(f"{r.name} ({r.rate:g} Hz)")
    if len(widths) > 1:
        groups = "; ".join(f"{w} samples: {', '.join(names)}" for w, names in widths.items())
        raise EcgInputError(f"the recordings' beat rows differ in width ({groups}): one model "
                            f"trains on one rate; run each rate as its own job")


def _pooled(records):
    scored = [r.accuracy for r in records if r.accuracy is not None]
    if not scored:
        return None
    tp, fp, fn = (sum(a[k] for a in scored) for k in ("tp", "fp", "fn"))
    return {"records": len(scored), "tp": tp, "fp": fp, "fn": fn,
            "sensitivity": tp / max(1, tp + fn), "ppv": tp / max(1, tp + fp),
            "f1": 2 * tp / max(1, 2 * tp + fp + fn)}


def _collect(work, config, total, say):
    records, failures = [], []
    for result in work.results():
        done = len(records) + len(failures) + 1
        if isinstance(result, RecordFailure):
            failures.append(result)
            say(f"  [{done}/{total}] {result.name}: FAILED: {result.error}")
            if config.stop_on_error:
                raise EcgInputError(f"record {result.name} failed: {result.error} "
                                    f"(stopping: --stop-on-error)")
        else:
            records.append(result)
            say(f"  [{done}/{total}] {result.name}: {result.beats.shape[0]:,} beats, "
                f"{result.bpm:.0f} bpm, {result.seconds:.2f} s ({result.worker})")
    if not records:
        raise EcgInputError(f"no recording could be processed; first failure: "
                            f"{failures[0].name}: {failures[0].error}")
    return sorted(records, key=lambda r: r.index), sorted(failures, key=lambda f: f.index)


def run_batch(config, say=print) -> BatchResult:
    """Runs the job over `config.records`; the output folder is written only if it succeeds."""
    torch = sources.require_torch()
    if config.plots:
        sources.require_matplotlib()
    from .vae import embed, train

    if config.device == "cuda" and not torch.cuda.is_available():
        raise EcgInputError("--device cuda: torch sees no CUDA device on this machine")
    paths = find_records(config.records)
    options = RecordOptions(method=config.method, column=config.column, rate=config.rate,
                            delimiter=config.delimiter)
    staging = Staging(config.out)
    with staging, backend(paths, options, workers=config.workers, ray=config.ray,
                          dask=config.dask) as work:
        say(f"{len(paths)} recording(s) on {work.label}")
        begun = time.perf_counter()
        records, failures = _collect(work, config, len(paths), say)
        detect_seconds = time.perf_counter() - begun
        _check_widths(records)

        hand_offs, parts, copied = [], [], 0
        for r in records:
            place = where_it_lives(r.beats.data_ptr)
            moved = place == "process memory" and not isinstance(work, InProcess)
            if moved or r.beats.is_copied:
                copied += r.beats.nbytes
            x = _torch_view(torch, r.beats)
            hand_offs.append({"record": r.name, "place": place, "bytes": r.beats.nbytes,
                              "copied": r.beats.nbytes if moved or r.beats.is_copied else 0,
                              "same": x.data_ptr() == r.beats.data_ptr})
            if x.data_ptr() != r.beats.data_ptr:
                raise AssertionError(f"{r.name}: torch's view is not the rows' memory")
            parts.append(x)

        begun = time.perf_counter()
        trained = train(parts, epochs=config.epochs, batch_size=config.batch_size,
                        seed=config.seed, device=config.device, progress=config.progress,
                        threads=config.threads)
        train_seconds = time.perf_counter() - begun
        mu, _, _, error = embed(trained["model"], parts, trained["scale"], config.device,
                                center=trained["center"])
        mu, error = mu.numpy(), error.numpy()
        offsets = np.cumsum([0] + [int(p.shape[0]) for p in parts])
        outliers = []
        for row in np.argsort(error)[::-1][:10]:
            k = int(np.searchsorted(offsets, row, side="right") - 1)
            r = records[k]
            peak = int(r.beat_peaks[row - offsets[k]])
            outliers.append({"record": r.name, "time": peak / r.rate, "error": float(error[row])})

        plots = {}
        if config.plots:
            from .batch_report import write_batch_plots

            plots = write_batch_plots(staging.path, records, offsets, mu, trained["losses"])
        from .batch_report import write_batch_report

        report = write_batch_report(
            staging.path / "report.md", backend=work.label, records=records, failures=failures,
            hand_offs=hand_offs, copied=copied, pooled=_pooled(records), outliers=outliers,
            plots=plots, detect_seconds=detect_seconds, train_seconds=train_seconds,
            train={"epochs": config.epochs, "batch_size": trained["batch_size"],
                   "final_loss": trained["losses"][-1], "test_loss": trained["test_loss"],
                   "device": config.device, "threads": trained["threads"]})
        staging.commit()
    # The rows' memory belongs to the backend, closed now: the summaries keep no view of it.
    records = [replace(r, beats=None) for r in records]
    return BatchResult(report=config.out / report.name,
                       plots={k: config.out / p.name for k, p in plots.items()},
                       records=records, failures=failures, hand_offs=hand_offs,
                       bytes_copied=copied, losses=trained["losses"])
