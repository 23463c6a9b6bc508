"""The job's inputs as people have them: PhysioNet WFDB records (with their reference beat
annotations when an .atr file sits beside), CSV files (quoted headers, a units row, any of
`,` `;` tab, a time column), synthetic ECG with known R peaks, or the bundled recording.

Every input is checked before any work: a bad argument is an EcgInputError naming it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict, overload

import numpy as np
from numpy.typing import NDArray

import zerohop

from . import (
    RECORD_100,
    csv_header,
    edf_header,
    kernels,
    read_annotations,
    read_csv,
    read_edf,
    read_wfdb,
    synthesize,
)
from .config import EDF_SUFFIXES, Config
from .errors import EcgInputError, MissingCellError
from .recording import (
    CUDA,
    PREFERRED_LEADS,
    RATE_RANGE,
    Input,
    Truth,
    check_device_signal,
    check_shape_of_signal,
    check_signal,
    default_lead,
    fill_missing,
    check_rate,
    is_time_axis,
)
from .text import plain_text

if TYPE_CHECKING:
    from zerohop import Table, Tensor

    from .shared_pool import SharedPool

#: Leading values a time column's rate is read from (see `_rate_from_time`).
TIME_HEAD = 100_000


def require_torch() -> ModuleType:
    """torch (and matplotlib) are the `ecg` extra; say how to get them instead of a traceback."""
    try:
        import torch
    except ImportError:
        raise EcgInputError(
            "the ECG job trains its model with PyTorch, which is not installed: "
            "pip install 'zerohop[ecg]'") from None
    module: ModuleType = torch  # Any to mypy, which does not read torch (tests/typing/mypy.ini)
    return module


def require_job(config: Config) -> ModuleType:
    """What every ECG job needs before any work: torch, matplotlib when drawing, and a CUDA
    device when asked for one. Returns torch."""
    torch = require_torch()
    require_rest_of_job(config)
    return check_torch_device(torch, config)


def require_rest_of_job(config: Config) -> None:
    """`require_job` without importing torch (seconds, which `TorchInBackground`
    spends while the recording is read): matplotlib when drawing, a CUDA device when asked
    for one."""
    if config.plots:
        require_matplotlib()
    if config.device == "cuda":
        import zerohop.cuda

        if not zerohop.cuda.is_available():
            raise EcgInputError("--device cuda: there is no CUDA device on this machine")


def check_torch_device(torch: ModuleType, config: Config) -> ModuleType:
    """torch, once it is known to see the device the job asked for (a CPU-only build does
    not see a GPU that zerohop sees)."""
    if config.device == "cuda" and not torch.cuda.is_available():
        raise EcgInputError("--device cuda: torch sees no CUDA device on this machine")
    return torch


class TorchInBackground:
    """Imports torch and the model's module on a thread (3 s on a GPU machine's host: as long
    as reading a day-long CSV file and detecting its beats on the CPU), then warms the GPU up
    (`vae.warm_up`) when the job runs there."""

    def __init__(self, config: Config, pool: SharedPool | None = None) -> None:
        import threading

        self._config = config
        self._pool = pool
        self._imported = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._load, daemon=True,
                                        name="zerohop-ecg-import-torch")
        self._thread.start()

    def _load(self) -> None:
        try:
            from . import vae
        except BaseException as err:  # noqa: BLE001 - raised again by `ready`
            self._failure.append(err)
            return
        finally:
            if self._pool is not None and not self._failure:
                try:
                    self._pool.install_torch()
                except BaseException as err:  # noqa: BLE001 - raised again by `ready`
                    self._failure.append(err)
            self._imported.set()
        if self._config.device == "cuda":
            try:
                vae.warm_up(self._config.device)
            except Exception:  # noqa: BLE001 - warming up only saves time; training meets
                pass           # the same fault and reports it

    def ready(self) -> ModuleType:
        """torch, once imported; raises what `require_job` would (a missing torch named with
        its install command, a torch that sees no GPU)."""
        self._imported.wait()
        if self._failure and not isinstance(self._failure[0], ImportError):
            raise self._failure[0]
        return check_torch_device(require_torch(), self._config)

    def warmed(self) -> None:
        """Waits for the GPU's warm-up (nothing to wait for on the CPU)."""
        self._thread.join()


def require_matplotlib() -> None:
    """Fails unless matplotlib is installed. Looked up, not imported: importing it (0.1–0.3 s)
    here would delay the start of torch's import, the GPU job's longest stage; the figure
    workers import it, or the job just before it draws."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise EcgInputError(
            "the ECG job draws its figures with matplotlib, which is not installed: "
            "pip install 'zerohop[ecg]' (or pass --no-plots)")


def check_memory(samples: int, what: str) -> None:
    """Refuses, up front, a recording that would not fit in this machine's memory (the ECG
    crate's rule, which `synthesize` applies too)."""
    try:
        kernels.check_memory(max(0, samples), what)
    except ValueError as error:
        raise EcgInputError(str(error).removeprefix("invalid recording: ")) from None
    except OverflowError:
        raise EcgInputError(f"{what}: {samples:,} samples is too many") from None


def _column_by_name_or_index(names: Sequence[str], wanted: str, what: str) -> str:
    if wanted in names:
        return wanted
    if wanted.isdigit() and int(wanted) < len(names):
        return names[int(wanted)]
    listed = ", ".join(repr(n) for n in names)
    raise EcgInputError(f"{what}: no column {wanted!r} (columns: {listed}; or an index from 0)")


def _rate_from_time(values: NDArray[Any], units: str | None) -> float:
    # The mean step over many samples: timestamps rounded to the millisecond step unevenly
    # (2 and 3 ms at 360 Hz), which a median would turn into 333 Hz.
    v = np.asarray(values[:TIME_HEAD], dtype=np.float64)
    step = (v[-1] - v[0]) / (len(v) - 1)
    per_second = (1000.0 if units and units.strip().lower() in ("ms", "msec", "milliseconds")
                  else 1.0)
    rate = per_second / step
    return float(round(rate)) if abs(rate - round(rate)) <= 5e-4 * rate else rate


class _MissingCells(TypedDict, total=False):
    """read_csv's options for missing cells."""

    empty: str
    nan: str


def _read_csv_table(path: Path, delimiter: str, fill: str, on_gpu: bool, where: str,
                    say: Callable[[str], object], columns: list[str]) -> Table:
    """The columns the job needs as a zerohop Table (the others are not parsed, so text
    there is no obstacle); missing cells as NaN unless --fill is "error"."""
    options: _MissingCells = {} if fill == "error" else {"empty": "nan", "nan": "allow"}
    try:
        if on_gpu and fill == "error":
            # Parsed in device memory: only the head of the first column comes back (to tell
            # a time axis and its rate).
            table, report = read_csv(path, columns=columns, delimiter=delimiter,
                                     device="cuda:0", report=True)
            if report["fallback"]:
                say(f"CSV parsed on the host and copied to the GPU: {report['fallback']}")
            return table
        return read_csv(path, columns=columns, delimiter=delimiter, **options)
    except MissingCellError as error:
        raise EcgInputError(f"{where}: {error}; pass --fill interpolate (or --fill zero) "
                            f"to fill missing cells, which the report then lists") from None


def _has_rows(path: Path, first_line: int) -> bool:
    """Whether a non-blank line follows the header (and units row)."""
    import itertools

    with open(path, encoding="utf-8", errors="replace") as f:
        return any(line.strip() for line in itertools.islice(f, first_line - 1, None))


def _one_column_hint(header: Any) -> str:
    """What a file read as one column may really be: a preamble line taken for the header,
    or a delimiter the sniffer does not know."""
    if not header["has_header"]:
        return ""
    name = header["names"][0]
    return (f"; the file reads as one column named {name!r}: if that line comes before the "
            f"header (a preamble), start it with # or remove it; if the file has more "
            f"columns, name their separator with --delimiter")


def _columns_to_read(config: Config, names: Sequence[str], where: str,
                     clock: bool) -> list[str]:
    """The first column (a time axis or not; not with `clock`, read apart) and the lead: the
    one asked for, else lead II by name, else the second column (a lead if the first is time,
    else only read to be told apart)."""
    if config.column is not None:
        lead = _column_by_name_or_index(names, config.column, where)
    else:
        lead = default_lead(names[1:] if clock else names) or names[min(1, len(names) - 1)]
    if clock:
        return [lead]
    return [names[0]] if lead == names[0] else [names[0], lead]


#: A clock time as exports write it: 2026-11-27T10:00:00.004, optionally with a zone.
_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?$")


_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def _clock_times(path: Path, delimiter: str,
                 first_line: int) -> tuple[NDArray[np.float64], float] | None:
    """Seconds since the first row of a first column of ISO 8601 clock times (the first
    TIME_HEAD rows, enough for the rate) and the first row's time of day (seconds after
    midnight, in the file's own zone); None when the first column is not clock times."""
    import itertools

    seconds: list[float] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        rows = itertools.islice(f, first_line - 1, first_line - 1 + TIME_HEAD)
        for row in rows:
            cell = row.split(delimiter, 1)[0].strip().strip("\"'")
            if not _ISO_TIME.match(cell):
                break  # the end of the file's rows, or not clock times at all
            # The zone is the same on every row: the steps do not need it.
            moment = np.datetime64(_ZONE.sub("", cell)[:26].replace(" ", "T"), "us")
            seconds.append(float(moment.astype(np.int64)) / 1e6)
    if not seconds:
        return None
    start = seconds[0]
    return np.asarray(seconds) - start, start % 86400.0


def _time_rate(first: NDArray[Any], units: str | None,
               name: str) -> tuple[float, str | None]:
    """The sampling rate a time column's steps imply, in its stated units, else in seconds, or
    in ms or µs when only those give a rate an ECG has (with a note saying which was assumed)."""
    rate = _rate_from_time(first, units)
    if units:
        return check_rate(rate, f"the time column {name!r} ({units}) implies"), None
    low, high = RATE_RANGE
    for factor, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if low <= rate * factor <= high:
            assumed = None if unit == "s" else (
                f"the time column {name!r} has no units row; its steps read as {unit}")
            return check_rate(rate * factor, "the time column"), assumed
    raise EcgInputError(
        f"the time column {name!r} has steps of {1 / rate:g} (no units row): read as seconds "
        f"that is {rate:g} Hz, as ms {rate * 1e3:g} Hz, as µs {rate * 1e6:g} Hz, none of them "
        f"{low:g} to {high:g} Hz; pass --rate HZ")


def _from_csv(config: Config, say: Callable[[str], object]) -> Input:

    assert config.csv is not None  # load() reads a CSV file only when there is one
    path = Path(config.csv)
    if path.is_dir():
        raise EcgInputError(f"--csv {path}: a directory, not a file (many recordings: "
                            f"--records {path})")
    if not path.is_file():
        raise EcgInputError(f"--csv {path}: no such file")
    where = f"--csv {path}"
    with plain_text(path, where, say, config.encoding) as text:
        try:
            header = csv_header(text, delimiter=config.delimiter)
            names, units = header["names"], header.get("units")
            if not _has_rows(text, header["first_data_line"]):
                raise EcgInputError(f"{where}: a header ({', '.join(map(repr, names))}) "
                                    f"but no rows of data")
            if config.rate is None and len(names) == 1:
                # Only a leading time column could tell the rate; a lone column is none.
                raise EcgInputError(f"{where}: the sampling rate is unknown (no time "
                                    f"column); pass --rate HZ{_one_column_hint(header)}")
            on_gpu = config.device == "cuda"
            # A clock-time first column (ISO 8601) is read here, not by the numeric reader.
            clock = (_clock_times(text, header["delimiter"], header["first_data_line"])
                     if len(names) > 1 else None)
            wanted = _columns_to_read(config, names, where, clock is not None)
            table = _read_csv_table(text, header["delimiter"], config.fill, on_gpu,
                                    where, say, wanted)
        except ValueError as error:
            if "not UTF-8" not in str(error) or config.encoding is not None:
                raise
            raise EcgInputError(f"{error}: a file from Excel on Windows or an older lab system "
                                f"is often cp1252 or latin-1; pass --encoding cp1252 (or "
                                f"latin-1)") from None
    rate = config.rate
    notes: list[str] = []
    # Clock times: seconds since the first row, a time axis like any other.
    first = clock[0] if clock is not None else _head(table, names[0], on_gpu)
    time_unit = "s" if clock is not None else (units[0] if units else None)
    timed = len(names) > 1 and is_time_axis(first)
    if config.column is not None:
        column = _column_by_name_or_index(names, config.column, where)
    elif timed:
        column = default_lead(names[1:]) or names[1]
        say(f"the first column {names[0]!r} is a time axis: using {column!r}")
    else:
        column = default_lead(names) or names[0]
    if timed and column != names[0] and rate is None:
        rate, assumed = _time_rate(first, time_unit, names[0])
        say(f"the sampling rate, {rate:g} Hz, is read from the time column {names[0]!r}")
        if assumed:
            say(f"note: {assumed}; if that is wrong, pass --rate HZ")
            notes.append(assumed)
    elif timed and column != names[0] and rate is not None:
        overridden = _rate_against_time(rate, first, time_unit, names[0], where,
                                        config.rate_overrides_time)
        if overridden:
            say(f"note: {overridden}")
            notes.append(overridden)
    if rate is None:
        raise EcgInputError(f"{where}: the sampling rate is unknown (no time column); pass "
                            f"--rate HZ")
    signal = table[column]
    if config.fill != "error":
        values = np.from_dlpack(signal)
        filled = fill_missing(values, column, config.fill, say)
        if filled:
            notes.append(filled)
        if on_gpu:  # --fill parses on the host: one explicit copy to the device
            signal = zerohop.from_dlpack(values).to("cuda:0")
    host_copy = None
    if on_gpu:
        # With --fill the filled values are the host copy already.
        host_copy = check_device_signal(signal, column, where,
                                         values if config.fill != "error" else None)
        stage = "parse CSV into a zerohop Table in GPU memory"
    else:
        check_signal(np.from_dlpack(signal), column, where)
        stage = "parse CSV into a zerohop Table (all cores)"
    unit = units[names.index(column)] if units else None
    description = f"{path}, lead {column!r}" + "".join(f"; {n}" for n in notes)
    return Input(signal=signal, rate=rate, samples=len(table),
                 description=description, units=unit, truth=None, stage=stage,
                 host_copy=host_copy, start=clock[1] if clock is not None else None)


#: How far --rate may stand from a time column's rate before the file is refused: clocks
#: rounded to the ms at 360 Hz stray by less than this.
RATE_TOLERANCE = 0.01


def _rate_against_time(rate: float, first: NDArray[Any], units: str | None, name: str,
                       where: str, overrides: bool) -> str | None:
    """Refuses a --rate the time column contradicts (a 72 bpm recording read at half its rate
    reports 36 bpm), unless `overrides`; returns the note for the report when it does."""
    try:
        implied, _ = _time_rate(first, units, name)
    except EcgInputError:
        return None  # steps that give no ECG rate: --rate is the only rate there is
    if abs(implied - rate) <= RATE_TOLERANCE * implied:
        return None
    if not overrides:
        raise EcgInputError(
            f"{where}: --rate {rate:g} Hz disagrees with the time column {name!r}, whose "
            f"steps give {implied:g} Hz (durations and heart rates would be off by "
            f"{implied / rate:.3g}×); drop --rate to use the time column, or pass "
            f"--rate-overrides-time to keep {rate:g} Hz")
    return f"--rate {rate:g} Hz overrides the time column {name!r} ({implied:g} Hz)"


def _head(table: Table, name: str, on_gpu: bool) -> NDArray[Any]:
    """The first values of a column as NumPy (copied from the device when it is there)."""
    if not on_gpu:
        return np.from_dlpack(table[name])
    return np.from_dlpack(table.rows(0, min(len(table), TIME_HEAD))[name].to("cpu"))


#: How EDF and BDF files begin: EDF's version field, BDF's 0xFF "BIOSEMI".
_EDF_MAGIC = (b"0       ", b"\xffBIOSEMI")


def kind_of_file(path: Path) -> str:
    """What a recording named on the command line is, by its content: "edf" (EDF/BDF),
    "wfdb" (a record with a header beside it, or the header) or "csv"; a missing path is
    an EcgInputError."""
    if path.suffix == ".hea" or (not path.exists() and Path(f"{path}.hea").is_file()):
        return "wfdb"
    if path.is_dir():
        raise EcgInputError(f"{path}: a directory, not a recording (many recordings: "
                            f"--records {path})")
    if not path.is_file():
        raise EcgInputError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(8)
    if head in _EDF_MAGIC or path.suffix.lower() in EDF_SUFFIXES:
        return "edf"
    return "csv"


def _record_path(record: str | os.PathLike[str]) -> Path:
    record = Path(record)
    return record.with_suffix("") if record.suffix in (".hea", ".dat", ".atr") else record


def _from_wfdb(config: Config, say: Callable[[str], object]) -> Input:

    assert config.wfdb is not None  # load() and _bundled() call this only with a record
    record = _record_path(config.wfdb)
    if not Path(f"{record}.hea").is_file():
        raise EcgInputError(f"--wfdb {config.wfdb}: no header {record}.hea")
    table, header = read_wfdb(record)
    leads = list(header["leads"])
    where = f"--wfdb {record}"
    if config.column is not None:
        lead = _column_by_name_or_index(leads, config.column, where)
    else:
        lead = "MLII" if "MLII" in leads else leads[0]
    rate = float(header["rate"])
    if config.rate is not None and abs(config.rate - rate) > 1e-9 * rate:
        raise EcgInputError(f"{where}: the header says {rate:g} Hz, --rate says {config.rate:g}")
    check_rate(rate, f"{where}: the header's sampling rate")
    signal = table[lead]
    check_signal(np.from_dlpack(signal), lead, where)
    truth: Truth | None = None
    annotations = Path(f"{record}.atr")
    if annotations.is_file():
        ann = read_annotations(annotations)
        beat = np.asarray(ann["is_beat"], dtype=bool)
        truth = Truth(samples=np.asarray(ann["sample"], dtype=np.int64)[beat],
                      symbols=[s for s, b in zip(ann["symbol"], beat) if b],
                      name=f"the reference annotations {annotations.name}")
        say(f"{annotations.name}: {len(truth.samples):,} reference beat annotations")
    units = header["units"][leads.index(lead)]
    return Input(signal=signal, rate=rate, samples=len(table),
                 description=f"WFDB record {record.name}, lead {lead} ({rate:g} Hz)",
                 units=units, truth=truth, stage="read WFDB record into a zerohop Table",
                 start=time_of_day(header.get("base_time")))


def time_of_day(text: str | None) -> float | None:
    """Seconds after midnight of a clock time written HH:MM:SS(.s) or MM:SS (a WFDB base
    time); None for none or for one that does not read as a time of day."""
    if not text:
        return None
    try:
        parts = [float(p) for p in text.strip().split(":")]
    except ValueError:
        return None
    if not 2 <= len(parts) <= 3:
        return None
    hours, minutes, seconds = ([0.0] + parts)[-3:]
    if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 60):
        return None
    return hours * 3600 + minutes * 60 + seconds


def _synthetic(config: Config, say: Callable[[str], object]) -> Input:

    hours = config.synthetic_hours
    assert hours is not None  # load() generates a signal only when asked to
    rate = config.rate or 360.0
    samples = hours * 3600.0 * rate
    check_memory(int(samples), f"--synthetic {hours:g}")
    bpm = config.heart_rate
    swing = f" ± {config.day_swing * 100:g} % over the day" if config.day_swing else ""
    say(f"generating {hours:g} h of synthetic ECG at {rate:g} Hz, {bpm:g} bpm{swing}, "
        f"{config.ectopic * 100:g} % ectopic beats")
    signal, peaks, ectopic = synthesize(hours * 3600.0, rate=rate, heart_rate=bpm,
                                        ectopic=config.ectopic, day_swing=config.day_swing,
                                        seed=config.seed)
    truth = Truth(samples=np.from_dlpack(peaks).astype(np.int64),
                  symbols=["V" if e else "N" for e in ectopic],
                  name="the generator's R peaks")
    return Input(signal=signal, rate=rate, samples=int(signal.shape[0]),
                 description=f"synthetic ECG, {hours:g} h at {bpm:g} bpm", units="mV",
                 truth=truth, stage="generate synthetic ECG (Rust)")


def _bundled(config: Config, say: Callable[[str], object]) -> Input:

    config.wfdb = RECORD_100
    data = _from_wfdb(config, say)
    data.description = (f"MIT-BIH Arrhythmia Database record 100 (bundled), "
                        f"{data.description.split(', ', 1)[1]}")
    return data


def load(config: Config, say: Callable[[str], object]) -> Input:
    """The signal the job runs on, checked."""
    check_rate(config.rate)
    if config.synthetic_hours is not None:
        return _synthetic(config, say)
    if config.csv is not None:
        return _from_csv(config, say)
    if config.edf is not None:
        from .edf_source import from_edf

        return from_edf(config, say)
    if config.wfdb is not None:
        return _from_wfdb(config, say)
    return _bundled(config, say)
