"""EDF, EDF+ and BDF(+) recordings as the job's input: the lead chosen by label (lead II,
else the first ECG/EKG signal), the file's own rate and start time, its beat annotations as
the reference, EDF+D gaps filled or refused by name, on the host or straight into GPU memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import zerohop

from . import edf_header, read_edf
from .config import Config
from .errors import EcgInputError
from .recording import (
    Input,
    Truth,
    check_device_signal,
    check_rate,
    check_signal,
    default_lead,
    fill_missing,
)
from .report import clock

#: Labels that name an ECG signal in EDF files from Holter recorders and sleep labs ("ECG",
#: "EKG II", "ECG1", "ECG L-R").
_ECG_LABEL = re.compile(r"\b(ecg|ekg)", re.IGNORECASE)


def choose_lead(labels: Sequence[str], wanted: str | None, where: str) -> str:
    """The signal to read: the one asked for (label, case-insensitive, or index), else lead
    II by label, else the first ECG/EKG signal, else the only signal there is."""
    listed = ", ".join(repr(x) for x in labels)
    if wanted is not None:
        for label in labels:
            if label == wanted or label.lower() == wanted.strip().lower():
                return label
        if wanted.isdigit() and int(wanted) < len(labels):
            return labels[int(wanted)]
        raise EcgInputError(f"{where}: no signal {wanted!r} (signals: {listed}; or an index "
                            f"from 0)")
    preferred = default_lead(labels) or next(
        (x for x in labels if x.lower() in ("ecg ii", "ekg ii", "ecg2", "ekg2", "ecg 2")), None)
    if preferred is not None:
        return preferred
    ecg = [x for x in labels if _ECG_LABEL.search(x)]
    if ecg:
        return ecg[0]
    if len(labels) == 1:
        return labels[0]
    raise EcgInputError(f"{where}: no signal labelled as an ECG (signals: {listed}); choose "
                        f"one with --column")


def _gap_error(gaps: Sequence[tuple[int, int, float]], rate: float, day_start: float | None,
               where: str) -> EcgInputError:
    """The refusal of an EDF+D file's gaps, naming the first: its clock time when the file
    gives the start (`day_start`: the header's time of day, in seconds), and its time from the
    start."""
    sample, samples, onset = gaps[0]
    at = f"{clock(onset)} from the start"
    if day_start is not None:
        at = f"{clock((day_start + onset) % 86400.0)} ({at})"
    total = sum(g[1] for g in gaps) / rate
    return EcgInputError(
        f"{where}: an EDF+D file with {len(gaps)} gap(s) between its records, "
        f"{total:g} s in all; the first at {at}, lasting {samples / rate:g} s (sample "
        f"{sample:,}); pass --fill interpolate (or --fill zero) to fill them, which the report "
        f"then lists")


def _start_of_day(header: dict[str, Any], first_onset: float) -> float | None:
    start = header.get("start_time")
    return None if start is None else (float(start) + first_onset) % 86400.0


def from_edf(config: Config, say: Callable[[str], object]) -> Input:
    assert config.edf is not None  # load() calls this only with a file
    path = Path(config.edf)
    where = f"--edf {path}"
    if path.is_dir():
        raise EcgInputError(f"{where}: a directory, not a file (many recordings: "
                            f"--records {path})")
    if not path.is_file():
        raise EcgInputError(f"{where}: no such file")
    try:
        header = edf_header(path)
    except ValueError as error:
        raise EcgInputError(f"{where}: {error}") from None
    signals = [s for s in header["signals"] if not s["annotations"]]
    labels = [s["label"] for s in signals]
    lead = choose_lead(labels, config.column, where)
    rate = float(signals[labels.index(lead)]["rate"])
    if config.rate is not None and abs(config.rate - rate) > 1e-9 * rate:
        raise EcgInputError(f"{where}: signal {lead!r} is recorded at {rate:g} Hz, --rate "
                            f"says {config.rate:g}")
    check_rate(rate, f"{where}: signal {lead!r}'s sampling rate")
    on_gpu = config.device == "cuda"
    # With gaps to fill the values are filled on the host anyway: read there.
    fills_gaps = header["format"].endswith("+D") and config.fill != "error"
    try:
        table, info = read_edf(path, leads=[lead],
                               device="cuda:0" if on_gpu and not fills_gaps else "cpu")
    except ValueError as error:
        raise EcgInputError(f"{where}: {error}") from None
    if info["fallback"]:
        say(f"EDF read on the host and copied to the GPU: {info['fallback']}")
    name = info["leads"][0]
    start = _start_of_day(info, info["first_onset"])
    notes: list[str] = []
    if info["truncated"] is not None:
        note = (f"the file holds {info['records_read']:,} whole data records of the "
                f"{info['truncated']:,} its header declares (a copy cut short?); read those")
        say(f"note: {note}")
        notes.append(note)
    signal = table[name]
    values = None
    if info["gaps"]:
        if config.fill == "error":
            raise _gap_error(info["gaps"], rate, info.get("start_time"), where)
        values = np.from_dlpack(signal)
        filled = fill_missing(values, name, config.fill, say)
        if filled:
            notes.append(f"{len(info['gaps'])} EDF+D gap(s): {filled}")
        if on_gpu:
            signal = zerohop.from_dlpack(values).to("cuda:0")
    host_copy = None
    if on_gpu:
        host_copy = check_device_signal(signal, name, where, values)
        stage = "read EDF into a zerohop Table in GPU memory"
    else:
        check_signal(np.from_dlpack(signal), name, where)
        stage = "read EDF into a zerohop Table (all cores)"
    beats = info["beats"]
    truth = None
    if len(beats["sample"]):
        truth = Truth(samples=np.asarray(beats["sample"], dtype=np.int64),
                      symbols=list(beats["symbol"]),
                      name=f"the file's beat annotations ({info['format']})")
        say(f"{path.name}: {len(truth.samples):,} beat annotations in the file")
    description = (f"{path}, {info['format']} signal {name!r} ({rate:g} Hz)"
                   + "".join(f"; {n}" for n in notes))
    return Input(signal=signal, rate=rate, samples=len(table), description=description,
                 units=info["units"][0] or None, truth=truth, stage=stage,
                 host_copy=host_copy, start=start)


__all__ = ["choose_lead", "from_edf"]
