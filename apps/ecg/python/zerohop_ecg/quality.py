"""Signal quality in the job: which windows of the recording hold an ECG whose detected beats
can be trusted (the Rust crate's `zerohop_ecg::quality` decides, per 10 s window: good, flat,
clipped, no QRS-like energy, too noisy), and what the job makes of it: the beats it trains on,
the intervals the tachogram draws, the report's section and the input error when no window
is reliable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .kernels import QualityWindows, assess_quality
from .report import QualitySummary, clock

#: The window the job judges, seconds.
WINDOW_S = 10.0
#: Code of a reliable window.
GOOD = 0
#: The longest unreliable stretches the report lists.
SPANS_SHOWN = 5


@dataclass
class Quality:
    """The verdict on each window of one recording, and what follows from it."""

    windows: QualityWindows
    rate: float
    samples: int

    @property
    def codes(self) -> NDArray[np.uint8]:
        return self.windows["codes"]

    @property
    def reliable_windows(self) -> int:
        return int(np.count_nonzero(self.codes == GOOD))

    def _window_of(self, samples: NDArray[Any]) -> NDArray[np.intp]:
        """The window holding each sample (the Rust side's windows, by their starts)."""
        at = np.searchsorted(self.windows["starts"], np.asarray(samples), side="right") - 1
        return np.clip(at, 0, len(self.codes) - 1)

    def reliable(self, peaks: NDArray[Any]) -> NDArray[np.bool_]:
        """Whether each R peak (sample) lies in a reliable window."""
        if len(peaks) == 0:
            return np.zeros(0, dtype=bool)
        return np.asarray(self.codes[self._window_of(peaks)] == GOOD)

    def reliable_intervals(self, r_peaks: NDArray[Any]) -> NDArray[np.bool_]:
        """Whether each RR interval (between consecutive R peaks) lies in reliable signal:
        both beats in reliable windows and no window between them (an interval across an
        unreliable stretch measures the gap, not the heart)."""
        if len(r_peaks) < 2:
            return np.zeros(0, dtype=bool)
        at = self._window_of(r_peaks)
        good = self.codes[at] == GOOD
        return np.asarray(good[1:] & good[:-1] & (np.diff(at) <= 1))

    def _durations(self) -> NDArray[np.float64]:
        """Each window's length in seconds (the last runs to the end)."""
        starts = self.windows["starts"]
        ends = np.append(starts[1:], self.samples)
        return np.asarray((ends - starts) / self.rate, dtype=np.float64)

    def reliable_fraction(self) -> float:
        return float(self._durations()[self.codes == GOOD].sum() * self.rate / self.samples)

    def unreliable_seconds(self) -> list[tuple[str, float]]:
        """(reason, seconds) of unreliable time by reason, the most first."""
        seconds = np.bincount(self.codes, weights=self._durations(),
                              minlength=len(self.windows["reasons"]))
        by_reason = [(self.windows["reasons"][code], float(s))
                     for code, s in enumerate(seconds) if code != GOOD and s > 0]
        return sorted(by_reason, key=lambda item: -item[1])

    def unreliable_counts(self) -> list[tuple[str, int]]:
        """(reason, windows) by reason, the most first."""
        counts = np.bincount(self.codes, minlength=len(self.windows["reasons"]))
        by_reason = [(self.windows["reasons"][code], int(n)) for code, n in enumerate(counts)
                     if code != GOOD and n > 0]
        return sorted(by_reason, key=lambda item: -item[1])

    def longest_spans(self, most: int = SPANS_SHOWN) -> list[tuple[float, float, str]]:
        """The `most` longest unreliable stretches, longest first: (start, end) in seconds
        from the recording's start, and the commonest reason among their windows."""
        spans = [(start / self.rate, end / self.rate, reason)
                 for start, end, reason in self.windows["spans"]]
        return sorted(spans, key=lambda span: (span[0] - span[1], span[0]))[:most]

    def summary(self, excluded_rows: int, rows: int) -> QualitySummary:
        return {"window_s": self.windows["window_s"], "windows": len(self.codes),
                "reliable_windows": self.reliable_windows,
                "reliable_fraction": self.reliable_fraction(),
                "unreliable": self.unreliable_seconds(), "spans": self.longest_spans(),
                "span_count": len(self.windows["spans"]), "excluded_rows": excluded_rows,
                "rows": rows}

    def line(self) -> str:
        """One line for the command line: the reliable share and the unreliable time."""
        unreliable = self.unreliable_seconds()
        if not unreliable:
            return (f"signal quality: every {self.windows['window_s']:g} s window reliable "
                    f"({len(self.codes):,} windows)")
        total = sum(seconds for _, seconds in unreliable)
        parts = ", ".join(f"{clock(seconds)} {reason}" for reason, seconds in unreliable)
        return (f"signal quality: {self.reliable_fraction() * 100:.1f} % reliable; "
                f"{clock(total)} unreliable (h:mm:ss: {parts}) in "
                f"{len(self.windows['spans']):,} stretch(es), left out of training")

    def nothing_reliable(self, source: str) -> str:
        """The input error's message for a recording with no reliable window."""
        counts = ", ".join(f"{n:,} {reason}" for reason, n in self.unreliable_counts())
        windows = len(self.codes)
        return (f"{source}: no reliable ECG: {windows:,} window(s) of "
                f"{self.windows['window_s']:g} s, " + ("all " if windows > 1 else "")
                + f"unreliable ({counts}); nothing to report (is it an ECG, and is the lead "
                "attached?)")


def assess(signal: NDArray[Any], rate: float, samples: int, r_peaks: NDArray[Any],
           window: float = WINDOW_S) -> Quality:
    """Judges each window of a host signal with the detector's R peaks."""
    return Quality(assess_quality(signal, rate, r_peaks, window=window), rate, samples)


__all__ = ["GOOD", "Quality", "QualitySummary", "SPANS_SHOWN", "WINDOW_S", "assess"]
