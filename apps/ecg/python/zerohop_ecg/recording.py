"""The recording a job runs on, once read: the signal with its rate, units, start and
reference beats (`Input`), and the checks every reader applies to it (a sampling rate an ECG
has, a column that is no ECG, missing samples and how they are filled)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from numpy.typing import NDArray

from .errors import EcgInputError

if TYPE_CHECKING:
    from zerohop import Tensor

RATE_RANGE = (50.0, 100_000.0)
#: DLPack's device type of CUDA memory.
CUDA = 2


@dataclass
class Truth:
    """Reference beats: sample indices and their annotation symbols (N, V, A, …)."""

    samples: NDArray[np.int64]
    symbols: list[str]
    name: str


@dataclass
class Input:
    signal: Tensor  # 1-d float32 (a column of a zerohop Table)
    rate: float
    samples: int
    description: str
    units: str | None
    truth: Truth | None
    stage: str
    #: A host copy of a signal in device memory, once one was made (the reader's checks make
    #: one): the figures draw from it, and the report counts it.
    host_copy: NDArray[Any] | None = None
    #: The time of day the recording starts, in seconds after midnight, when the file says
    #: (a WFDB base time, a CSV column of clock times): the report then gives clock times.
    start: float | None = None

    def numpy_signal(self) -> NDArray[Any]:
        """The signal as NumPy: a view on the host, a copy from device memory."""
        if self.signal.__dlpack_device__()[0] != CUDA:
            return np.from_dlpack(self.signal)
        if self.host_copy is None:
            self.host_copy = np.from_dlpack(self.signal.to("cpu"))
        return self.host_copy


@overload
def check_rate(rate: None, what: str = ...) -> None: ...
@overload
def check_rate(rate: float, what: str = ...) -> float: ...
def check_rate(rate: float | None, what: str = "--rate") -> float | None:
    if rate is None:
        return None
    low, high = RATE_RANGE
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and low <= rate <= high):
        raise EcgInputError(f"{what} {rate}: a sampling rate is {low:g} to {high:g} Hz")
    return float(rate)


def is_time_axis(values: NDArray[Any]) -> bool:
    """Strictly increasing at a steady step over the first 1000 values: a time column."""
    v = np.asarray(values[:1000], dtype=np.float64)
    if len(v) < 3:
        return False
    steps = np.diff(v)
    median = float(np.median(steps))
    return bool(median > 0 and (steps > 0).all()
                and ((steps > 0.5 * median) & (steps < 1.5 * median)).all())


def check_signal(values: NDArray[Any], column: str, where: str) -> None:
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if len(finite) else (None, None)
    check_shape_of_signal(low, high, values, column, where)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise EcgInputError(
            f"{where}: column {column!r} has {len(bad)} missing or non-finite sample(s), the "
            f"first at sample {bad[0]}; pass --fill interpolate (or --fill zero)")


def check_shape_of_signal(low: float | None, high: float | None,
                           head: NDArray[Any], column: str, where: str) -> None:
    """What makes a column no ECG, from its finite range (None: no finite value) and its
    first values (`is_time_axis` reads 1000): empty, constant, or a time axis."""
    if low is None:
        raise EcgInputError(f"{where}: column {column!r} holds no numbers")
    if low == high:
        raise EcgInputError(f"{where}: column {column!r} is constant ({low:g}); not an ECG")
    if is_time_axis(head):
        raise EcgInputError(
            f"{where}: column {column!r} increases steadily like a time axis; choose the ECG "
            f"column with --column")


#: The lead a 12-lead file is read from when none is named: lead II (MLII on MIT-BIH), the
#: rhythm lead clinicians read first.
PREFERRED_LEADS = ("ii", "mlii", "lead ii", "ecg ii", "ii (mv)")


def default_lead(names: Sequence[str]) -> str | None:
    return next((n for n in names if n.strip().lower() in PREFERRED_LEADS), None)


def fill_missing(values: NDArray[Any], column: str, fill: str,
                  say: Callable[[str], object]) -> str | None:
    """Fills the NaNs of `values` (a writable NumPy view of the column) in place; a note for
    the report naming how many and where, or None when there were none."""
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad) == 0:
        return None
    if len(bad) == len(values):
        raise EcgInputError(f"column {column!r} holds no numbers")
    if fill == "zero":
        values[bad] = 0.0
    else:
        good = np.flatnonzero(np.isfinite(values))
        values[bad] = np.interp(bad, good, values[good]).astype(values.dtype)
    shown = ", ".join(str(int(i)) for i in bad[:5]) + (", …" if len(bad) > 5 else "")
    note = (f"{len(bad)} missing sample(s) in column {column!r} "
            f"{'interpolated' if fill == 'interpolate' else 'set to 0'} (--fill {fill}), at "
            f"sample(s) {shown}")
    say(note)
    return note


def check_device_signal(signal: Tensor, column: str, where: str,
                         values: NDArray[Any] | None = None) -> NDArray[Any]:
    """`check_signal` for a column in device memory, on a host copy of it (`values`, or one
    made here; returned: the figures draw from it), so reading a file on the GPU needs no
    torch and runs while torch is imported. Non-finite values never get here: the reader
    refuses them (nan="reject", empty="error") and --fill replaces them."""
    if values is None:
        values = np.from_dlpack(signal.to("cpu"))
    low, high = (float(values.min()), float(values.max())) if len(values) else (None, None)
    check_shape_of_signal(low, high, values[:1000], column, where)
    return values


__all__ = ["CUDA", "PREFERRED_LEADS", "RATE_RANGE", "Input", "Truth", "check_device_signal",
           "check_rate", "check_shape_of_signal", "check_signal", "default_lead", "fill_missing",
           "is_time_axis"]
