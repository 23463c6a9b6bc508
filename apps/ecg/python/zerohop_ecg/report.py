"""The pipeline's Markdown report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NotRequired, TypeAlias, TypedDict

from .shared_pool import MemorySummary, summary_line

if TYPE_CHECKING:
    from .kernels import Params as _Params


class ClassScore(TypedDict):
    """One annotation class's line of the accuracy table."""

    symbol: str
    beats: int
    found: int


class ScoredAccuracy(TypedDict):
    """Detection against reference annotations (pipeline._accuracy), scored."""

    scored: Literal[True]
    sensitivity: float
    ppv: float
    f1: float
    tp: int
    fp: int
    fn: int
    tolerance_ms: float
    margin_s: float
    classes: list[ClassScore]
    reference: str


class UnscoredAccuracy(TypedDict):
    """Detection against reference annotations, not scored; `why` says why (a recording
    too short, or no reference beat between the margins left out)."""

    scored: Literal[False]
    why: str
    reference: str
    tolerance_ms: float
    margin_s: float


Accuracy: TypeAlias = ScoredAccuracy | UnscoredAccuracy


class Counts(TypedDict):
    """Samples read, candidate beats, R peaks detected, beat rows for the model, peaks too
    close to the recording's ends for a row, and the median heart rate (bpm)."""

    samples: int
    candidates: int
    detected: int
    beats: int
    edge_dropped: int
    bpm: float
    #: Beat rows in windows of unreliable signal: not trained on, not ranked.
    unreliable_beats: NotRequired[int]


class Outlier(TypedDict):
    """One of the most outlying beats: its row, its R peak (sample) and time (s), its
    reference class (None without annotations) and the RR intervals before and after it
    (ms; None at the recording's ends)."""

    beat: int
    peak: int
    time: float
    error: float
    #: What the beats are ranked by: the error times how early the beat came (at least 1).
    score: NotRequired[float]
    kind: NotRequired[str | None]
    rr: NotRequired[tuple[float | None, float | None]]


class QualitySummary(TypedDict):
    """What the report says of the signal's quality."""

    window_s: float
    windows: int
    reliable_windows: int
    #: The share of the recording's time in reliable windows.
    reliable_fraction: float
    #: (reason, seconds) for each reason of unreliable windows, the commonest first.
    unreliable: list[tuple[str, float]]
    #: The longest unreliable stretches, longest first: (start s, end s, reason), seconds from
    #: the recording's start.
    spans: list[tuple[float, float, str]]
    #: All unreliable stretches.
    span_count: int
    #: Beat rows in unreliable windows (left out of training and of the ranking), of all rows.
    excluded_rows: int
    rows: int


class StepInfo(TypedDict):
    """How the training steps ran (from vae.train). The keys but `device` may be missing: a
    caller that knows nothing of CUDA graphs or fusion leaves them out."""

    device: str
    captured: NotRequired[bool]
    why_eager: NotRequired[str | None]
    fused: NotRequired[bool]
    why_unfused: NotRequired[str | None]
    cpu_kernels: NotRequired[bool]
    why_autograd: NotRequired[str | None]
    setup_seconds: NotRequired[float]


class TrainSummary(StepInfo):
    """What the single-recording report says of training."""

    epochs: int
    batch_size: int
    #: --batch-size, or None when the default was used.
    batch_asked: int | None
    final_loss: float
    #: Over every held-out beat (`held_out_beats`); the loss that stopped training was
    #: measured after each epoch over `monitored_beats` of them.
    test_loss: float
    held_out_beats: NotRequired[int]
    monitored_beats: NotRequired[int]
    threads: int
    #: The few-beats warning, or None.
    few: str | None
    converged: str


#: (stage, seconds, bytes copied)
Stage: TypeAlias = tuple[str, float, int]
#: (from → to, the address handed over, whether both sides had the same address)
HandOff: TypeAlias = tuple[str, int, bool]

#: What the MIT-BIH beat symbols mean, for the accuracy table.
BEAT_CLASSES = {
    "N": "normal", "L": "left bundle branch block", "R": "right bundle branch block",
    "B": "bundle branch block", "A": "atrial premature", "a": "aberrated atrial premature",
    "J": "nodal premature", "S": "supraventricular premature", "V": "premature ventricular",
    "r": "R-on-T ventricular premature", "F": "fusion of ventricular and normal",
    "e": "atrial escape", "j": "nodal escape", "n": "supraventricular escape",
    "E": "ventricular escape", "/": "paced", "f": "fusion of paced and normal",
    "Q": "unclassifiable", "?": "beat not classified",
}


def clock(seconds: float, decimals: int = 0) -> str:
    """A duration or a time from the start as h:mm:ss (h:mm:ss.ss with `decimals`), as a
    clinician reads a recording's time: 0:00:10 for ten seconds, 24:00:00 for a day."""
    scale = 10 ** decimals
    ticks = round(max(seconds, 0.0) * scale)
    whole, fraction = divmod(ticks, scale)
    hours, rest = divmod(whole, 3600)
    text = f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return text + (f".{fraction:0{decimals}d}" if decimals else "")


def readable_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def step_mode(train: StepInfo) -> str:
    """How the training steps ran: on a GPU, graphs and fusion; on the CPU, whose kernels."""
    fused = ""
    if train.get("fused"):
        fused = (f", kernels fused by torch.compile ({train['setup_seconds']:.1f} s to warm "
                 f"up, compile and capture)")
    elif train.get("why_unfused") not in (None, "asked"):
        fused = f", not fused: {train['why_unfused']}"
    if train["device"] == "cpu":
        if train.get("cpu_kernels"):
            return ", each step's loss and gradients in zerohop's CPU kernels" + fused
        why = train.get("why_autograd")
        return (f", steps through torch's autograd: {why}" if why not in (None, "asked")
                else "") + fused
    if "captured" not in train:
        return fused
    return (", each step one CUDA graph replay" if train["captured"]
            else f", eager steps: {train['why_eager']}") + fused


def held_out_note(train: TrainSummary | Mapping[str, object]) -> str:
    """What the held-out loss was measured on, when the per-epoch one watched fewer beats."""
    total, watched = train.get("held_out_beats"), train.get("monitored_beats")
    if not isinstance(total, int) or not isinstance(watched, int) or watched >= total:
        return ""
    return (f" over all {total:,} held-out beats (after each epoch, to decide when to stop, "
            f"over {watched:,} of them)")


def _batch_note(train: TrainSummary) -> str:
    if train["batch_asked"] is None or train["batch_size"] >= train["batch_asked"]:
        return ""
    return (f" (asked {train['batch_asked']}: a batch is at most a sixteenth of the training "
            f"beats, at least 16, so a short recording still gets 16 optimiser steps an epoch)")


def _method_line(method: str, params: _Params) -> str:
    rate = params["rate"]
    if method == "blog":
        return (f"- segmentation: the blog's method (Ricker width {params['ricker_width']}, "
                f"gate window {params['window']}, kept lengths {params['min_length']}.."
                f"{params['max_length']} samples), rows of {params['width']} samples")
    return (f"- detection: adaptive thresholds after Pan & Tompkins (1985) with Hamilton & "
            f"Tompkins' search-back (1986): Ricker band-pass ({params['ricker_width']} taps), "
            f"{params['integration'] / rate * 1000:.0f} ms energy window, "
            f"{params['refractory'] / rate * 1000:.0f} ms refractory period; each beat a row of "
            f"{params['width']} samples from {params['before'] / rate:.2f} s before to "
            f"{params['after'] / rate:.2f} s after its R peak, zero-padded")


def _accuracy_lines(accuracy: Accuracy) -> list[str]:
    a = accuracy
    if not a["scored"]:
        return ["", f"## Beat detection against {a['reference']}", "",
                f"Not scored: {a['why']} (AAMI EC57 style scoring leaves the first and last "
                f"{a['margin_s']:g} s out)."]
    lines = [
        "",
        f"## Beat detection against {a['reference']}",
        "",
        f"AAMI EC57 style: beat annotations only, a detection matches within "
        f"±{a['tolerance_ms']:.0f} ms one-to-one, the first and last {a['margin_s']:g} s "
        f"not scored.",
        "",
        "| sensitivity | positive predictivity | F1 | TP | FP | FN |",
        "|---|---|---|---|---|---|",
        f"| {a['sensitivity'] * 100:.2f} % | {a['ppv'] * 100:.2f} % | {a['f1'] * 100:.2f} % | "
        f"{a['tp']} | {a['fp']} | {a['fn']} |",
        "",
        "| class | meaning | reference beats | found | sensitivity |",
        "|---|---|---|---|---|",
    ]
    for c in a["classes"]:
        sens = c["found"] / c["beats"] * 100 if c["beats"] else float("nan")
        lines.append(f"| {c['symbol']} | {BEAT_CLASSES.get(c['symbol'], '')} | {c['beats']} | "
                     f"{c['found']} | {sens:.2f} % |")
    return lines


def when(seconds: float, start: float | None) -> str:
    """A time `seconds` from the recording's start: its time of day with the time from the
    start in brackets when the start is known, else the time from the start (h:mm:ss)."""
    if start is None:
        return clock(seconds)
    return f"{clock((start + seconds) % 86400.0)} ({clock(seconds)})"


def _quality_lines(quality: QualitySummary, start: float | None) -> list[str]:
    q = quality
    lines = ["", "## Signal quality", "",
             f"Each {q['window_s']:g} s window is judged flat, clipped, without QRS-like "
             f"energy, too noisy to trust, or good (the rules: docs/ecg.md, \"Signal "
             f"quality\")."]
    if not q["unreliable"]:
        lines[-1] += (f" All {q['windows']:,} windows are reliable; every beat is trained on "
                      "and ranked.")
        return lines
    by_reason = ", ".join(f"{clock(seconds)} {reason}" for reason, seconds in q["unreliable"])
    total = sum(seconds for _, seconds in q["unreliable"])
    lines[-1] += (f" Reliable: {q['reliable_fraction'] * 100:.1f} % of the recording "
                  f"({q['reliable_windows']:,} of {q['windows']:,} windows). Unreliable: "
                  f"{clock(total)} (h:mm:ss: {by_reason}), in {q['span_count']:,} "
                  "stretch(es). "
                  + (f"The {q['excluded_rows']:,} of {q['rows']:,} beats whose R peak lies in "
                     "an unreliable window are not trained on, ranked or drawn"
                     if q["excluded_rows"] else "No beat row lies in an unreliable window")
                  + "; the tachogram breaks its line there.")
    times = "clock time (from the start)" if start is not None else "from the start (h:mm:ss)"
    lines += ["", f"The longest unreliable stretches ({len(q['spans'])} of "
              f"{q['span_count']:,}):", "",
              f"| start, {times} | end, {times} | duration (h:mm:ss) | reason |",
              "|---|---|---|---|"]
    for begin, end, reason in q["spans"]:
        lines.append(f"| {when(begin, start)} | {when(end, start)} | {clock(end - begin)} | "
                     f"{reason} |")
    return lines


def write_report(path: Path, *, source: str, params: _Params, method: str,
                 stages: Sequence[Stage], counts: Counts, accuracy: Accuracy | None,
                 outliers: Sequence[Outlier], plots: Mapping[str, Path], train: TrainSummary,
                 hand_offs: Sequence[HandOff], units: str | None,
                 memory: MemorySummary | None = None, start: float | None = None,
                 quality: QualitySummary | None = None) -> Path:
    rate = params["rate"]
    unreliable = counts.get("unreliable_beats", 0)
    ranked = counts["beats"] - unreliable
    lines = [
        "# zerohop ECG pipeline report",
        "",
        f"- input: {source}; {counts['samples']:,} samples at {rate:g} Hz "
        f"(lasting {clock(counts['samples'] / rate)}, h:mm:ss"
        + (f", from {clock(start % 86400.0)}" if start is not None else "")
        + f"), amplitude in {units or 'unstated units'}",
        _method_line(method, params),
        f"- beats: {counts['detected']:,} detected (median {counts['bpm']:.0f} bpm), "
        f"{counts['beats']:,} rows"
        + (f" ({unreliable:,} in unreliable signal, not trained on: {ranked:,} for the model)"
           if unreliable else " for the model")
        + f"; {counts['edge_dropped']} too close to the recording's ends for a full window",
        f"- LightVAE: batch {train['batch_size']}{_batch_note(train)}, final training loss "
        f"{train['final_loss']:.5f}, held-out loss {train['test_loss']:.5f}"
        f"{held_out_note(train)} ({train['device']}, {train['threads']} CPU "
        f"thread(s){step_mode(train)}); {train['converged']}",
    ]
    if memory is not None:
        lines.append(summary_line(memory))
    if train.get("few"):
        lines.append(f"- **warning**: {train['few']}")
    if quality is not None:
        lines += _quality_lines(quality, start)
    if accuracy is not None:
        lines += _accuracy_lines(accuracy)
    lines += [
        "",
        "## Stages",
        "",
        "| stage | seconds | bytes copied |",
        "|---|---|---|",
    ]
    for name, seconds, copied in stages:
        lines.append(f"| {name} | {seconds:.4f} | {readable_bytes(copied)} |")
    lines += [
        "",
        "Bytes copied count data moved between frameworks or stages; computing a new result "
        "(curvature, beats, latents) is not a copy.",
        "",
        "## Hand-offs (pointer identity checked)",
        "",
        "| from → to | address | same memory |",
        "|---|---|---|",
    ]
    for label, address, same in hand_offs:
        lines.append(f"| {label} | 0x{address:x} | {'yes' if same else 'NO'} |")
    lines += [
        "",
        "## Most outlying beats",
        "",
        "The error is the mean square difference between a beat and its reconstruction, both "
        "normalised by the recording's beat mean and standard deviation (in units of the "
        "beats' variance, so the ranking does not depend on the input's units), over the part "
        "of the beat's window that is its own: from the previous beat's T wave's end (40 % of "
        "the RR interval after its R peak) to the next beat's QRS onset (60 ms before its R "
        "peak). A fixed window also holds the next beat whenever that one comes early, which "
        "ranked normal beats before the premature ones. Beats are ranked by that error times "
        "their prematurity (the median of the 8 RR intervals before the beat over its own RR "
        "before; at least 1), the rhythm context a clinician reads beside the shape. The "
        "figure `outliers.png` draws the top five.",
        "",
        f"The {len(outliers)} highest of the {ranked:,} beats ranked"
        + (" (those in reliable signal)" if unreliable else "") + ". The class is "
        "the reference annotation's (N normal, V premature ventricular, A atrial premature, "
        "…; – without annotations); the RR intervals around a beat tell a premature beat "
        "(short before) from a normal one whose window holds the next, early beat (short "
        "after).",
        "",
        "| rank | beat | class | R peak (sample) | "
        + ("clock time (from the start)" if start is not None
           else "time from the start (h:mm:ss)") + " "
        "| RR before / after (ms) | reconstruction error (variances) | score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rank, row in enumerate(outliers, 1):
        kind = row.get("kind") or "–"
        before, after = row.get("rr", (None, None))
        rr = " / ".join("–" if v is None else f"{v:.0f}" for v in (before, after))
        when = clock(row["time"], 2)
        if start is not None:
            when = f"{clock((start + row['time']) % 86400.0, 2)} ({when})"
        lines.append(f"| {rank} | {row['beat']} | {kind} | {row['peak']} | "
                     f"{when} | {rr} | {row['error']:.5f} | "
                     f"{row.get('score', row['error']):.5f} |")
    if plots:
        lines += ["", "## Figures", ""]
        for name, png in plots.items():
            lines += [f"### {name.replace('_', ' ')}", "", f"![{name}]({png.name})", ""]
    path.write_text("\n".join(lines) + "\n")
    return path
