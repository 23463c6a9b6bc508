"""The report and figures of the job over many recordings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
from numpy.typing import NDArray

from . import plots
from .records import RecordBeats, RecordFailure
from .report import StepInfo, clock, held_out_note, readable_bytes, step_mode



class BatchTrainSummary(StepInfo):
    """What the report over many recordings says of training (over every rank)."""

    epochs: int
    batch_size: int
    lr: float
    threads: int
    ranks: int
    batch_per_rank: bool
    beats_trained: int
    steps: int
    final_loss: float
    #: Over every held-out beat (`held_out_beats`); per epoch over `monitored_beats`.
    test_loss: float
    held_out_beats: int
    monitored_beats: int
    #: Per epoch: training loss, held-out loss, seconds since training began, and
    #: (seconds in the training steps, seconds measuring the held-out loss).
    losses: list[float]
    held_out: list[float]
    epoch_seconds: list[float]
    epoch_split: list[tuple[float, float]]
    converged: str


class Pooled(TypedDict):
    """Detection pooled over the scored records."""

    records: int
    tp: int
    fp: int
    fn: int
    sensitivity: float
    ppv: float
    f1: float


class RowsHandOff(TypedDict):
    """A record's rows handed to PyTorch: where they lived, and the bytes copied on the way."""

    record: str
    place: str
    bytes: int
    copied: int
    same: bool


class BatchOutlier(TypedDict):
    record: str
    time: float
    error: float
    #: What the beats are ranked by: the error times the beat's prematurity (at least 1).
    score: float


def _percent(x: float) -> str:
    return f"{x * 100:.2f} %"


def write_batch_report(path: Path, *, backend: str, records: Sequence[RecordBeats],
                       failures: Sequence[RecordFailure], hand_offs: Sequence[RowsHandOff],
                       copied: int, pooled: Pooled | None, outliers: Sequence[BatchOutlier],
                       plots: Mapping[str, Path], detect_seconds: float, train_seconds: float,
                       train: BatchTrainSummary) -> Path:
    beats = sum(r.rows for r in records)
    total = len(records) + len(failures)
    lines = [
        "# ECG job over many recordings",
        "",
        f"- {len(records)} of {total} recording(s) processed on {backend} in "
        f"{detect_seconds:.2f} s (read, detect, cut beat rows); {beats:,} beats in all",
        f"- training: LightVAE, {train['epochs']} epoch(s), batch {train['batch_size']}, "
        f"learning rate {train['lr']:.3g}, on {train['device']}"
        + (f" with {train['threads']} CPU thread(s)" if train["device"] == "cpu" else "")
        + (f", data-parallel over {train['ranks']} ranks (each its own records' beats, "
           + ("a whole batch on each rank" if train["batch_per_rank"] else
              "the batch shared out among them")
           + ", gradients averaged every step, learning rate scaled with the square root of "
           f"the ranks' combined batch)" if train["ranks"] > 1 else "")
        + step_mode(train)
        + f", {train_seconds:.2f} s ({train['beats_trained'] / max(train_seconds, 1e-9):,.0f} "
        f"beats/s, {train['steps']} steps); final loss {train['final_loss']:.5f}, held-out loss "
        f"{train['test_loss']:.5f}{held_out_note(train)} (mean squared error of normalised "
        f"beats + 0.1 × KL); "
        f"{train['converged']}",
        f"- rows handed from the workers to PyTorch: {sum(h['same'] for h in hand_offs)}/"
        f"{len(hand_offs)} with the same pointer; bytes copied on the way: {copied:,}",
        "",
    ]
    if pooled is not None:
        lines += [f"Detection over the {pooled['records']} annotated record(s) (AAMI EC57 "
                  f"matching, ±150 ms, first and last 5 s not scored): sensitivity "
                  f"{_percent(pooled['sensitivity'])}, positive predictivity "
                  f"{_percent(pooled['ppv'])}, F1 {_percent(pooled['f1'])} "
                  f"(TP {pooled['tp']:,}, FP {pooled['fp']:,}, FN {pooled['fn']:,}).", ""]
    nodes = sorted({r.node for r in records if r.node is not None})
    if nodes:
        moved = sum(r.transferred for r in records)
        lines += [f"Ray: {len(nodes)} node(s) made rows; Ray moved {moved:,} bytes between "
                  f"nodes to bring rows made elsewhere to the job's node (per record below: "
                  f"\"between nodes\"; rows made on the job's node moved 0).", ""]
    lines += ["## Records", "",
              "Reliable: the share of the recording in 10 s windows judged reliable (docs/ecg.md, "
              "\"Signal quality\"); beats in the others are left out of training and of the "
              "ranking (the rest selected: a copy, after the zero-copy hand-off). A recording "
              "with no reliable window fails, with the reason.", "",
              "| record | rate (Hz) | duration (h:mm:ss) | reliable | beats | median bpm | "
              "sensitivity | +P | rows lived in | bytes copied | "
              + ("between nodes | " if nodes else "") + "seconds | worker |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|" + ("---:|" if nodes else "")
              + "---:|---|"]
    for r, h in zip(records, hand_offs):
        a = r.accuracy
        score = (f"{_percent(a['sensitivity'])} | {_percent(a['ppv'])}" if a and a["scored"]
                 else "not scored (too short) | –" if a else "– | –")
        rows = (f"{r.rows:,}" if r.reliable is None
                else f"{r.rows:,} ({r.rows - r.trained_rows:,} left out)")
        lines.append(f"| {r.name} | {r.rate:g} | {clock(r.samples / r.rate)} | "
                     f"{r.reliable_fraction * 100:.1f} % | "
                     f"{rows} | {r.bpm:.0f} | {score} | {h['place']} | "
                     f"{h['copied']:,} | " + (f"{r.transferred:,} | " if nodes else "")
                     + f"{r.seconds:.2f} | {r.worker} |")
    if failures:
        lines += ["", "## Failed records", "", "| record | error |", "|---|---|"]
        lines += [f"| {f.name} | {f.error.replace('|', '/')} |" for f in failures]
    lines += ["", "## Most unusual beats", "",
              "Ranked as in the one-recording job (docs/ecg.md, \"The report\"): the "
              "reconstruction error (mean squared error of the normalised beat, in units of the "
              "beats' variance) over the beat's own part of its window, times its prematurity "
              "(at least 1):", "",
              "| record | time from the start (h:mm:ss) | error | score |", "|---|---:|---:|---:|"]
    lines += [f"| {o['record']} | {clock(o['time'], 2)} | {o['error']:.4f} | "
              f"{o['score']:.4f} |" for o in outliers]
    lines += ["", "## Training", "", "Per epoch, over every rank's beats: the losses, the "
              "seconds since training began, and this epoch's seconds in the training steps "
              "and in measuring the held-out loss.", "",
              "| epoch | training loss | held-out loss | seconds | steps (s) | held-out (s) |",
              "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {k} | {a:.5f} | {b:.5f} | {t:.2f} | {s:.3f} | {h:.3f} |"
              for k, (a, b, t, (s, h)) in enumerate(zip(
                  train["losses"], train["held_out"], train["epoch_seconds"],
                  train["epoch_split"]), 1)]
    if plots:
        lines += ["", "## Figures", ""] + [f"![{name}]({p.name})" for name, p in plots.items()]
    lines += ["", f"Memory of the rows: {readable_bytes(sum(h['bytes'] for h in hand_offs))}.", ""]
    path.write_text("\n".join(lines))
    return path


def write_batch_plots(out: Path, records: Sequence[RecordBeats],
                      offsets: NDArray[np.integer[Any]], mu: NDArray[np.floating[Any]],
                      losses: Sequence[float],
                      held_out: Sequence[float] | None = None,
                      best_epoch: int | None = None,
                      held_out_label: str = "held-out") -> dict[str, Path]:
    plots.use_agg()
    import matplotlib.pyplot as plt

    paths: dict[str, Path] = {}
    fig, ax = plt.subplots(figsize=(6, 4))
    plots.draw_losses(ax, losses, held_out, best_epoch, held_out_label)
    ax.set_title("LightVAE training and held-out loss")
    fig.tight_layout()
    paths["loss"] = out / "loss.png"
    fig.savefig(paths["loss"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 6))
    for k, r in enumerate(records[:20]):
        part = mu[offsets[k]:offsets[k + 1]]
        ax.scatter(part[:, 0], part[:, 1], s=2, alpha=0.5, label=r.name)
    if len(records) > 20:
        rest = mu[offsets[20]:]
        ax.scatter(rest[:, 0], rest[:, 1], s=2, alpha=0.3, color="grey",
                   label=f"{len(records) - 20} more")
    ax.set(xlabel="latent μ₁ (dimensionless)", ylabel="latent μ₂ (dimensionless)",
           title="every beat's latent mean, by record")
    ax.legend(markerscale=4, fontsize=7, ncol=2)
    fig.tight_layout()
    paths["latent"] = out / "latent.png"
    fig.savefig(paths["latent"], dpi=110)
    plt.close(fig)
    return paths
