"""Judging one recording's detected beats, for the single-recording job (pipeline.py) and for
each record of many (records.py): the check that they are heartbeats at the rate given, the
few-beats warning, and EC57 scoring against reference annotations (zerohop_ecg.score)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import score
from .config import FEW_BEATS, MARGIN_S, TOLERANCE_S
from .errors import EcgInputError
from .report import Accuracy, ClassScore
from .sources import Truth


def check_detection(r_peaks: NDArray[Any], signal_source: str, rate: float) -> float:
    """The median heart rate (bpm). A recording without beats, or whose beats would mean a
    heart rate no heart has at the rate given, is an input error. (A rate off by less, say 2×,
    cannot be told from a different heart rate by the beats alone.)"""
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


def few_beats_warning(beats: int) -> str | None:
    """A warning to print and report when there are too few beats to make much of a model of
    them (None otherwise)."""
    if beats >= FEW_BEATS:
        return None
    return (f"only {beats} beats to train on (fewer than {FEW_BEATS}): the model, its latent "
            f"space and the outlier ranking say little about so few")


def matched_truth(detected: NDArray[Any], truth: NDArray[np.int64],
                  tolerance: float) -> NDArray[np.bool_]:
    """Which truth beats zerohop_ecg.score's matching finds (one-to-one, in time order), for
    the per-class counts only: score gives the pooled counts, not which beats it matched.
    Both lists already without the excluded ends."""
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


def _class_scores(symbols: NDArray[Any], found: NDArray[np.bool_]) -> list[ClassScore]:
    """Beats and beats found per annotation class, the commonest first."""
    classes: list[ClassScore] = []
    for symbol in sorted(set(symbols.tolist()), key=lambda s: (-int((symbols == s).sum()), s)):
        mask = symbols == symbol
        classes.append({"symbol": symbol, "beats": int(mask.sum()),
                        "found": int(found[mask].sum())})
    return classes


def accuracy(r_peaks: NDArray[Any], truth: Truth, rate: float, samples: int) -> Accuracy:
    """Sensitivity and positive predictivity (EC57 style), pooled (zerohop_ecg.score) and per
    annotation class."""
    tolerance = TOLERANCE_S * rate
    margin = int(MARGIN_S * rate)
    inside = (truth.samples >= margin) & (truth.samples < samples - margin)
    seconds = samples / rate
    if not inside.any():
        why = (f"a {seconds:.1f} s recording, {MARGIN_S:g} s excluded at each end"
               if samples <= 2 * margin else
               f"no reference beat annotation in the {seconds - 2 * MARGIN_S:.1f} s between "
               f"the {MARGIN_S:g} s excluded at each end")
        return {"scored": False, "why": why, "reference": truth.name,
                "tolerance_ms": TOLERANCE_S * 1000, "margin_s": MARGIN_S}
    sens, ppv, tp, fp, fn = score(r_peaks, truth.samples, tolerance, margin, samples)
    det_inside = r_peaks[(r_peaks >= margin) & (r_peaks < samples - margin)]
    found = matched_truth(det_inside, truth.samples[inside], tolerance)
    if int(found.sum()) != tp:
        raise AssertionError(f"per-class matching found {int(found.sum())} beats, "
                             f"zerohop_ecg.score {tp}")
    f1 = 2 * tp / max(1, 2 * tp + fp + fn)
    return {"scored": True, "sensitivity": sens, "ppv": ppv, "f1": f1, "tp": tp, "fp": fp,
            "fn": fn,
            "tolerance_ms": TOLERANCE_S * 1000, "margin_s": MARGIN_S,
            "classes": _class_scores(np.asarray(truth.symbols)[inside], found),
            "reference": truth.name}


__all__ = ["accuracy", "check_detection", "few_beats_warning", "matched_truth"]
