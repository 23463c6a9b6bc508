"""The whole job: input → Rust stages → PyTorch → plots and report, with every hand-off
checked by pointer identity and every byte copied counted."""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import zerohop

from . import RECORD_208, RECORD_208_RATE, load_record_208, read_csv, score, segment, synthesize


@dataclass
class Config:
    out: Path = Path("out/ecg")
    csv: Path | None = None
    rate: float | None = None
    column: str | None = None
    synthetic_hours: float | None = None
    device: str = "cpu"
    epochs: int = 30
    batch_size: int = 1024
    seed: int = 42
    progress: bool = True
    plots: bool = True


@dataclass
class Result:
    report: Path
    plots: dict
    stages: list
    hand_offs: list
    counts: dict
    accuracy: dict | None
    outliers: list
    losses: list = field(default_factory=list)


def _address(x):
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    return x.data_ptr()


def _prepare_input(config, say):
    """Returns (csv path, rate, column, source text, truth or None)."""
    config.out.mkdir(parents=True, exist_ok=True)
    if config.synthetic_hours is not None:
        rate = config.rate or 250.0
        seconds = config.synthetic_hours * 3600.0
        path = config.out / "synthetic.csv"
        say(f"generating {config.synthetic_hours:g} h of synthetic ECG at {rate:g} Hz → {path}")
        _, peaks, _ = synthesize(seconds, rate=rate, seed=config.seed, csv=path,
                                 peaks=config.out / "synthetic_r_peaks.csv")
        truth = np.from_dlpack(peaks)
        return path, rate, "mv", f"synthetic ECG, {config.synthetic_hours:g} h ({path})", truth
    if config.csv is not None:
        if not config.rate:
            raise ValueError("--csv needs --rate (the sampling rate in Hz)")
        return Path(config.csv), config.rate, config.column, f"{config.csv}", None
    path = config.out / "record208.csv"
    if not path.exists():
        np.savetxt(path, load_record_208(), fmt="%.4f", header="mv", comments="")
    return (path, RECORD_208_RATE, "mv",
            f"MIT-BIH Arrhythmia Database record 208 (MLII, 5 min excerpt, 360 Hz), via {path}",
            None)


def run(config: Config, say=print) -> Result:
    import torch

    from .vae import embed, train

    if config.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device on this machine")
    csv_path, rate, column, source, truth = _prepare_input(config, say)
    stages, hand_offs = [], []

    def stage(name, started, copied=0):
        stages.append((name, time.perf_counter() - started, copied))

    def hand_off(label, source_obj, target_obj):
        same = _address(source_obj) == _address(target_obj)
        hand_offs.append((label, _address(target_obj), same))
        if not same:
            raise AssertionError(f"{label}: the data was copied")
        return target_obj

    started = time.perf_counter()
    table = read_csv(csv_path, columns=[column] if column else None)
    column = column or table.columns[0]
    signal = table[column]
    stage("parse CSV into a zerohop Table (all cores)", started)
    say(f"read {len(table):,} samples of column {column!r} from {csv_path}")

    on_gpu = config.device == "cuda"
    if on_gpu:
        # The stages run as CUDA kernels; the signal crosses to the device once.
        from zerohop.cuda import preload_nvrtc

        preload_nvrtc()
        seg = segment(signal, rate, device="cuda:0")
    else:
        seg = segment(signal, rate)
    for name, seconds in seg["timings"]:
        copied = len(table) * 4 if name == "host→device" else 0
        stages.append((name, seconds, copied))
    beats = seg["beats"]
    params = seg["params"]

    started = time.perf_counter()
    x = hand_off("zerohop beats → torch.from_dlpack", beats, torch.from_dlpack(beats))
    stage("beats → PyTorch (DLPack)", started)

    n_beats = beats.shape[0]
    say(f"{seg['gates'].shape[0]:,} gates, {n_beats:,} beats of width {params['width']}")
    if n_beats < 2:
        raise ValueError(f"only {n_beats} beats found: too short or not an ECG at {rate:g} Hz?")
    started = time.perf_counter()
    trained = train(x, epochs=config.epochs, batch_size=config.batch_size, seed=config.seed,
                    device=config.device, progress=config.progress)
    stage("train LightVAE (PyTorch)", started)
    mu, logvar, recon, error = embed(trained["model"], x, trained["scale"], config.device)

    started = time.perf_counter()
    back = {name: hand_off(f"torch {name} → zerohop.from_dlpack", t, zerohop.from_dlpack(t))
            for name, t in (("latent μ", mu), ("reconstruction error", error))}
    if on_gpu:
        stage("results → zerohop (DLPack)", started)
        started = time.perf_counter()
        numpy_views = {name: torch.from_dlpack(t).cpu().numpy() for name, t in back.items()}
        small = {name: torch.from_dlpack(seg[name]).cpu().numpy()
                 for name in ("curvature", "gates", "lengths", "beat_starts", "beat_lengths",
                              "beats")}
        moved = sum(a.nbytes for a in [*numpy_views.values(), *small.values()])
        stage("results and stage outputs device → host for plots (explicit copy)", started, moved)
        g = small.__getitem__
    else:
        numpy_views = {name: hand_off(f"zerohop {name} → numpy.from_dlpack", t, np.from_dlpack(t))
                       for name, t in back.items()}
        stage("results → zerohop → NumPy (DLPack)", started)
        g = lambda name: np.from_dlpack(seg[name])  # noqa: E731 - zero-copy NumPy views
    gates, lengths, starts, blens = g("gates"), g("lengths"), g("beat_starts"), g("beat_lengths")
    err = numpy_views["reconstruction error"]
    worst = np.argsort(err)[::-1][:10]
    outliers = [{"beat": int(i), "start": int(starts[i]), "time": starts[i] / rate,
                 "length": int(blens[i]), "error": float(err[i])} for i in worst]
    counts = {"samples": len(table), "gates": len(gates), "beats": n_beats,
              "pruned_percent": 100.0 * (1 - n_beats / max(1, len(lengths)))}

    accuracy = None
    if truth is not None:
        detected = (gates + params["gate_to_peak"]).tolist()
        tolerance = 0.05 * rate
        sens, ppv, tp, fp, fn = score(detected, truth.tolist(), tolerance, int(rate), len(table))
        accuracy = {"sensitivity": sens, "ppv": ppv, "tp": tp, "fp": fp, "fn": fn,
                    "tolerance_ms": 50.0}
        say(f"detection: sensitivity {sens * 100:.2f} %, PPV {ppv * 100:.2f} %")

    plots = {}
    if config.plots:
        started = time.perf_counter()
        mu_np = numpy_views["latent μ"]
        lo, hi = np.percentile(mu_np, [2, 98], axis=0) if len(mu_np) > 1 else (mu_np.min(0), mu_np.max(0))
        grid = [(a, b) for b in np.linspace(hi[1], lo[1], 5) for a in np.linspace(lo[0], hi[0], 5)]
        with torch.no_grad():
            z = torch.tensor(grid, dtype=torch.float32, device=config.device)
            decoded = (trained["model"].decode(z) * trained["scale"]).squeeze(1).cpu().numpy()
        plots = __import__("zerohop.ecg.plots", fromlist=["write_plots"]).write_plots(
            config.out, signal=np.from_dlpack(signal), curvature=g("curvature"), gates=gates,
            lengths=lengths, params=params, beats=g("beats"), beat_lengths=blens, mu=mu_np,
            error=err, losses=trained["losses"], decoded=decoded, grid=grid)
        stage("plots (matplotlib)", started)

    from .report import write_report

    report = write_report(
        config.out / "report.md", source=source, params=params, stages=stages, counts=counts,
        accuracy=accuracy, outliers=outliers, plots=plots, hand_offs=hand_offs,
        train={"epochs": config.epochs, "batch_size": trained["batch_size"],
               "final_loss": trained["losses"][-1], "test_loss": trained["test_loss"],
               "device": config.device})
    return Result(report=report, plots=plots, stages=stages, hand_offs=hand_offs, counts=counts,
                  accuracy=accuracy, outliers=outliers, losses=trained["losses"])
