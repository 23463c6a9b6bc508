"""The app's Rust readers and kernels, their results as zerohop tables and tensors.

The extension (``_native``, built from ``apps/ecg/native``) hands results over through public
protocols only: a tensor as a DLPack capsule that ``zerohop.from_dlpack`` takes without a
copy, a table as its one buffer with its schema, which ``zerohop.Table.wrap`` lays over the
same memory. This module owns those two steps and the types of what comes back.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, overload

import numpy as np
import zerohop
import zerohop.memory
from numpy.typing import NDArray

from . import _native

_Path: TypeAlias = str | os.PathLike[str]
#: The detection methods. Arguments take any str (others raise ValueError).
_Method: TypeAlias = Literal["adaptive", "blog"]


class CsvHeader(TypedDict):
    names: list[str]
    units: list[str] | None
    delimiter: str
    has_header: bool
    first_data_line: int  # 1-based


class CsvReport(TypedDict):
    bytes: int  # data-row bytes moved to the device (the file's size for a host read)
    rows: int
    host_lines: int  # lines the device left to the host's line parser
    fallback: str | None  # why the host parsed the whole file; None when it did not
    timings: list[tuple[str, float]]


class Params(TypedDict):
    method: _Method
    rate: float
    ricker_width: int
    width: int
    window: NotRequired[int]  # method="blog" only, to gate_to_peak
    min_length: NotRequired[int]
    max_length: NotRequired[int]
    gate_to_peak: NotRequired[float]
    integration: NotRequired[int]  # method="adaptive" only, to after
    candidate_window: NotRequired[int]
    refractory: NotRequired[int]
    t_wave: NotRequired[int]
    before: NotRequired[int]
    after: NotRequired[int]


class Segmentation(TypedDict):
    curvature: zerohop.Tensor
    energy: NotRequired[zerohop.Tensor]  # method="adaptive" only
    gates: zerohop.Tensor
    lengths: zerohop.Tensor
    r_peaks: zerohop.Tensor
    beat_peaks: zerohop.Tensor
    beat_starts: zerohop.Tensor
    beat_lengths: zerohop.Tensor
    beats: zerohop.Tensor
    method: _Method
    edge_dropped: int
    params: Params
    timings: list[tuple[str, float]]  # (stage, seconds), in order
    quality: NotRequired[QualityWindows]  # segment(..., quality=W) only


class QualityWindows(TypedDict):
    """Each window's verdict on the signal's quality (`assess_quality`), as NumPy arrays."""

    window: int  # samples a window (the last runs to the end: up to twice as long)
    window_s: float
    codes: NDArray[np.uint8]  # 0 good, 1 flat, 2 clipped, 3 no QRS-like energy, 4 too noisy
    starts: NDArray[np.int64]  # each window's first sample
    range: NDArray[np.float32]
    clipped: NDArray[np.float32]
    kurtosis: NDArray[np.float32]
    band: NDArray[np.float32]
    correlation: NDArray[np.float32]
    beats: NDArray[np.int64]
    reasons: list[str]  # the name of each code
    spans: list[tuple[int, int, str]]  # runs of unreliable windows: start, end, reason
    seconds: float


class WfdbInfo(TypedDict):
    record: str
    rate: float
    samples: int
    header_samples: int | None
    leads: list[str]
    units: list[str]
    gains: list[float]
    baselines: list[int]
    adc_zero: list[int]
    checksums_ok: list[bool | None]
    comments: list[str]
    base_time: str | None
    base_date: str | None


class Annotations(TypedDict):
    sample: NDArray[np.int64]
    code: NDArray[np.uint8]
    symbol: NDArray[np.str_]
    is_beat: NDArray[np.bool_]
    subtype: NDArray[np.int8]
    chan: NDArray[np.uint8]
    num: NDArray[np.int8]
    aux: list[str | None]
    time_resolution: float | None


_TENSORS = ("curvature", "energy", "gates", "lengths", "r_peaks", "beat_peaks", "beat_starts",
            "beat_lengths", "beats")


@functools.cache
def _zerohop_allocator() -> tuple[int, int]:
    """The addresses of zerohop's exported C allocator functions (its public allocator
    interface, the one torch's pluggable allocator loads)."""
    library = ctypes.CDLL(zerohop.memory.library_path())
    malloc = ctypes.cast(getattr(library, zerohop.memory.C_MALLOC_SYMBOL), ctypes.c_void_p)
    free = ctypes.cast(getattr(library, zerohop.memory.C_FREE_SYMBOL), ctypes.c_void_p)
    assert malloc.value and free.value, "zerohop exports its allocator"
    return malloc.value, free.value


def draw_from_zerohop(device: str = "cpu") -> None:
    """The kernels' memory on ``device`` comes from zerohop's current resource for it (a
    shared-memory pool a worker made current, a limit, statistics): the host always, a CUDA
    device when zerohop has a resource current there (else plain device memory)."""
    follow = device == "cpu" or zerohop.memory.get_current(device) is not None
    _native.allocate_through(*_zerohop_allocator(), device, follow)


def _table(parts: tuple[object, list[tuple[Any, ...]], int, int]) -> zerohop.Table:
    buffer, schema, rows, alignment = parts
    return zerohop.Table.wrap(buffer, schema, rows, alignment=alignment)


def _tensor(capsule: object, stream: int | None = None) -> zerohop.Tensor:
    tensor = zerohop.from_dlpack(capsule)
    if stream is not None:
        tensor.set_stream(stream)
    return tensor


@overload
def read_csv(path: _Path, *, columns: Sequence[str | int] | None = None,
             header: bool | None = None, delimiter: str | None = None,
             empty: str | float | None = None, nan: str = "reject", device: str = "cpu",
             stream: int | None = None, report: Literal[False] = False) -> zerohop.Table: ...
@overload
def read_csv(path: _Path, *, columns: Sequence[str | int] | None = None,
             header: bool | None = None, delimiter: str | None = None,
             empty: str | float | None = None, nan: str = "reject", device: str = "cpu",
             stream: int | None = None,
             report: Literal[True]) -> tuple[zerohop.Table, CsvReport]: ...
def read_csv(path: _Path, *, columns: Sequence[str | int] | None = None,
             header: bool | None = None, delimiter: str | None = None,
             empty: str | float | None = None, nan: str = "reject", device: str = "cpu",
             stream: int | None = None,
             report: bool = False) -> zerohop.Table | tuple[zerohop.Table, CsvReport]:
    """Reads a numeric CSV into a zerohop Table of float32 columns (one aligned SoA buffer),
    on all cores, or into device memory with ``device="cuda:N"``. ``columns``: names or
    0-based indices; ``header``: None detects it; ``delimiter``: None sniffs ",", ";" or tab;
    ``empty``: "error" (default), "nan" or a number; ``nan``: "reject" or "allow".
    ``report=True`` returns (table, report) with the bytes, rows, host-parsed lines, the
    fallback reason and step times."""
    if device != "cpu":
        draw_from_zerohop(device)
    options: dict[str, Any] = {"columns": columns, "header": header, "delimiter": delimiter,
                               "empty": empty, "nan": nan, "device": device, "stream": stream}
    if report:
        parts, details = _native.read_csv(path, report=True, **options)
        return _table(parts), details
    return _table(_native.read_csv(path, **options))


def read_wfdb(record: _Path, *, leads: str | Iterable[str | int] | None = None,
              ) -> tuple[zerohop.Table, WfdbInfo]:
    """Reads a PhysioNet WFDB record (the path without extension, or the ``.hea`` file) into
    a zerohop Table with one float32 column per lead in physical units, and its header."""
    parts, info = _native.read_wfdb(record, leads=leads)
    return _table(parts), info


def read_edf(path: _Path, *, leads: str | Iterable[str | int] | None = None,
             device: str = "cpu") -> tuple[zerohop.Table, dict[str, Any]]:
    """Reads an EDF, EDF+ or BDF(+) file's chosen signals into a zerohop Table of float32
    columns in physical units, on the host or (``device="cuda:N"``) straight into that
    device's memory, with what the file says (see ``_native.read_edf``)."""
    if device != "cpu":
        draw_from_zerohop(device)
    parts, info = _native.read_edf(path, leads=leads, device=device)
    return _table(parts), info


def segment(signal: object, rate: float, *, method: str = "adaptive", device: str = "cpu",
            stream: int | None = None, quality: float | None = None) -> Segmentation:
    """Detects R peaks and cuts one beat row per peak (see ``_native.segment``): zerohop
    tensors, on ``device``, carrying the CUDA stream that produces them. ``quality=W`` (host
    signals) also judges the signal's quality in W-second windows, as `assess_quality`
    does, under "quality"."""
    if device != "cpu":
        draw_from_zerohop(device)
    out = _native.segment(signal, rate, method=method, device=device, stream=stream,
                          quality=quality)
    produced_on = out.pop("stream")
    for name in _TENSORS:
        if name in out:
            out[name] = _tensor(out[name], produced_on)
    if "quality" in out:
        out["quality"] = _quality_windows(out["quality"])
    seg: Segmentation = out  # type: ignore[assignment]  # filled above, name by name
    return seg


def assess_quality(signal: object, rate: float, r_peaks: object, *,
                   window: float = 10.0) -> QualityWindows:
    """Judges each `window`-second window of a host signal with its detected R peaks: good,
    flat, clipped, no QRS-like energy or too noisy (see ``_native.assess_quality``)."""
    return _quality_windows(_native.assess_quality(signal, rate, r_peaks, window=window))


def _quality_windows(out: dict[str, Any]) -> QualityWindows:
    """The native assessment's arrays as NumPy arrays: rows of one array each, views."""
    out["codes"] = np.from_dlpack(_tensor(out["codes"]))
    for name, row in zip(out.pop("figure_names"), np.from_dlpack(_tensor(out.pop("figures")))):
        out[name] = row
    out["starts"], out["beats"] = np.from_dlpack(_tensor(out.pop("counts")))
    windows: QualityWindows = out  # type: ignore[assignment]  # converted above, name by name
    return windows


def synthesize(seconds: float, *, rate: float = 250.0, heart_rate: float = 70.0,
               noise_mv: float = 0.02, wander_mv: float = 0.1, ectopic: float = 0.0,
               day_swing: float = 0.0, seed: int = 1, csv: _Path | None = None,
               peaks: _Path | None = None) -> tuple[zerohop.Tensor, zerohop.Tensor, list[bool]]:
    """A synthetic ECG with known R peaks: (signal in mV, float32; R peaks, int64; ectopic
    flag per beat), optionally written to ``csv`` (and the peaks to ``peaks``)."""
    signal, r_peaks, ectopic_flags = _native.synthesize(
        seconds, rate=rate, heart_rate=heart_rate, noise_mv=noise_mv, wander_mv=wander_mv,
        ectopic=ectopic, day_swing=day_swing, seed=seed, csv=csv, peaks=peaks)
    return _tensor(signal), _tensor(r_peaks), ectopic_flags


csv_header = _native.csv_header
params = _native.params
score = _native.score
match_beats = _native.match_beats
check_memory = _native.check_memory
read_annotations = _native.read_annotations
edf_header = _native.edf_header
VaeCpu = _native.VaeCpu
adam_step = _native.adam_step

draw_from_zerohop("cpu")

__all__ = [
    "Annotations", "CsvHeader", "CsvReport", "Params", "QualityWindows", "Segmentation",
    "VaeCpu", "WfdbInfo", "adam_step", "assess_quality", "check_memory", "csv_header", "draw_from_zerohop", "edf_header", "match_beats", "params", "read_annotations",
    "read_csv", "read_edf", "read_wfdb", "score", "segment", "synthesize",
]
