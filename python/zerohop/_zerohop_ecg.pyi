# Stub-only module: the type of the `zerohop._zerohop.ecg` attribute (a module object the
# extension builds in crates/zerohop-python/src/ecg.rs and ecg_wfdb.rs). No module of this
# name exists at runtime; import it as `from zerohop._zerohop import ecg`, or use the public
# `zerohop.ecg`. scripts/stubtest.sh checks this file against that attribute.

import os
from collections.abc import Iterable, Sequence
from typing import (
    Any,
    Literal,
    NotRequired,
    TypeAlias,
    TypedDict,
    final,
    overload,
    type_check_only,
)

import numpy as np
from numpy.typing import NDArray

from ._zerohop import Table, Tensor

__all__ = [
    "read_csv",
    "csv_header",
    "params",
    "segment",
    "synthesize",
    "check_memory",
    "score",
    "read_wfdb",
    "read_annotations",
    "VaeCpu",
    "adam_step",
]

_Path: TypeAlias = str | os.PathLike[str]
# The detection methods. Arguments take any str (others raise ValueError), so that callers
# holding a method name in a str variable need not narrow it.
_Method: TypeAlias = Literal["adaptive", "blog"]

@type_check_only
class _CsvHeader(TypedDict):
    names: list[str]
    units: list[str] | None
    delimiter: str
    has_header: bool
    # 1-based
    first_data_line: int

@type_check_only
class _CsvReport(TypedDict):
    # data-row bytes moved to the device (the file's size for a host read)
    bytes: int
    rows: int
    # lines the device left to the host's line parser
    host_lines: int
    # why the host parsed the whole file and copied it over; None when it did not
    fallback: str | None
    timings: list[tuple[str, float]]

@type_check_only
class _Params(TypedDict):
    method: _Method
    rate: float
    ricker_width: int
    width: int
    # method="blog" only
    window: NotRequired[int]
    min_length: NotRequired[int]
    max_length: NotRequired[int]
    gate_to_peak: NotRequired[float]
    # method="adaptive" only
    integration: NotRequired[int]
    candidate_window: NotRequired[int]
    refractory: NotRequired[int]
    t_wave: NotRequired[int]
    before: NotRequired[int]
    after: NotRequired[int]

@type_check_only
class _Segmentation(TypedDict):
    curvature: Tensor
    # method="adaptive" only
    energy: NotRequired[Tensor]
    gates: Tensor
    lengths: Tensor
    r_peaks: Tensor
    beat_peaks: Tensor
    beat_starts: Tensor
    beat_lengths: Tensor
    beats: Tensor
    method: _Method
    edge_dropped: int
    params: _Params
    # (stage, seconds), in order
    timings: list[tuple[str, float]]

@type_check_only
class _WfdbInfo(TypedDict):
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

@type_check_only
class _Annotations(TypedDict):
    sample: NDArray[np.int64]
    code: NDArray[np.uint8]
    symbol: NDArray[np.str_]
    is_beat: NDArray[np.bool_]
    subtype: NDArray[np.int8]
    chan: NDArray[np.uint8]
    num: NDArray[np.int8]
    aux: list[str | None]
    time_resolution: float | None

@overload
def read_csv(
    path: _Path,
    *,
    columns: Sequence[str | int] | None = None,
    header: bool | None = None,
    delimiter: str | None = None,
    # "error" (the default), "nan", or the value empty fields take
    empty: str | float | None = None,
    # "reject" or "allow"
    nan: str = "reject",
    device: str = "cpu",
    stream: int | None = None,
    report: Literal[False] = False,
) -> Table: ...
@overload
def read_csv(
    path: _Path,
    *,
    columns: Sequence[str | int] | None = None,
    header: bool | None = None,
    delimiter: str | None = None,
    empty: str | float | None = None,
    nan: str = "reject",
    device: str = "cpu",
    stream: int | None = None,
    report: Literal[True],
) -> tuple[Table, _CsvReport]: ...
def csv_header(path: _Path, *, delimiter: str | None = None) -> _CsvHeader: ...
def params(rate: float, method: str = "adaptive") -> _Params: ...

# `signal`: a 1-d signal from any DLPack producer, or real numbers NumPy can convert.
def segment(
    signal: object,
    rate: float,
    *,
    method: str = "adaptive",
    device: str = "cpu",
    stream: int | None = None,
) -> _Segmentation: ...

# (signal in mV, float32; R peaks, int64; ectopic flag per beat)
def synthesize(
    seconds: float,
    *,
    rate: float = 250.0,
    heart_rate: float = 70.0,
    noise_mv: float = 0.02,
    wander_mv: float = 0.1,
    ectopic: float = 0.0,
    day_swing: float = 0.0,
    seed: int = 1,
    csv: _Path | None = None,
    peaks: _Path | None = None,
) -> tuple[Tensor, Tensor, list[bool]]: ...

# ValueError when `samples` would need more than half of this machine's memory in the job.
def check_memory(samples: int, what: str) -> None: ...

# (sensitivity, positive predictive value, true positives, false positives, false negatives)
# `detected` and `truth` may be sequences or NumPy arrays (docs/ecg.md passes arrays).
def score(
    detected: Sequence[float] | NDArray[Any],
    truth: Sequence[int] | NDArray[Any],
    tolerance: float,
    margin: int,
    length: int,
) -> tuple[float, float, int, int, int]: ...

# `leads`: None (all), one lead name, or names and 0-based indices.
def read_wfdb(
    record: _Path, *, leads: str | Iterable[str | int] | None = None
) -> tuple[Table, _WfdbInfo]: ...
def read_annotations(path: _Path) -> _Annotations: ...

# The VAE's CPU training pass (crates/zerohop-ecg/src/vae). Tensors: any DLPack producer's
# compact CPU tensors (torch's for the job).
@final
class VaeCpu:
    def __new__(
        cls, width: int, *, latent: int = 2, align: int = 16, threads: int = 1
    ) -> VaeCpu: ...
    def shapes(self) -> list[list[int]]: ...
    def offsets(self) -> list[int]: ...
    @property
    def size(self) -> int: ...
    @property
    def threads(self) -> int: ...
    def loss_and_gradients(
        self, values: Any, data: Any, rows: Any, noise: Any, grads: Any
    ) -> float: ...
    def loss(self, values: Any, data: Any, rows: Any, noise: Any) -> float: ...

# One Adam step over flat CPU buffers, in place (the job's zerohop.ecg.adam.Adam on the CPU).
def adam_step(
    values: Any,
    grads: Any,
    mean: Any,
    square: Any,
    count: Any,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
) -> None: ...
