"""The pipeline's figures, as PNG files (matplotlib, headless). Every axis names its quantity
and unit; the amplitude unit is the input's own (mV for WFDB records in mV, "signal units"
when a CSV file does not say)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .kernels import Params as _Params
    from .recording import Truth


def use_agg() -> None:
    """Selects matplotlib's headless backend; call it before importing matplotlib.pyplot."""
    import matplotlib

    matplotlib.use("Agg")


def import_in_background() -> Callable[[], None]:
    """Imports matplotlib's pyplot (about 0.4 s) on a thread, for while the job trains;
    returns the function that waits for it. It never raises: if the import fails,
    `draw` meets the same error and reports it."""
    import threading

    def load() -> None:
        try:
            use_agg()
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # noqa: BLE001 - draw reports it
            pass

    thread = threading.Thread(target=load, daemon=True, name="zerohop-ecg-import-matplotlib")
    thread.start()
    return thread.join


def amplitude_label(units: str | None) -> str:
    return f"amplitude ({units})" if units else "amplitude (signal units)"


def beat_classes(beat_peaks: NDArray[Any], truth: Truth | None,
                 rate: float) -> NDArray[np.str_] | None:
    """The reference symbol of each beat row (the nearest annotation within 150 ms), or '?';
    None without reference annotations."""
    tolerance = 0.15 * rate
    if truth is None or len(truth.samples) == 0:
        return None
    order = np.argsort(truth.samples)
    samples = truth.samples[order]
    symbols = np.asarray(truth.symbols)[order]
    at = np.clip(np.searchsorted(samples, beat_peaks), 1, len(samples) - 1)
    left, right = samples[at - 1], samples[at]
    nearest = np.where(beat_peaks - left <= right - beat_peaks, at - 1, at)
    close = np.abs(samples[nearest] - beat_peaks) <= tolerance
    return np.where(close, symbols[nearest], "?")


#: The figures, in the report's order. The first three need only the recording and its
#: detections; the others need the trained model.
FIGURES = ("signal_peaks", "tachogram", "beats", "latent", "decoded_grid", "outliers", "loss")
INPUT_FIGURES = FIGURES[:3]


def draw(name: str, out: Path, data: dict[str, Any]) -> Path:
    """Draws figure `name` from its own inputs (`input_figures`, `model_figures`) into
    `out`/`name`.png, in this process or a figure worker's, and returns the path."""
    use_agg()
    import matplotlib.pyplot as plt

    fig = _DRAWERS[name](plt, **data)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def beat_axis(params: _Params, width: int) -> tuple[NDArray[np.float64], int]:
    """Seconds from the R peak of each sample a beat figure draws, and how many it draws.
    Adaptive rows put the R peak `before` samples in; the blog's rows start at a gate."""
    before = int(params.get("before", params.get("gate_to_peak", 0)))
    span = before + params["after"] if "after" in params else width
    return (np.arange(span) - before) / params["rate"], span


def tachogram_data(r_peaks: NDArray[Any], rate: float,
                   reliable: NDArray[np.bool_] | None = None) -> dict[str, Any]:
    """What the tachogram draws: each RR interval (ms) at its beat's time (min), NaN where
    `reliable` (one flag per interval; None: all) says it lies in or across unreliable
    signal, so the line breaks there; and the RR axis's limits, from the reliable intervals
    alone (their 0.5–99.5 percentiles and a tenth of that range beside): one interval across
    a 5-minute gap no longer sets a scale that flattens every other interval, and the few
    reliable intervals beyond the axis (a pause) are drawn at its edge."""
    peaks = np.asarray(r_peaks)
    minutes = peaks[1:] / rate / 60.0
    rr = np.diff(peaks) / rate * 1000.0
    if reliable is not None:
        rr = np.where(reliable, rr, np.nan)
    shown = rr[np.isfinite(rr)]
    limits = None
    if len(shown):
        low, high = np.percentile(shown, [0.5, 99.5])
        margin = max(0.1 * (high - low), 20.0)
        limits = (max(0.0, float(low - margin)), float(high + margin))
    return {"minutes": minutes, "rr": rr, "limits": limits,
            "gaps": 0 if reliable is None else int(np.count_nonzero(~reliable))}


def input_figures(*, signal: NDArray[Any], units: str | None, energy: NDArray[Any],
                  r_peaks: NDArray[Any], truth: Truth | None, params: _Params,
                  beat_peaks: NDArray[Any], classes: NDArray[np.str_] | None, width: int,
                  rows: Callable[[NDArray[np.int64]], NDArray[Any]],
                  reliable_rr: NDArray[np.bool_] | None = None) -> dict[str, dict[str, Any]]:
    """The inputs of the figures drawn from the recording and its detections alone, each
    holding only what its figure draws. `classes` is `beat_classes`'s; `rows(indices)` gives
    those beat rows on the host; `reliable_rr` flags the RR intervals in reliable signal (the
    tachogram breaks at the others; None: all)."""
    rate = params["rate"]
    shown = min(len(signal), int(8 * rate))
    x, span = beat_axis(params, width)
    if classes is None:
        picked = np.linspace(0, len(beat_peaks) - 1, min(60, len(beat_peaks))).astype(np.int64)
        groups = None
    else:
        chosen, groups = [], []
        for symbol in sorted(set(classes.tolist()), key=lambda s: s != "N"):
            members = np.flatnonzero(classes == symbol)
            at = members[np.linspace(0, len(members) - 1, min(40, len(members))).astype(int)]
            groups.append((symbol, len(members), len(at)))
            chosen.append(at)
        picked = np.concatenate(chosen).astype(np.int64)
    return {
        "signal_peaks": {
            "signal": np.asarray(signal[:shown]), "energy": np.asarray(energy[:shown]),
            "peaks": r_peaks[r_peaks < shown],
            "reference": None if truth is None else truth.samples[truth.samples < shown],
            "rate": rate, "units": units},
        "tachogram": tachogram_data(r_peaks, rate, reliable_rr),
        "beats": {"x": x, "rows": rows(picked)[:, :span], "groups": groups,
                  "total": len(beat_peaks), "units": units},
    }


def model_figures(*, params: _Params, width: int, units: str | None, beat_peaks: NDArray[Any],
                  classes: NDArray[np.str_] | None, mu: NDArray[Any], error: NDArray[Any],
                  losses: Sequence[float], held_out: Sequence[float] | None,
                  best_epoch: int | None, decoded: NDArray[Any],
                  grid: Sequence[tuple[float, float]],
                  rows: Callable[[NDArray[np.int64]], NDArray[Any]],
                  held_out_label: str = "held-out") -> dict[str, dict[str, Any]]:
    """The inputs of the figures drawn from the trained model's outputs, as `input_figures`."""
    rate = params["rate"]
    x, span = beat_axis(params, width)
    worst = np.argsort(error)[::-1][:5].astype(np.int64)
    labels = [f"{beat_peaks[i] / rate:.1f} s" + (f" ({classes[i]})" if classes is not None
                                                  else "") for i in worst]
    return {
        "latent": {"mu": mu, "error": error},
        "decoded_grid": {"decoded": decoded[:, :span], "grid": list(grid), "start": x[0],
                         "rate": rate, "units": units},
        "outliers": {"x": x, "rows": rows(worst)[:, :span], "labels": labels,
                     "units": units},
        "loss": {"losses": list(losses), "held_out": None if held_out is None else
                 list(held_out), "best_epoch": best_epoch, "held_out_label": held_out_label},
    }


def _signal_peaks(plt: Any, *, signal: NDArray[Any], energy: NDArray[Any],
                  peaks: NDArray[Any], reference: NDArray[Any] | None, rate: float,
                  units: str | None) -> Figure:
    """The first 8 s with the detections (and the reference beats, when there are some)."""
    t = np.arange(len(signal)) / rate
    fig, (top, bottom) = _figure(plt, (11, 5), nrows=2, sharex=True, hspace=0.1,
                                 gridspec_kw={"height_ratios": [2, 1]})
    top.plot(t, signal, lw=0.8, color="C0", label="ECG")
    top.plot(peaks / rate, signal[peaks], "v", color="C3", ms=7, label="detected R peaks")
    if reference is not None:
        top.plot(reference / rate, signal[reference], "o", mfc="none", color="k", ms=10,
                 label="reference beats")
    top.set_ylabel(amplitude_label(units))
    # Above the axes, not inside them: inside, the legend hid the last beats' peaks.
    top.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize=8,
               frameon=False, borderaxespad=0.2)
    top.set_title(f"Detected beats, first {len(signal) / rate:.0f} s of the recording",
                  loc="left")
    bottom.plot(t, energy, lw=0.8, color="C2")
    bottom.set_ylabel("QRS energy (a.u.)")
    bottom.set_xlabel("time from the start of the recording (s)")
    return fig


def _tachogram(plt: Any, *, minutes: NDArray[Any], rr: NDArray[Any],
               limits: tuple[float, float] | None, gaps: int) -> Figure:
    """Every RR interval against time (`tachogram_data`): a line that breaks where the signal
    is unreliable, on an axis scaled to the reliable intervals; an interval beyond the axis
    is a triangle at its edge."""
    fig, ax = _figure(plt, (11, 3.4))
    notes = [f"{gaps:,} in or across unreliable signal left out" if gaps else ""]
    if len(rr):
        ax.plot(minutes, rr, "-", lw=0.5, color="C0", alpha=0.6)
        ax.plot(minutes, rr, ".", ms=2.5, color="C0")
    if limits is not None:
        low, high = limits
        with np.errstate(invalid="ignore"):
            above, below = rr > high, rr < low
        ax.plot(minutes[above], np.full(int(above.sum()), high), "^", ms=5, color="C3",
                clip_on=False)
        ax.plot(minutes[below], np.full(int(below.sum()), low), "v", ms=5, color="C3",
                clip_on=False)
        ax.set_ylim(low, high)
        beyond = int(above.sum() + below.sum())
        notes.append(f"{beyond:,} beyond the axis, at its edge" if beyond else "")
    ax.set_xlabel("time (min)")
    ax.set_ylabel("RR interval (ms)")
    note = "; ".join(n for n in notes if n)
    ax.set_title("Tachogram: the interval before every detected beat"
                 + (f" ({note})" if note else ""))
    return fig


def _beats(plt: Any, *, x: NDArray[Any], rows: NDArray[Any],
           groups: Sequence[tuple[str, int, int]] | None, total: int,
           units: str | None) -> Figure:
    """Beats overlaid around the R peak, coloured by reference class when annotated: `groups`
    gives each class's symbol, its number of beats and how many of `rows` (in order) it has."""
    fig, ax = _figure(plt, (7, 4))
    if groups is None:
        for row in rows:
            ax.plot(x, row, lw=0.6, alpha=0.5, color="C0")
        ax.set_title(f"{len(rows)} of {total:,} beats (evenly spaced), overlaid")
    else:
        at = 0
        for c, (symbol, members, drawn) in enumerate(groups):
            for k, row in enumerate(rows[at:at + drawn]):
                ax.plot(x, row, lw=0.6, alpha=0.5, color=f"C{c}",
                        label=f"{symbol} ({members:,} beat{'' if members == 1 else 's'})"
                        if k == 0 else None)
            at += drawn
        ax.legend(fontsize=8, title="reference class")
        ax.set_title("Beats by reference annotation class (up to 40 each), overlaid")
    ax.axvline(0, color="k", lw=0.5, ls=":")
    ax.set_xlabel("time from the R peak (s)")
    ax.set_ylabel(amplitude_label(units))
    return fig


def _latent(plt: Any, *, mu: NDArray[Any], error: NDArray[Any]) -> Figure:
    # The colour bar and its label take their room from the axes' right margin.
    fig, ax = _figure(plt, (6, 5), right=0.25, top=0.6)
    # A day-long record has ~100,000 beats: drawing every point took seconds and shows no
    # more than 20,000 do; the most outlying beats are always among those drawn.
    total_beats = len(mu)
    drawn = _sample_with(total_beats, 20_000, np.argsort(error)[-50:])
    shown_all = len(drawn) == total_beats
    points, scores = mu[drawn], error[drawn]
    # The colour scale spans the 2nd to 98th percentile: one extreme beat (a PVC) would
    # otherwise take the whole scale and leave every other beat one colour.
    low, high = (np.percentile(error, [2, 98]) if len(error) > 1 else (None, None))
    sc = ax.scatter(points[:, 0], points[:, 1], c=scores, s=8, cmap="viridis", vmin=low,
                    vmax=high)
    fig.colorbar(sc, ax=ax, label="outlier score: own-beat error × prematurity (2–98 %)",
                 extend="max")
    worst = np.argsort(error)[-5:]
    ax.scatter(mu[worst, 0], mu[worst, 1], s=60, facecolors="none", edgecolors="C3",
               label="5 most outlying")
    ax.set_xlabel("latent μ₁ (a.u.)")
    ax.set_ylabel("latent μ₂ (a.u.)")
    ax.legend(fontsize=8)
    ax.set_title("Latent space of every beat" if shown_all else
                 f"Latent space: {len(drawn):,} of {total_beats:,} beats\n(the 50 most "
                 f"outlying among them)")
    return fig


def _outliers(plt: Any, *, x: NDArray[Any], rows: NDArray[Any], labels: Sequence[str],
              units: str | None) -> Figure:
    fig, ax = _figure(plt, (7, 4))
    for k, (row, label) in enumerate(zip(rows, labels)):
        ax.plot(x, row, lw=0.9, color=f"C{k}", label=label)
    ax.axvline(0, color="k", lw=0.5, ls=":")
    ax.set_xlabel("time from the R peak (s)")
    ax.set_ylabel(amplitude_label(units))
    ax.legend(fontsize=8, title="beat at")
    ax.set_title("The 5 most outlying beats")
    return fig


def _loss(plt: Any, *, losses: Sequence[float], held_out: Sequence[float] | None,
          best_epoch: int | None, held_out_label: str = "held-out") -> Figure:
    # Log-scale tick labels (6 × 10⁻¹) are wide: the axis label needs more room.
    fig, ax = _figure(plt, (6, 3.6), left=1.0)
    draw_losses(ax, losses, held_out, best_epoch, held_out_label)
    ax.set_title("LightVAE training and held-out loss")
    return fig


def _decoded_grid(plt: Any, **data: Any) -> Figure:
    return decoded_grid_figure(**data)


_DRAWERS: dict[str, Callable[..., Figure]] = {
    "signal_peaks": _signal_peaks, "tachogram": _tachogram, "beats": _beats,
    "latent": _latent, "decoded_grid": _decoded_grid, "outliers": _outliers, "loss": _loss,
}


def _figure(plt: Any, figsize: tuple[float, float], *, left: float = 0.8,
            right: float = 0.2, bottom: float = 0.55, top: float = 0.4,
            hspace: float | None = None, **subplots: Any) -> tuple[Figure, Any]:
    """`plt.subplots` with margins fixed in inches (room for the tick labels, axis labels
    and title these figures have): `tight_layout` drew every figure once more just to
    measure its labels, a fifth of the figures' time."""
    fig: Figure
    fig, axes = plt.subplots(figsize=figsize, **subplots)
    width, height = figsize
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height, hspace=hspace)
    return fig, axes


def decoded_grid_figure(decoded: NDArray[Any], grid: Sequence[tuple[float, float]],
                        start: float, rate: float, units: str | None) -> Figure:
    """The beats decoded from a grid of latents, each in its cell of one set of axes (rows:
    μ₂ from high to low; columns: μ₁ from low to high), on one amplitude scale, with ECG-style
    scale bars for time and amplitude. One set of axes instead of 25 subplots: drawing those
    took ~0.45 s of the job, this ~0.1 s. `decoded` holds only the beat windows (from `start`
    seconds around the R peak), never the zero padding after them."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    side = max(1, int(round(len(decoded) ** 0.5)))
    span = decoded.shape[1]
    t = start + np.arange(span) / rate
    width = max(span / rate, 1.0 / rate)
    low, high = float(decoded.min()), float(decoded.max())
    height = max(high - low, 1e-12)
    step_x, step_y = width * 1.15, height * 1.35
    fig, ax = plt.subplots(figsize=(9, 7))
    curves, centres, marks = [], [], []
    # The grid's centre beat, drawn in grey under every cell: beside it the differences
    # between cells show, small as they are on a record of one beat shape.
    centre = decoded[len(decoded) // 2]
    for k, (curve, (z1, z2)) in enumerate(zip(decoded, grid)):
        row, col = divmod(k, side)
        dx, dy = col * step_x - start, (side - 1 - row) * step_y
        curves.append(np.column_stack([t + dx, curve + dy]))
        centres.append(np.column_stack([t + dx, centre + dy]))
        marks.append([(dx, low + dy), (dx, high + dy)])  # the R peak
        ax.text(t[0] + dx, high + dy + 0.04 * height, f"z=({z1:.2f}, {z2:.2f})", fontsize=7)
    ax.add_collection(LineCollection(centres, lw=1.6, color="0.82"))
    ax.add_collection(LineCollection(curves, lw=0.8, color="C0"))
    ax.add_collection(LineCollection(marks, lw=0.5, color="k", linestyles=":"))
    # Scale bars below the grid: the largest 1-2-5 amplitude within half a cell, 0.2 s.
    bar_s = 0.2 if width >= 0.4 else 0.05
    magnitude = 10.0 ** math.floor(math.log10(height / 2))
    bar_a = max(m * magnitude for m in (1, 2, 5) if m * magnitude <= height / 2)
    bx, by = t[0] - start, low - 0.35 * height
    ax.plot([bx, bx + bar_s], [by, by], color="k", lw=1.5)
    ax.plot([bx, bx], [by, by + bar_a], color="k", lw=1.5)
    ax.text(bx + bar_s / 2, by - 0.05 * height, f"{bar_s:g} s", ha="center", va="top",
            fontsize=8)
    # The amplitude's label right of its bar, inside the drawing: left of it, a long label
    # ("0.05 signal units") ran off the figure.
    ax.text(bx + 0.04 * width, by + bar_a / 2, f"{bar_a:g} {units or 'signal units'}",
            ha="left", va="center", fontsize=8)
    ax.set_xlim(bx - 0.1 * width, (side - 1) * step_x + t[-1] - start + 0.05 * width)
    ax.set_ylim(by - 0.35 * height, (side - 1) * step_y + high + 0.2 * height)
    ax.set_axis_off()
    ax.set_title("Beats decoded from a grid over the latents' 2–98 % range\n"
                 "(μ₁ grows to the right, μ₂ upwards; grey: the centre cell's beat; dotted: "
                 "the R peak)", fontsize=10)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.92)
    return fig


def held_out_label(monitored_beats: int, held_out_beats: int) -> str:
    """The legend of the per-epoch held-out loss: which held-out beats it was measured on."""
    if monitored_beats >= held_out_beats:
        return f"held-out ({held_out_beats:,} beats)"
    return f"held-out ({monitored_beats:,} of {held_out_beats:,} beats)"


def draw_losses(ax: Axes, losses: Sequence[float], held_out: Sequence[float] | None = None,
                best_epoch: int | None = None, label: str = "held-out") -> None:
    """Training and held-out loss per epoch, and the epoch whose held-out loss was lowest."""
    epochs = np.arange(1, len(losses) + 1)
    ax.plot(epochs, losses, marker="o", ms=3, label="training")
    if held_out:
        ax.plot(epochs[:len(held_out)], held_out, marker="s", ms=3, label=label)
    if best_epoch:
        ax.axvline(best_epoch, color="k", lw=0.6, ls=":", label=f"best, epoch {best_epoch}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss per beat (normalised units)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)


def _sample_with(n: int, most: int,
                 keep: NDArray[np.integer[Any]]) -> NDArray[np.integer[Any]]:
    """Up to `most` of `n` indices, evenly spread (seeded), always including `keep`; sorted."""
    if n <= most:
        return np.arange(n)
    chosen = np.random.default_rng(0).choice(n, size=most, replace=False)
    return np.unique(np.concatenate([chosen, np.asarray(keep, dtype=chosen.dtype)]))
