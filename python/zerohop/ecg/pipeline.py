"""The whole job: input → Rust stages → PyTorch → plots and report, with every hand-off
checked by pointer identity and every byte copied counted."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

import zerohop

from . import sources
from .errors import EcgInputError
from .output import Staging

if TYPE_CHECKING:
    import torch

    from .report import Accuracy, ClassScore, Counts, HandOff, Outlier, Stage
    from .sources import Truth

#: AAMI EC57 scoring: a detection matches a reference beat within ±150 ms, and the first and
#: last 5 s of a recording are not scored.
TOLERANCE_S = 0.150
MARGIN_S = 5.0
#: Below this many beats the model is still trained, with a warning in the output and the
#: report: its latent space and outlier ranking say little about so few beats.
FEW_BEATS = 50
#: The figure of the recording's start draws its first 8 s; the job keeps this much of the
#: detector's energy for it and frees the rest before training.
ENERGY_SHOWN_S = 10.0


@dataclass
class Config:
    out: Path = Path("out/ecg")
    csv: Path | None = None
    wfdb: Path | None = None
    rate: float | None = None
    column: str | None = None
    delimiter: str | None = None
    #: Missing or non-numeric cells of the ECG column: "error", "interpolate" or "zero".
    fill: str = "error"
    synthetic_hours: float | None = None
    heart_rate: float = 70.0
    ectopic: float = 0.0
    #: Synthetic: how far the mean heart rate swings over a day (0.25: ±25 %).
    day_swing: float = 0.0
    method: str = "adaptive"
    device: str = "cpu"
    epochs: int = 30
    #: The largest training batch; None: vae.default_batch (1024 on the CPU, up to 4096 on a
    #: GPU).
    batch_size: int | None = None
    #: Adam's learning rate for batches up to vae.LR_BATCH beats (larger: × √(batch / LR_BATCH)).
    lr: float = 2e-3
    threads: int | None = None
    #: On a GPU, each training step replays one captured CUDA graph (False: eager steps).
    cuda_graph: bool = True
    #: Training steps compiled by torch.compile: fewer, fused kernels after a compilation of
    #: tens of seconds, for long runs and several GPUs.
    fuse: bool = False
    #: On the CPU, each training step's loss and gradients come from zerohop's kernels
    #: (vae.cpu_pass; False: torch's autograd).
    cpu_kernels: bool = True
    #: Under torchrun, each rank trains on a whole batch (False: the ranks share one out).
    batch_per_rank: bool = False
    #: Held-out beats the loss is measured on after each epoch to decide when training
    #: stops (None: vae.MONITORED_BEATS; 0: all of them).
    monitored: int | None = None
    seed: int = 42
    progress: bool | str = True  # a bar; "lines": a line every few seconds; False: none
    plots: bool = True
    # Many recordings (batch.py): where, and on what.
    records: str | None = None
    workers: int = 1
    ray: str | None = None
    dask: str | None = None
    stop_on_error: bool = False
    #: Seconds a record may take under --workers before its worker is stopped (None: 2 min
    #: plus 30 s per MiB of the record's files).
    record_timeout: float | None = None
    #: Engines' own logs (Dask's worker deaths and task tracebacks) as well as the job's lines.
    verbose: bool = False


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


#: What crosses a hand-off: a zerohop tensor, a NumPy array or a torch tensor.
Buffer: TypeAlias = "zerohop.Tensor | NDArray[Any] | torch.Tensor"
_B = TypeVar("_B", bound=Buffer)


def _address(x: Buffer) -> int:
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        address: int = x.__array_interface__["data"][0]
        return address
    pointer: int = x.data_ptr()  # a torch tensor (Any to mypy, which does not read torch)
    return pointer


def _match(detected: NDArray[Any], truth: NDArray[np.int64],
           tolerance: float) -> NDArray[np.bool_]:
    """One-to-one matching in time order (as zerohop.ecg.score): which truth beats were found."""
    found = np.zeros(len(truth), dtype=bool)
    i = j = 0
    while i < len(detected) and j < len(truth):
        d = detected[i] - truth[j]
        if abs(d) <= tolerance:
            found[j] = True
            i += 1
            j += 1
        elif d < 0:
            i += 1
        else:
            j += 1
    return found


def _accuracy(r_peaks: NDArray[Any], truth: Truth, rate: float, samples: int) -> Accuracy:
    """Sensitivity and positive predictivity (EC57 style), pooled and per annotation class."""
    tolerance = TOLERANCE_S * rate
    margin = int(MARGIN_S * rate)
    inside = (truth.samples >= margin) & (truth.samples < samples - margin)
    det_inside = r_peaks[(r_peaks >= margin) & (r_peaks < samples - margin)]
    seconds = samples / rate
    if not inside.any():
        why = (f"a {seconds:.1f} s recording, {MARGIN_S:g} s excluded at each end"
               if samples <= 2 * margin else
               f"no reference beat annotation in the {seconds - 2 * MARGIN_S:.1f} s between "
               f"the {MARGIN_S:g} s excluded at each end")
        return {"scored": False, "why": why, "reference": truth.name,
                "tolerance_ms": TOLERANCE_S * 1000, "margin_s": MARGIN_S}
    # One matching serves the pooled and the per-class figures (zerohop.ecg.score's rule).
    found = _match(det_inside, truth.samples[inside], tolerance)
    tp = int(found.sum())
    fp, fn = len(det_inside) - tp, len(found) - tp
    sens, ppv = tp / max(1, tp + fn), tp / max(1, tp + fp)
    symbols = np.asarray(truth.symbols)[inside]
    classes: list[ClassScore] = []
    for symbol in sorted(set(symbols.tolist()), key=lambda s: (-int((symbols == s).sum()), s)):
        mask = symbols == symbol
        classes.append({"symbol": symbol, "beats": int(mask.sum()),
                        "found": int(found[mask].sum())})
    f1 = 2 * tp / max(1, 2 * tp + fp + fn)
    return {"scored": True, "sensitivity": sens, "ppv": ppv, "f1": f1, "tp": tp, "fp": fp,
            "fn": fn,
            "tolerance_ms": TOLERANCE_S * 1000, "margin_s": MARGIN_S, "classes": classes,
            "reference": truth.name}


def few_beats_warning(beats: int) -> str | None:
    """A warning to print and report when there are too few beats to make much of a model of
    them (None otherwise)."""
    if beats >= FEW_BEATS:
        return None
    return (f"only {beats} beats to train on (fewer than {FEW_BEATS}): the model, its latent "
            f"space and the outlier ranking say little about so few")


def _check_detection(r_peaks: NDArray[Any], signal_source: str, rate: float) -> float:
    """A recording without beats, or whose beats would mean a heart rate no heart has at the
    rate given, is an input error. (A rate off by less, say 2×, cannot be told from a
    different heart rate by the beats alone.)"""
    if len(r_peaks) < 2:
        raise EcgInputError(
            f"no heartbeats found in {signal_source}: is it an ECG, and is {rate:g} Hz its "
            f"sampling rate?")
    median_rr = float(np.median(np.diff(r_peaks))) / rate
    bpm = 60.0 / median_rr
    if not 20.0 <= bpm <= 300.0:
        raise EcgInputError(
            f"{signal_source}: the beats found would mean {bpm:.0f} bpm at {rate:g} Hz; is "
            f"{rate:g} Hz the sampling rate (--rate)?")
    return bpm


#: The stage outputs the report and figures read on the host.
_HostOutput: TypeAlias = Literal["r_peaks", "beat_peaks"]


def run(config: Config, say: Callable[[str], object] = print) -> Result:
    """Runs the job; raises EcgInputError (a ValueError) for anything about the input, before
    writing anything, and leaves `config.out` untouched unless the whole job succeeds."""
    sources.require_rest_of_job(config)
    from .figure_workers import Drawing, figure_workers
    from .plots import beat_classes, held_out_label, input_figures, model_figures
    from .workers import usable_cores

    staging = Staging(config.out)
    # torch is imported (and the GPU warmed up) on a thread, behind reading the recording and
    # detecting its beats, which need no torch (on the GPU as on the CPU: zerohop's own
    # kernels and copies).
    background = sources.TorchInBackground(config)
    with staging, ExitStack() as cleanup:
        assert staging.path is not None  # made by `with staging`
        # Figure workers (on machines with cores to spare) start now: each imports matplotlib
        # while this process reads the recording and imports torch.
        drawing = (cleanup.enter_context(Drawing(staging.path, figure_workers(usable_cores())))
                   if config.plots else None)
        started = time.perf_counter()
        data = sources.load(config, say)
        stages: list[Stage] = []
        hand_offs: list[HandOff] = []
        stages.append((data.stage, time.perf_counter() - started, 0))

        def stage(name: str, begun: float, copied: int = 0) -> None:
            stages.append((name, time.perf_counter() - begun, copied))

        def hand_off(label: str, source_obj: Buffer, target_obj: _B) -> _B:
            same = _address(source_obj) == _address(target_obj)
            hand_offs.append((label, _address(target_obj), same))
            if not same:
                raise AssertionError(f"{label}: the data was copied")
            return target_obj

        rate, signal = data.rate, data.signal
        on_gpu = config.device == "cuda"
        from . import segment

        if on_gpu:
            # The stages run as CUDA kernels; the signal crosses to the device once.
            from zerohop.cuda import preload_nvrtc

            preload_nvrtc()
            seg = segment(signal, rate, method=config.method, device="cuda:0")
        else:
            seg = segment(signal, rate, method=config.method)
        signal_on_host = signal.__dlpack_device__()[0] != sources.CUDA
        for name, seconds in seg["timings"]:
            copied = data.samples * 4 if name == "host→device" and signal_on_host else 0
            stages.append((name, seconds, copied))
        beats, params = seg["beats"], seg["params"]
        # Explicit device → host copies, counted in the report: the signal's, when reading it
        # made one (its checks and the figure read it), and stage outputs.
        moved_to_host: list[int] = [data.host_copy.nbytes] if data.host_copy is not None else []
        torch = background.ready()
        if drawing is not None:
            drawing.import_here()
        from .vae import convergence_note, embed, train

        def host(name: _HostOutput) -> NDArray[Any]:
            """A stage output as NumPy: a zero-copy view on the CPU; on the GPU an explicit
            copy, counted in the report (only what the report and figures read)."""
            if not on_gpu:
                return np.from_dlpack(seg[name])
            array: NDArray[Any] = torch.from_dlpack(seg[name]).cpu().numpy()
            moved_to_host.append(array.nbytes)
            return array

        r_peaks = host("r_peaks")
        bpm = _check_detection(r_peaks, data.description, rate)
        n_beats = beats.shape[0]
        if n_beats < 2:
            raise EcgInputError(f"{data.description}: only {n_beats} beat(s) away from the "
                                f"recording's ends; too short to train on")
        say(f"{len(r_peaks):,} beats detected ({config.method}, median {bpm:.0f} bpm), "
            f"{n_beats:,} rows of width {params['width']} "
            f"({seg['edge_dropped']} at the recording's ends without a full window)")
        few = few_beats_warning(n_beats)
        if few:
            say(f"warning: {few}")
        beat_peaks = host("beat_peaks")

        def beat_rows(indices: NDArray[np.int64]) -> NDArray[Any]:
            """The beat rows a figure draws, on the host (on the GPU: those rows only)."""
            if not on_gpu:
                return np.from_dlpack(beats)[indices]
            picked = torch.from_dlpack(beats)[torch.from_numpy(indices).to("cuda")]
            rows: NDArray[Any] = picked.cpu().numpy()
            moved_to_host.append(rows.nbytes)
            return rows

        # The figures draw the detector's energy over the first seconds only: keep those, so
        # a day-long record's curvature and energy (2 × 124 MB) do not live through training.
        energy_name: Literal["energy", "curvature"] = "energy" if "energy" in seg else "curvature"
        shown = min(int(seg[energy_name].shape[0]), int(ENERGY_SHOWN_S * rate))
        energy_shown: NDArray[Any]
        if on_gpu:
            energy_shown = torch.from_dlpack(seg[energy_name])[:shown].cpu().numpy()
            moved_to_host.append(energy_shown.nbytes)
        else:
            energy_shown = np.from_dlpack(seg[energy_name])[:shown].copy()
        # `seg` is a plain dict, but its type (a TypedDict) lets no required key go: the two
        # are dropped through the dict, and not read from `seg` after.
        outputs = cast("dict[str, object]", seg)
        for name in ("curvature", "energy"):
            outputs.pop(name, None)
        width = int(beats.shape[1])
        classes = beat_classes(beat_peaks, data.truth, rate) if drawing is not None else None
        figures_of_input = (input_figures(
            signal=data.numpy_signal(), units=data.units, energy=energy_shown,
            r_peaks=r_peaks, truth=data.truth, params=params, beat_peaks=beat_peaks,
            classes=classes, width=width, rows=beat_rows) if drawing is not None else {})
        if drawing is not None and on_gpu:
            # Drawn while the GPU trains (by workers; without them, after training).
            drawing.submit(figures_of_input)
            figures_of_input = {}

        begun = time.perf_counter()
        x = hand_off("zerohop beats → torch.from_dlpack", beats, torch.from_dlpack(beats))
        stage("beats → PyTorch (DLPack)", begun)

        background.warmed()
        begun = time.perf_counter()
        trained = train(x, epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                        seed=config.seed, device=config.device, progress=config.progress,
                        threads=config.threads, cuda_graph=config.cuda_graph,
                        fuse=config.fuse, batch_per_rank=config.batch_per_rank,
                        monitored=config.monitored, cpu_kernels=config.cpu_kernels)
        stage("train LightVAE (PyTorch)", begun)
        mu, _, _, error = embed(trained["model"], x, trained["scale"], config.device,
                                center=trained["center"], reconstructions=False)

        begun = time.perf_counter()
        back = {name: hand_off(f"torch {name} → zerohop.from_dlpack", t, zerohop.from_dlpack(t))
                for name, t in (("latent μ", mu), ("reconstruction error", error))}
        numpy_views = {name: hand_off(f"zerohop {name} → numpy.from_dlpack", t, np.from_dlpack(t))
                       for name, t in back.items()}
        stage("results → zerohop → NumPy (DLPack)", begun)

        err = numpy_views["reconstruction error"]
        worst = np.argsort(err)[::-1][:10]
        outliers: list[Outlier] = [
            {"beat": int(i), "peak": int(beat_peaks[i]), "time": beat_peaks[i] / rate,
             "error": float(err[i])} for i in worst]
        counts: Counts = {"samples": data.samples, "candidates": int(seg["gates"].shape[0]),
                          "detected": len(r_peaks), "beats": n_beats,
                          "edge_dropped": int(seg["edge_dropped"]), "bpm": bpm}

        accuracy: Accuracy | None = None
        if data.truth is not None:
            accuracy = _accuracy(r_peaks, data.truth, rate, data.samples)
            if accuracy["scored"]:
                say(f"detection against {data.truth.name}: sensitivity "
                    f"{accuracy['sensitivity'] * 100:.2f} %, positive predictivity "
                    f"{accuracy['ppv'] * 100:.2f} % (±{TOLERANCE_S * 1000:.0f} ms)")
            else:
                say(f"detection against {data.truth.name}: not scored: {accuracy['why']}")

        plots: dict[str, Path] = {}
        if drawing is not None:
            begun = time.perf_counter()
            mu_np = numpy_views["latent μ"]
            lo, hi = (np.percentile(mu_np, [2, 98], axis=0) if len(mu_np) > 1
                      else (mu_np.min(0), mu_np.max(0)))
            grid = [(a, b) for b in np.linspace(hi[1], lo[1], 5)
                    for a in np.linspace(lo[0], hi[0], 5)]
            with torch.no_grad():
                z = torch.tensor(grid, dtype=torch.float32, device=config.device)
                decoded = (trained["model"].decode(z) * trained["scale"]
                           + trained["center"]).squeeze(1).cpu().numpy()
            drawing.submit(figures_of_input)
            drawing.submit(model_figures(
                params=params, width=width, units=data.units, beat_peaks=beat_peaks,
                classes=classes, mu=mu_np, error=err, losses=trained["losses"],
                held_out=trained["held_out"], best_epoch=trained["best_epoch"],
                decoded=decoded, grid=grid, rows=beat_rows,
                held_out_label=held_out_label(trained["monitored_beats"],
                                              trained["held_out_beats"])))
            plots = drawing.finish()
            if drawing.workers:
                stage(f"plots (matplotlib, {drawing.workers} worker processes; their inputs "
                      "pickled)", begun, drawing.pickled_bytes)
            else:
                stage("plots (matplotlib)", begun)

        if moved_to_host:
            stages.append(("device → host for the input's checks, the report and figures "
                           "(explicit copies)", 0.0, sum(moved_to_host)))
        from .report import write_report

        report = write_report(
            staging.path / "report.md", source=data.description, params=params,
            method=config.method, stages=stages, counts=counts, accuracy=accuracy,
            outliers=outliers, plots=plots, hand_offs=hand_offs, units=data.units,
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
        staging.commit()
    report = config.out / report.name
    plots = {name: config.out / p.name for name, p in plots.items()}
    return Result(report=report, plots=plots, stages=stages, hand_offs=hand_offs, counts=counts,
                  accuracy=accuracy, outliers=outliers, losses=trained["losses"])
