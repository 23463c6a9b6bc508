# The app's extension module (apps/ecg/native): the zerohop-ecg crate's readers and kernels.
# Results come out as DLPack capsules and table parts; `zerohop_ecg.kernels` turns them into
# zerohop tables and tensors through zerohop's public API. scripts/stubtest.sh checks this
# file against the built module.

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias, final, overload

from numpy.typing import NDArray

from .kernels import Annotations, CsvHeader, CsvReport, Params, WfdbInfo

__all__ = [
    "allocate_through", "MissingCellError", "VaeCpu", "adam_step", "assess_quality", "check_memory", "csv_header", "edf_header", "match_beats", "params", "read_annotations",
    "read_csv", "read_edf", "read_wfdb", "score", "segment", "synthesize",
]

_Path: TypeAlias = str | os.PathLike[str]
# (buffer capsule, schema items, rows, alignment): what zerohop.Table.wrap takes.
_TableParts: TypeAlias = tuple[object, list[tuple[Any, ...]], int, int]

def allocate_through(malloc: int, free: int, device: str, follow: bool) -> None: ...
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
    report: Literal[False] = False,
) -> _TableParts: ...
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
) -> tuple[_TableParts, CsvReport]: ...
def csv_header(path: _Path, *, delimiter: str | None = None) -> CsvHeader: ...
def params(rate: float, method: str = "adaptive") -> Params: ...

# A dict of DLPack capsules (the Segmentation's tensors) plus "stream", "method",
# "edge_dropped", "params" and "timings".
def segment(
    signal: object,
    rate: float,
    *,
    method: str = "adaptive",
    device: str = "cpu",
    stream: int | None = None,
    quality: float | None = None,
) -> dict[str, Any]: ...
# "codes" (windows), "figures" (5 × windows: range, clipped, kurtosis, band, correlation) and
# "counts" (2 × windows: starts, beats) as capsules, plus "figure_names", "window",
# "window_s", "reasons", "spans" and "seconds".
def assess_quality(
    signal: object, rate: float, r_peaks: object, *, window: float = 10.0
) -> dict[str, Any]: ...
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
) -> tuple[object, object, list[bool]]: ...
def check_memory(samples: int, what: str) -> None: ...
def score(
    detected: Sequence[float] | NDArray[Any],
    truth: Sequence[int] | NDArray[Any],
    tolerance: float,
    margin: int,
    length: int,
) -> tuple[float, float, int, int, int]: ...
def match_beats(
    detected: Sequence[float] | NDArray[Any],
    truth: Sequence[int] | NDArray[Any],
    tolerance: float,
    margin: int,
    length: int,
) -> tuple[float, float, int, int, int, list[bool]]: ...
def read_wfdb(
    record: _Path, *, leads: str | Iterable[str | int] | None = None
) -> tuple[_TableParts, WfdbInfo]: ...
def read_annotations(path: _Path) -> Annotations: ...
def edf_header(path: _Path) -> dict[str, Any]: ...
def read_edf(
    path: _Path,
    *,
    leads: str | Iterable[str | int] | None = None,
    device: str = "cpu",
    stream: int | None = None,
) -> tuple[_TableParts, dict[str, Any]]: ...
class MissingCellError(ValueError):
    """A cell holds no number (empty, or NaN where NaN is refused)."""

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
