"""One recording of many: finding the recordings, and the work a worker process does on each
(read, detect, cut beat rows) before it hands the rows back without copying them.

A worker puts the rows where its transport can share them: in `zerohop.memory.Shared` memory
for local processes and Dask workers on this machine (the pickle then holds a handle, and the
receiver maps the same pages), or in its own memory for Ray, whose object store takes them as an
out-of-band buffer that every reader maps read-only.
"""

from __future__ import annotations

import glob
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from . import segment, sources
from .config import EDF_SUFFIXES
from .config import RecordOptions as RecordOptions  # re-exported: bench/ecg_records.py
from .detection import accuracy, check_detection
from .errors import EcgInputError
from .outliers import own_beat_span, prematurity
from .quality import WINDOW_S, Quality
from .report import Accuracy

if TYPE_CHECKING:
    from zerohop.memory import Resource

    from zerohop import Tensor

#: Fault injection for the tests: a worker that reaches the record of this name kills itself
#: with SIGKILL, as the kernel's OOM killer would.
KILL_SWITCH = "ZEROHOP_ECG_KILL_WORKER_ON"
#: ... one that reaches the record of this name stops itself with SIGSTOP (hung for good).
STOP_SWITCH = "ZEROHOP_ECG_STOP_WORKER_ON"


def boot_id() -> str | None:
    """This machine's boot id (Linux), or None: shared memory is only for the same boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


@dataclass
class RecordBeats:
    """One record's beat rows (a zerohop tensor, rows × width) and what the report needs."""

    index: int
    name: str
    description: str
    rate: float
    samples: int
    #: None in the copies torchrun's ranks exchange (batch.py): they carry no rows.
    beats: Tensor | None
    rows: int
    width: int
    beat_peaks: NDArray[np.int64]
    detected: int
    bpm: float
    accuracy: Accuracy | None
    seconds: float
    worker: str
    #: Under Ray: the node that made the rows, and the bytes Ray moved between nodes to bring
    #: them to the job (0 when they were made on the job's own node).
    node: str | None = None
    transferred: int = 0
    #: Per row, whether its beat lies in reliable signal (`quality`); None: every row does.
    reliable: NDArray[np.bool_] | None = None
    #: The share of the recording's time in reliable windows.
    reliable_fraction: float = 1.0
    #: Per row, the columns of its own part of the window (`outliers.own_beat_span`), and how
    #: early its beat came (`outliers.prematurity`): what the job's outlier score needs.
    own_span: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None
    prematurity: NDArray[np.float64] | None = None

    @property
    def kept(self) -> NDArray[np.int64] | None:
        """The rows trained on and ranked (those in reliable signal); None: every row."""
        return None if self.reliable is None else np.flatnonzero(self.reliable)

    def kept_of(self, values: NDArray[Any]) -> NDArray[Any]:
        """`values` (one per row) for the rows trained on."""
        kept = self.kept
        return values if kept is None else values[kept]

    @property
    def trained_rows(self) -> int:
        return self.rows if self.reliable is None else int(np.count_nonzero(self.reliable))


@dataclass
class RecordFailure:
    index: int
    name: str
    error: str


#: The files a folder of recordings is read from: WFDB headers, CSV files, EDF/BDF files.
_RECORDING_SUFFIXES = (".hea", ".csv", *EDF_SUFFIXES)


def _is_recording(path: Path) -> bool:
    return path.suffix.lower() in _RECORDING_SUFFIXES


def record_name(path: Path) -> str:
    return path.with_suffix("").name if _is_recording(path) else path.name


def find_records(spec: str) -> list[Path]:
    """The recordings `spec` names: a folder (its WFDB headers `*.hea`, CSV files and EDF/BDF
    files), a glob (`data/*.hea`, `**` for subfolders), or one file; sorted, each once."""
    path = Path(spec)
    if path.is_dir():
        found = [p for p in path.iterdir() if _is_recording(p)]
    else:
        found = [Path(p) for p in glob.glob(spec, recursive=True)]
        # A record named by any of its files, or by its path without extension.
        found = [p.with_suffix(".hea") if p.suffix in (".dat", ".atr") else p for p in found]
        if not found and Path(f"{spec}.hea").is_file():
            found = [Path(f"{spec}.hea")]
    records = sorted({p for p in found if _is_recording(p) and p.is_file()})
    if not records:
        raise EcgInputError(f"--records {spec}: no WFDB headers (*.hea), EDF/BDF or CSV "
                            f"files there")
    return records


#: Shared memory for the rows of every record this process makes for a job on this machine
#: (made at the first such record). Monotonic: the job maps one segment per chunk, not one per
#: record (a descriptor each), and a result freed here once the job mapped it is never written
#: over, so workers need not hold what they sent.
_ROWS_MEMORY: Resource | None = None
ROWS_CHUNK = 64 << 20


def _memory_for_rows(options: RecordOptions) -> None:
    global _ROWS_MEMORY
    import zerohop.memory as zm

    if options.shared_on is not None and options.shared_on == boot_id():
        if _ROWS_MEMORY is None:
            _ROWS_MEMORY = zm.Monotonic(zm.Shared(), chunk=ROWS_CHUNK)
        zm.set_current(_ROWS_MEMORY)
    else:
        zm.reset_current()


def process_record(index: int, path: str | os.PathLike[str],
                   options: RecordOptions) -> RecordBeats:
    """Reads one recording, detects its beats and cuts their rows (runs in a worker)."""
    begun = time.perf_counter()
    path = Path(path)
    name = record_name(path)
    if os.getpid() != options.job_pid:
        import signal

        if os.environ.get(KILL_SWITCH) == name:
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get(STOP_SWITCH) == name:
            os.kill(os.getpid(), signal.SIGSTOP)
    data = sources.load(options.record_config(path), say=lambda *_: None)
    _memory_for_rows(options)
    try:
        seg = segment(data.signal, data.rate, method=options.method, quality=WINDOW_S)
    finally:
        import zerohop.memory as zm

        zm.reset_current()
    r_peaks = np.from_dlpack(seg["r_peaks"])
    # A recording without a reliable window fails as a record, with the reason; elsewhere
    # only beats in reliable signal count (the rate here, training and ranking in the job).
    judged = Quality(seg["quality"], data.rate, data.samples)
    if judged.reliable_windows == 0:
        raise EcgInputError(judged.nothing_reliable(data.description))
    bpm = check_detection(r_peaks[judged.reliable(r_peaks)], data.description, data.rate)
    scored = (accuracy(r_peaks, data.truth, data.rate, data.samples)
              if data.truth is not None else None)
    beat_peaks = np.array(np.from_dlpack(seg["beat_peaks"]), dtype=np.int64)
    reliable = judged.reliable(beat_peaks)
    width = int(seg["beats"].shape[1])
    own_span = own_beat_span(beat_peaks, r_peaks, data.rate, seg["params"]["before"], width)
    return RecordBeats(
        index=index, name=name, description=data.description, rate=data.rate,
        samples=data.samples, beats=seg["beats"], rows=int(seg["beats"].shape[0]),
        width=int(seg["beats"].shape[1]), beat_peaks=beat_peaks,
        detected=len(r_peaks), bpm=bpm, accuracy=scored,
        seconds=time.perf_counter() - begun, worker=f"pid {os.getpid()} on {socket.gethostname()}",
        reliable=None if reliable.all() else reliable,
        reliable_fraction=judged.reliable_fraction(), own_span=own_span,
        prematurity=prematurity(beat_peaks, r_peaks))


def where_it_lives(address: int) -> str:
    """What memory `address` lies in, from this process's memory map (Linux): a shared-memory
    segment zerohop mapped, Ray's object store, or this process's own memory."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= address < end:
                    name = fields[5].strip() if len(fields) > 5 else ""
                    if "memfd:" in name:
                        return "shared memory"
                    if "plasma" in name or "/dev/shm/" in name:
                        return "Ray object store"
                    return "process memory"
    except OSError:
        pass
    return "unknown"
