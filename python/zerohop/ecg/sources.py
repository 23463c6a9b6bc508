"""The job's inputs as people have them: PhysioNet WFDB records (with their reference beat
annotations when an .atr file sits beside), CSV files (quoted headers, a units row, any of
`,` `;` tab, a time column), synthetic ECG with known R peaks, or the bundled recording.

Every input is checked before any work: a bad argument is an EcgInputError naming it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import zerohop

from .errors import EcgInputError

RATE_RANGE = (50.0, 100_000.0)
#: DLPack's device type of CUDA memory.
CUDA = 2
#: Leading values a time column's rate is read from (see `_rate_from_time`).
TIME_HEAD = 100_000
#: Bytes of memory the job needs per sample (signal, curvature, energy, scratch, beat rows).
BYTES_PER_SAMPLE = 32


@dataclass
class Truth:
    """Reference beats: sample indices and their annotation symbols (N, V, A, …)."""

    samples: np.ndarray
    symbols: list
    name: str


@dataclass
class Input:
    signal: object  # a 1-d float32 zerohop tensor (a column of a zerohop Table)
    rate: float
    samples: int
    description: str
    units: str | None
    truth: Truth | None
    stage: str

    def numpy_signal(self):
        """The signal as NumPy: a view on the host, a copy from device memory."""
        if self.signal.__dlpack_device__()[0] == CUDA:
            import torch

            return torch.from_dlpack(self.signal).cpu().numpy()
        return np.from_dlpack(self.signal)


def require_torch():
    """torch (and matplotlib) are the `ecg` extra; say how to get them instead of a traceback."""
    try:
        import torch
    except ImportError:
        raise EcgInputError(
            "the ECG job trains its model with PyTorch, which is not installed: "
            "pip install 'zerohop[ecg]'") from None
    return torch


def require_job(config):
    """What every ECG job needs before any work: torch, matplotlib when drawing, and a CUDA
    device when asked for one. Returns torch."""
    torch = require_torch()
    if config.plots:
        require_matplotlib()
    if config.device == "cuda" and not torch.cuda.is_available():
        raise EcgInputError("--device cuda: torch sees no CUDA device on this machine")
    return torch


def require_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise EcgInputError(
            "the ECG job draws its figures with matplotlib, which is not installed: "
            "pip install 'zerohop[ecg]' (or pass --no-plots)") from None


def check_rate(rate, what="--rate"):
    if rate is None:
        return None
    low, high = RATE_RANGE
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and low <= rate <= high):
        raise EcgInputError(f"{what} {rate}: a sampling rate is {low:g} to {high:g} Hz")
    return float(rate)


def check_memory(samples, what):
    """Refuses, up front, a recording that would not fit in this machine's memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    need = samples * BYTES_PER_SAMPLE
    if need > total // 2:
        raise EcgInputError(
            f"{what}: {samples:,} samples need about {need / 2**30:.1f} GiB, more than half of "
            f"this machine's {total / 2**30:.1f} GiB")


def _column_by_name_or_index(names, wanted, what):
    if wanted in names:
        return wanted
    if wanted.isdigit() and int(wanted) < len(names):
        return names[int(wanted)]
    listed = ", ".join(repr(n) for n in names)
    raise EcgInputError(f"{what}: no column {wanted!r} (columns: {listed}; or an index from 0)")


def is_time_axis(values):
    """Strictly increasing at a steady step over the first 1000 values: a time column."""
    v = np.asarray(values[:1000], dtype=np.float64)
    if len(v) < 3:
        return False
    steps = np.diff(v)
    median = float(np.median(steps))
    return bool(median > 0 and (steps > 0).all()
                and ((steps > 0.5 * median) & (steps < 1.5 * median)).all())


def _rate_from_time(values, units):
    # The mean step over many samples: timestamps rounded to the millisecond step unevenly
    # (2 and 3 ms at 360 Hz), which a median would turn into 333 Hz.
    v = np.asarray(values[:TIME_HEAD], dtype=np.float64)
    step = (v[-1] - v[0]) / (len(v) - 1)
    per_second = 1000.0 if units and units.strip().lower() in ("ms", "msec", "milliseconds") else 1.0
    rate = per_second / step
    return float(round(rate)) if abs(rate - round(rate)) <= 5e-4 * rate else rate


def _check_signal(values, column, where):
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if len(finite) else (None, None)
    _check_shape_of_signal(low, high, values, column, where)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise EcgInputError(
            f"{where}: column {column!r} has {len(bad)} missing or non-finite sample(s), the "
            f"first at sample {bad[0]}; fill or drop them first")


def _check_shape_of_signal(low, high, head, column, where):
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


def _from_csv(config, say):
    from . import csv_header, read_csv

    path = Path(config.csv)
    if not path.is_file():
        raise EcgInputError(f"--csv {path}: no such file")
    header = csv_header(path, delimiter=config.delimiter)
    names, units = header["names"], header.get("units")
    where = f"--csv {path}"
    if config.column is not None:
        column = _column_by_name_or_index(names, config.column, where)
    else:
        column = names[0]
    if config.rate is None and (len(names) == 1 or config.column is not None):
        # Only a leading time column could tell the rate; there is none to use.
        raise EcgInputError(f"{where}: the sampling rate is unknown; pass --rate HZ")
    on_gpu = config.device == "cuda"
    if on_gpu:
        # Parsed in device memory: only the head of the first column comes back (to tell a
        # time axis and its rate).
        table, report = read_csv(path, delimiter=header["delimiter"], device="cuda:0",
                                 report=True)
        if report["fallback"]:
            say(f"CSV parsed on the host and copied to the GPU: {report['fallback']}")
    else:
        table = read_csv(path, delimiter=header["delimiter"])
    rate = config.rate
    first = _head(table[names[0]], on_gpu)
    if config.column is None and len(names) > 1 and is_time_axis(first):
        column = names[1]
        first_units = units[0] if units else None
        note = f"the first column {names[0]!r} is a time axis: using {column!r}"
        if rate is None:
            rate = check_rate(_rate_from_time(first, first_units), f"the time column {names[0]!r} implies")
            note += f", at {rate:g} Hz from its steps"
        say(note)
    if rate is None:
        raise EcgInputError(f"{where}: the sampling rate is unknown; pass --rate HZ")
    signal = table[column]
    if on_gpu:
        _check_device_signal(signal, column, where)
        stage = "parse CSV into a zerohop Table in GPU memory"
    else:
        _check_signal(np.from_dlpack(signal), column, where)
        stage = "parse CSV into a zerohop Table (all cores)"
    unit = units[names.index(column)] if units else None
    return Input(signal=signal, rate=rate, samples=len(table),
                 description=f"{path}, column {column!r}", units=unit, truth=None, stage=stage)


def _head(column, on_gpu):
    """The first values of a column as NumPy (copied from the device when it is there)."""
    if not on_gpu:
        return np.from_dlpack(column)
    import torch

    return torch.from_dlpack(column)[:TIME_HEAD].cpu().numpy()


def _check_device_signal(signal, column, where):
    """`_check_signal` for a column in device memory, reading back two numbers and a head.
    Non-finite values never get here: the reader refuses them (nan="reject", empty="error")."""
    import torch

    t = torch.from_dlpack(signal)
    low, high = (float(v) for v in torch.aminmax(t)) if len(t) else (None, None)
    _check_shape_of_signal(low, high, t[:1000].cpu().numpy(), column, where)


def _record_path(record):
    record = Path(record)
    return record.with_suffix("") if record.suffix in (".hea", ".dat", ".atr") else record


def _from_wfdb(config, say):
    from . import read_annotations, read_wfdb

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
    _check_signal(np.from_dlpack(signal), lead, where)
    truth = None
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
                 units=units, truth=truth, stage="read WFDB record into a zerohop Table")


def _synthetic(config, say):
    from . import synthesize

    hours = config.synthetic_hours
    rate = config.rate or 360.0
    samples = hours * 3600.0 * rate
    check_memory(int(samples), f"--synthetic {hours:g}")
    bpm = config.heart_rate
    say(f"generating {hours:g} h of synthetic ECG at {rate:g} Hz, {bpm:g} bpm, "
        f"{config.ectopic * 100:g} % ectopic beats")
    signal, peaks, ectopic = synthesize(hours * 3600.0, rate=rate, heart_rate=bpm,
                                        ectopic=config.ectopic, seed=config.seed)
    truth = Truth(samples=np.from_dlpack(peaks).astype(np.int64),
                  symbols=["V" if e else "N" for e in ectopic],
                  name="the generator's R peaks")
    return Input(signal=signal, rate=rate, samples=int(signal.shape[0]),
                 description=f"synthetic ECG, {hours:g} h at {bpm:g} bpm", units="mV",
                 truth=truth, stage="generate synthetic ECG (Rust)")


def _bundled(config, say):
    from . import RECORD_100

    config.wfdb = RECORD_100
    data = _from_wfdb(config, say)
    data.description = (f"MIT-BIH Arrhythmia Database record 100 (bundled), "
                        f"{data.description.split(', ', 1)[1]}")
    return data


def load(config, say) -> Input:
    """The signal the job runs on, checked."""
    check_rate(config.rate)
    if config.synthetic_hours is not None:
        return _synthetic(config, say)
    if config.csv is not None:
        return _from_csv(config, say)
    if config.wfdb is not None:
        return _from_wfdb(config, say)
    return _bundled(config, say)
