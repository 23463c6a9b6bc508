"""The job on one recording, as stages (one function each) and `run`, which chains them:
input → Rust stages → PyTorch → plots and report, with every hand-off checked by pointer
identity and every byte copied counted. Its options are `config.Config`."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

import zerohop

from . import figure_workers, segment, sources
from .config import ENERGY_SHOWN_S, TOLERANCE_S, Config
from .detection import accuracy, check_detection, few_beats_warning
from .errors import EcgInputError
from .figure_workers import Drawing
from .outliers import outlier_score, own_beat_span, prematurity
from .output import Staging
from .plots import beat_classes, held_out_label, input_figures, model_figures
from .quality import WINDOW_S, Quality, QualitySummary, assess as judge_quality
from .report import Accuracy, Counts, HandOff, Outlier, Stage, write_report
from .shared_pool import MemorySummary, SharedPool
from .recording import CUDA, Input
from .sources import TorchInBackground
from .workers import usable_cores

if TYPE_CHECKING:
    import torch

    from .kernels import Params as _Params, Segmentation as _Segmentation
    from .vae import Trained

# `vae` imports torch, which the job imports on a thread while it reads the recording
# (sources.TorchInBackground): the stages that train import it once that import is done.


@dataclass
class Result:
    report: Path
    plots: dict[str, Path]
    stages: list[Stage]
    hand_offs: list[HandOff]
    counts: Counts
    accuracy: Accuracy | None
    outliers: list[Outlier]
    losses: list[float] = field(default_factory=list)
    #: The shared pool's peak and what it held when the report was written (GPU job).
    memory: MemorySummary | None = None
    #: The signal's quality, as the report gives it.
    quality: QualitySummary | None = None


#: What crosses a hand-off: a zerohop tensor, a NumPy array or a torch tensor.
Buffer: TypeAlias = "zerohop.Tensor | NDArray[Any] | torch.Tensor"
_B = TypeVar("_B", bound=Buffer)
#: The stage outputs the report and figures read on the host.
_HostOutput: TypeAlias = Literal["r_peaks", "beat_peaks"]


def _address(x: Buffer) -> int:
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        address: int = x.__array_interface__["data"][0]
        return address
    pointer: int = x.data_ptr()  # a torch tensor (Any to mypy, which does not read torch)
    return pointer


@dataclass
class _Ledger:
    """What the report accounts for as the job runs: each stage's seconds and bytes copied,
    each hand-off (checked to share its memory), and the explicit device → host copies."""

    stages: list[Stage] = field(default_factory=list)
    hand_offs: list[HandOff] = field(default_factory=list)
    moved_to_host: list[int] = field(default_factory=list)

    def stage(self, name: str, begun: float, copied: int = 0) -> None:
        self.stages.append((name, time.perf_counter() - begun, copied))

    def hand_off(self, label: str, source_obj: Buffer, target_obj: _B) -> _B:
        same = _address(source_obj) == _address(target_obj)
        self.hand_offs.append((label, _address(target_obj), same))
        if not same:
            raise AssertionError(f"{label}: the data was copied")
        return target_obj

    def host_copies(self) -> None:
        """The device → host copies as one line of the stages (none: no line)."""
        if self.moved_to_host:
            self.stages.append(("device → host for the input's checks, the report and figures "
                                "(explicit copies)", 0.0, sum(self.moved_to_host)))


@dataclass
class _Outputs:
    """The segmentation's outputs, brought to the host as the report and figures need them:
    zero-copy views on the CPU; on the GPU explicit copies (of what is read only), counted."""

    seg: _Segmentation
    on_gpu: bool
    torch: ModuleType
    ledger: _Ledger

    def host(self, name: _HostOutput) -> NDArray[Any]:
        if not self.on_gpu:
            return np.from_dlpack(self.seg[name])
        array: NDArray[Any] = self.torch.from_dlpack(self.seg[name]).cpu().numpy()
        self.ledger.moved_to_host.append(array.nbytes)
        return array

    def beat_rows(self, indices: NDArray[np.int64]) -> NDArray[Any]:
        """The beat rows a figure draws, on the host (on the GPU: those rows only)."""
        beats = self.seg["beats"]
        if not self.on_gpu:
            return np.from_dlpack(beats)[indices]
        picked = self.torch.from_dlpack(beats)[self.torch.from_numpy(indices).to("cuda")]
        rows: NDArray[Any] = picked.cpu().numpy()
        self.ledger.moved_to_host.append(rows.nbytes)
        return rows

    def keep_energy_shown(self, rate: float) -> NDArray[Any]:
        """The detector's energy over the seconds the figures draw, on the host; the whole
        curvature and energy (2 × 124 MB for a day-long record) are dropped before training."""
        name: Literal["energy", "curvature"] = "energy" if "energy" in self.seg else "curvature"
        shown = min(int(self.seg[name].shape[0]), int(ENERGY_SHOWN_S * rate))
        energy: NDArray[Any]
        if self.on_gpu:
            energy = self.torch.from_dlpack(self.seg[name])[:shown].cpu().numpy()
            self.ledger.moved_to_host.append(energy.nbytes)
        else:
            energy = np.from_dlpack(self.seg[name])[:shown].copy()
        # `seg` is a plain dict, but its type (a TypedDict) lets no required key go: the two
        # are dropped through the dict, and not read from `seg` after.
        outputs = cast("dict[str, object]", self.seg)
        for dropped in ("curvature", "energy"):
            outputs.pop(dropped, None)
        return energy


def _load(config: Config, say: Callable[[str], object], ledger: _Ledger) -> Input:
    """Reads (or makes) the recording."""
    started = time.perf_counter()
    data = sources.load(config, say)
    ledger.stages.append((data.stage, time.perf_counter() - started, 0))
    if data.host_copy is not None:  # the reader's checks copied a device signal to the host
        ledger.moved_to_host.append(data.host_copy.nbytes)
    return data


def _segment(config: Config, data: Input, ledger: _Ledger) -> _Segmentation:
    """Detects the beats and cuts their rows (Rust stages: CUDA kernels on the GPU, where the
    signal crosses to the device once)."""
    if config.device == "cuda":
        from zerohop.cuda import preload_nvrtc

        preload_nvrtc()
        seg = segment(data.signal, data.rate, method=config.method, device="cuda:0")
    else:
        # The quality is judged in the same call, while the detector's threads are awake.
        seg = segment(data.signal, data.rate, method=config.method, quality=WINDOW_S)
    signal_on_host = data.signal.__dlpack_device__()[0] != CUDA
    for name, seconds in seg["timings"]:
        copied = data.samples * 4 if name == "host→device" and signal_on_host else 0
        ledger.stages.append((name, seconds, copied))
    return seg


def _assess(data: Input, seg: _Segmentation, r_peaks: NDArray[Any], ledger: _Ledger,
            say: Callable[[str], object]) -> Quality:
    """Judges the signal's quality per window, on the host (a view there; on the GPU the
    reader's host copy, or one made now and counted), unless the detection judged it
    already; raises EcgInputError when no window holds a reliable ECG, before anything is
    trained on or reported of it."""
    if "quality" in seg:
        judged = Quality(seg["quality"], data.rate, data.samples)
        ledger.stages.append((_quality_stage(judged), seg["quality"]["seconds"], 0))
    else:
        begun = time.perf_counter()
        copied_before = data.host_copy is not None
        signal = data.numpy_signal()
        if data.host_copy is not None and not copied_before:
            ledger.moved_to_host.append(data.host_copy.nbytes)
        judged = judge_quality(signal, data.rate, data.samples, r_peaks)
        ledger.stage(_quality_stage(judged), begun)
    if judged.reliable_windows == 0:
        raise EcgInputError(judged.nothing_reliable(data.description))
    say(judged.line())
    return judged


def _quality_stage(judged: Quality) -> str:
    return f"signal quality ({judged.windows['window_s']:g} s windows)"


def _check_beats(config: Config, data: Input, seg: _Segmentation, r_peaks: NDArray[Any],
                 reliable: NDArray[np.bool_], rows: int,
                 say: Callable[[str], object]) -> tuple[float, str | None]:
    """The median heart rate and the few-beats warning; raises EcgInputError when the beats
    found are no heartbeats at the rate given, or too few to train on. `reliable` flags the
    R peaks in reliable signal (the heart rate is theirs) and `rows` counts their rows."""
    bpm = check_detection(r_peaks[reliable], data.description, data.rate)
    n_beats = rows
    if n_beats < 2:
        raise EcgInputError(f"{data.description}: only {n_beats} beat(s) in reliable signal "
                            f"away from the recording's ends; too short to train on")
    total = int(seg["beats"].shape[0])
    left_out = (f"; {total - n_beats:,} in unreliable signal, not trained on"
                if total > n_beats else "")
    say(f"{len(r_peaks):,} beats detected ({config.method}, median {bpm:.0f} bpm), "
        f"{total:,} rows of width {seg['params']['width']} "
        f"({seg['edge_dropped']} at the recording's ends without a full window{left_out})")
    few = few_beats_warning(n_beats)
    if few:
        say(f"warning: {few}")
    return bpm, few


def _to_torch(ledger: _Ledger, torch: ModuleType, beats: zerohop.Tensor,
              kept: NDArray[np.int64] | None) -> Any:
    """The beat rows as a torch tensor on the same memory; with `kept` (the rows in reliable
    signal, when some are not), those rows alone: a deliberate copy, counted as one, made
    after the hand-off (which stays zero-copy)."""
    begun = time.perf_counter()
    x = ledger.hand_off("zerohop beats → torch.from_dlpack", beats, torch.from_dlpack(beats))
    ledger.stage("beats → PyTorch (DLPack)", begun)
    if kept is None:
        return x
    begun = time.perf_counter()
    x = x[torch.from_numpy(kept).to(x.device)]
    ledger.stage("beats in reliable signal selected for training (a copy, by choice)", begun,
                 x.numel() * x.element_size())
    return x


def _train(config: Config, x: Any, background: TorchInBackground, ledger: _Ledger,
           ends: NDArray[np.int64]) -> Trained:
    """Trains the model on the beat rows (after the GPU's warm-up, on the GPU)."""
    from .vae import train

    background.warmed()
    begun = time.perf_counter()
    trained = train(x, epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                    seed=config.seed, device=config.device, progress=config.progress,
                    threads=config.threads, cuda_graph=config.cuda_graph,
                    fuse=config.fuse, batch_per_rank=config.batch_per_rank,
                    monitored=config.monitored, cpu_kernels=config.cpu_kernels, ends=ends)
    ledger.stage("train LightVAE (PyTorch)", begun)
    return trained


def _embed(config: Config, trained: Trained, x: Any, ledger: _Ledger,
           spans: tuple[NDArray[np.int64], NDArray[np.int64]]
           ) -> tuple[NDArray[Any], NDArray[Any]]:
    """Each beat's latent mean and reconstruction error over the part of its window that is
    its own (`spans`: `outliers.own_beat_span`), handed back through zerohop to NumPy without
    a copy."""
    from .vae import embed

    mu, _, _, error = embed(trained["model"], x, trained["scale"], config.device,
                            center=trained["center"], reconstructions=False, spans=spans)
    begun = time.perf_counter()
    back = {name: ledger.hand_off(f"torch {name} → zerohop.from_dlpack", t,
                                  zerohop.from_dlpack(t))
            for name, t in (("latent μ", mu), ("reconstruction error", error))}
    views = {name: ledger.hand_off(f"zerohop {name} → numpy.from_dlpack", t, np.from_dlpack(t))
             for name, t in back.items()}
    ledger.stage("results → zerohop → NumPy (DLPack)", begun)
    return views["latent μ"], views["reconstruction error"]


def _outliers(error: NDArray[Any], score: NDArray[Any], beat_peaks: NDArray[Any],
              rate: float, r_peaks: NDArray[Any], classes: NDArray[np.str_] | None,
              rows: NDArray[np.int64] | None = None) -> list[Outlier]:
    """The ten beats of highest outlier `score` (`outlier_score`), with their reconstruction
    error, their reference class (where the recording has annotations) and the RR intervals
    around them, in ms. `rows` gives each ranked beat's row number among all rows (None:
    the same)."""
    worst = np.argsort(score)[::-1][:10]

    def number(i: int) -> int:
        return int(i if rows is None else rows[i])

    peaks = np.asarray(r_peaks)

    def rr(peak: int) -> tuple[float | None, float | None]:
        at = int(np.searchsorted(peaks, peak))
        before = (peak - peaks[at - 1]) / rate * 1e3 if at > 0 else None
        after = ((peaks[at + 1] - peak) / rate * 1e3
                 if at + 1 < len(peaks) and peaks[at] == peak else None)
        return (None if before is None else float(before),
                None if after is None else float(after))

    return [{"beat": number(int(i)), "peak": int(beat_peaks[i]), "time": beat_peaks[i] / rate,
             "error": float(error[i]), "score": float(score[i]), "rr": rr(int(beat_peaks[i])),
             "kind": None if classes is None else str(classes[i])} for i in worst]


def _score(data: Input, r_peaks: NDArray[Any], say: Callable[[str], object]) -> Accuracy | None:
    """The detection scored against the recording's reference annotations, if it has any."""
    if data.truth is None:
        return None
    scored = accuracy(r_peaks, data.truth, data.rate, data.samples)
    if scored["scored"]:
        say(f"detection against {data.truth.name}: sensitivity "
            f"{scored['sensitivity'] * 100:.2f} %, positive predictivity "
            f"{scored['ppv'] * 100:.2f} % (±{TOLERANCE_S * 1000:.0f} ms)")
    else:
        say(f"detection against {data.truth.name}: not scored: {scored['why']}")
    return scored


def _decoded_grid(config: Config, torch: ModuleType, trained: Trained, mu: NDArray[Any]
                  ) -> tuple[NDArray[Any], list[tuple[float, float]]]:
    """The beats the model decodes from a 5 × 5 grid over the latent means' range."""
    lo, hi = (np.percentile(mu, [2, 98], axis=0) if len(mu) > 1 else (mu.min(0), mu.max(0)))
    grid = [(a, b) for b in np.linspace(hi[1], lo[1], 5) for a in np.linspace(lo[0], hi[0], 5)]
    with torch.no_grad():
        z = torch.tensor(grid, dtype=torch.float32, device=config.device)
        decoded: NDArray[Any] = (trained["model"].decode(z) * trained["scale"]
                                 + trained["center"]).squeeze(1).cpu().numpy()
    return decoded, grid


def _draw(drawing: Drawing, ledger: _Ledger, begun: float, *figures: dict[str, dict[str, Any]]
          ) -> dict[str, Path]:
    """Draws `figures` and those queued before; the stage's time counts from `begun`."""
    for some in figures:
        drawing.submit(some)
    plots = drawing.finish()
    if drawing.workers:
        ledger.stage(f"plots (matplotlib, {drawing.workers} worker processes; their inputs "
                     "pickled)", begun, drawing.pickled_bytes)
    else:
        ledger.stage("plots (matplotlib)", begun)
    return plots


def _write_report(path: Path, config: Config, data: Input, params: _Params, ledger: _Ledger,
                  counts: Counts, scored: Accuracy | None, outliers: list[Outlier],
                  plots: dict[str, Path], trained: Trained, few: str | None,
                  memory: MemorySummary | None, quality: QualitySummary) -> Path:
    from .vae import convergence_note

    return write_report(
        path, source=data.description, params=params, memory=memory, start=data.start,
        quality=quality,
        method=config.method, stages=ledger.stages, counts=counts, accuracy=scored,
        outliers=outliers, plots=plots, hand_offs=ledger.hand_offs, units=data.units,
        train={"epochs": config.epochs, "batch_size": trained["batch_size"],
               "captured": trained["captured"], "why_eager": trained["why_eager"],
               "fused": trained["fused"], "why_unfused": trained["why_unfused"],
               "cpu_kernels": trained["cpu_kernels"],
               "why_autograd": trained["why_autograd"],
               "setup_seconds": trained["setup_seconds"],
               "final_loss": trained["losses"][-1], "test_loss": trained["test_loss"],
               "held_out_beats": trained["held_out_beats"],
               "monitored_beats": trained["monitored_beats"], "device": config.device,
               "threads": trained["threads"],
               "batch_asked": config.batch_size, "few": few,
               "converged": convergence_note(trained, config.epochs)})


def run(config: Config, say: Callable[[str], object] = print) -> Result:
    """Runs the job; raises EcgInputError (a ValueError) for anything about the input, before
    writing anything, and leaves `config.out` untouched unless the whole job succeeds."""
    sources.require_rest_of_job(config)
    staging = Staging(config.out)
    ledger = _Ledger()
    with staging, ExitStack() as cleanup:
        assert staging.path is not None  # made by `with staging`
        # On a GPU, one zerohop pool serves the reader, zerohop's kernels and torch.
        pool = (cleanup.enter_context(SharedPool(_device_index(config)))
                if config.device == "cuda" and config.shared_pool else None)
        # torch is imported (and the GPU warmed up) on a thread, behind reading the recording
        # and detecting its beats, which need no torch (on the GPU as on the CPU: zerohop's
        # own kernels and copies).
        background = TorchInBackground(config, pool)
        # Figure workers (on machines with cores to spare) start now: each imports matplotlib
        # while this process reads the recording and imports torch.
        drawing = (cleanup.enter_context(
            Drawing(staging.path, figure_workers.figure_workers(usable_cores())))
                   if config.plots else None)
        data = _load(config, say, ledger)
        seg = _segment(config, data, ledger)
        beats, params, on_gpu = seg["beats"], seg["params"], config.device == "cuda"
        torch = background.ready()
        if drawing is not None:
            drawing.import_here()
        outputs = _Outputs(seg, on_gpu, torch, ledger)
        r_peaks = outputs.host("r_peaks")
        judged = _assess(data, seg, r_peaks, ledger, say)
        beat_peaks = outputs.host("beat_peaks")
        reliable_rows = judged.reliable(beat_peaks)
        # The rows in reliable signal, when some are not (None: every row, no selection).
        kept = None if reliable_rows.all() else np.flatnonzero(reliable_rows).astype(np.int64)
        peaks_kept = beat_peaks if kept is None else beat_peaks[kept]
        bpm, few = _check_beats(config, data, seg, r_peaks, judged.reliable(r_peaks),
                                len(peaks_kept), say)
        energy_shown = outputs.keep_energy_shown(data.rate)
        width = int(beats.shape[1])
        classes = beat_classes(peaks_kept, data.truth, data.rate)

        def rows_kept(indices: NDArray[np.int64]) -> NDArray[Any]:
            """Rows of the ranked (reliable) beats, by their place among them."""
            return outputs.beat_rows(indices if kept is None else kept[indices])

        figures_of_input = (input_figures(
            signal=data.numpy_signal(), units=data.units, energy=energy_shown,
            r_peaks=r_peaks, truth=data.truth, params=params, beat_peaks=peaks_kept,
            classes=classes, width=width, rows=rows_kept,
            reliable_rr=judged.reliable_intervals(r_peaks)) if drawing is not None else {})
        if drawing is not None and on_gpu:
            # Drawn while the GPU trains (by workers; without them, after training).
            drawing.submit(figures_of_input)
            figures_of_input = {}
        x = _to_torch(ledger, torch, beats, kept)
        # Each beat's own part of its window: its baseline is levelled to it, and its error
        # measured over it.
        spans = own_beat_span(peaks_kept, r_peaks, data.rate, params["before"], width)
        trained = _train(config, x, background, ledger, spans[1])
        mu, err = _embed(config, trained, x, ledger, spans)
        score = outlier_score(err, prematurity(peaks_kept, r_peaks))
        outliers = _outliers(err, score, peaks_kept, data.rate, r_peaks, classes, kept)
        excluded = int(beats.shape[0]) - len(peaks_kept)
        counts: Counts = {"samples": data.samples, "candidates": int(seg["gates"].shape[0]),
                          "detected": len(r_peaks), "beats": int(beats.shape[0]),
                          "edge_dropped": int(seg["edge_dropped"]), "bpm": bpm,
                          "unreliable_beats": excluded}
        summary = judged.summary(excluded, int(beats.shape[0]))
        scored = _score(data, r_peaks, say)
        plots: dict[str, Path] = {}
        if drawing is not None:
            begun = time.perf_counter()
            decoded, grid = _decoded_grid(config, torch, trained, mu)
            plots = _draw(drawing, ledger, begun, figures_of_input, model_figures(
                params=params, width=width, units=data.units, beat_peaks=peaks_kept,
                classes=classes, mu=mu, error=score, losses=trained["losses"],
                held_out=trained["held_out"], best_epoch=trained["best_epoch"],
                decoded=decoded, grid=grid, rows=rows_kept,
                held_out_label=held_out_label(trained["monitored_beats"],
                                              trained["held_out_beats"])))
        ledger.host_copies()
        memory = pool.summary() if pool is not None else None
        report = _write_report(staging.path / "report.md", config, data, params, ledger, counts,
                               scored, outliers, plots, trained, few, memory, summary)
        staging.commit()
    return Result(report=config.out / report.name,
                  plots={name: config.out / p.name for name, p in plots.items()},
                  stages=ledger.stages, hand_offs=ledger.hand_offs, counts=counts,
                  accuracy=scored, outliers=outliers, losses=trained["losses"], memory=memory,
                  quality=summary)


def _device_index(config: Config) -> int:
    """The job's GPU: torchrun's rank-local device, else the first."""
    import os

    return int(os.environ.get("LOCAL_RANK", "0"))


__all__ = ["Buffer", "Config", "Result", "run"]
