"""Judging one recording's detected beats, for the single-recording job (pipeline.py) and for
each record of many (records.py): the check that they are heartbeats at the rate given, the
few-beats warning, and EC57 scoring against reference annotations (zerohop_ecg.match_beats, in Rust)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .kernels import match_beats
from .config import FEW_BEATS, MARGIN_S, TOLERANCE_S
from .errors import EcgInputError
from .report import Accuracy, ClassScore
from .recording import Truth


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


def _class_scores(symbols: NDArray[Any], found: NDArray[np.bool_]) -> list[ClassScore]:
    """Beats and beats found per annotation class, the commonest first."""
    classes: list[ClassScore] = []
    for symbol in sorted(set(symbols.tolist()), key=lambda s: (-int((symbols == s).sum()), s)):
        mask = symbols == symbol
        classes.append({"symbol": symbol, "beats": int(mask.sum()),
                        "found": int(found[mask].sum())})
    return classes


def accuracy(r_peaks: NDArray[Any], truth: Truth, rate: float, samples: int) -> Accuracy:
    """Sensitivity and positive predictivity (EC57 style), pooled and per annotation class, with one
    matching (zerohop_ecg.match_beats, in Rust)."""
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
    sens, ppv, tp, fp, fn, matched = match_beats(r_peaks, truth.samples, tolerance, margin,
                                                 samples)
    found = np.asarray(matched, dtype=bool)[inside]
    f1 = 2 * tp / max(1, 2 * tp + fp + fn)
    return {"scored": True, "sensitivity": sens, "ppv": ppv, "f1": f1, "tp": tp, "fp": fp,
            "fn": fn,
            "tolerance_ms": TOLERANCE_S * 1000, "margin_s": MARGIN_S,
            "classes": _class_scores(np.asarray(truth.symbols)[inside], found),
            "reference": truth.name}


__all__ = ["accuracy", "check_detection", "few_beats_warning"]
