"""The job's configuration: `Config` (every option of a run, one recording or many),
`RecordOptions` (what a worker needs for each record of many) and the constants the stages
share (EC57 scoring window, the few-beats threshold, the energy the figures keep).

Plain values only, and no import of the app's other modules: every other module may import
this one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: AAMI EC57 scoring: a detection matches a reference beat within ±150 ms, and the first and
#: last 5 s of a recording are not scored.
TOLERANCE_S = 0.150
MARGIN_S = 5.0
#: Below this many beats the model is still trained, with a warning in the output and the
#: report: its latent space and outlier ranking say little about so few beats.
FEW_BEATS = 50
#: The figure of the recording's start draws its first 8 s; the job keeps this much of the
#: detector's energy for it and frees the rest before training.
ENERGY_SHOWN_S = 10.0

#: The names EDF and BDF files go by (`.rec`: older sleep-lab exports).
EDF_SUFFIXES = (".edf", ".bdf", ".rec")


@dataclass
class Config:
    out: Path = Path("out/ecg")
    csv: Path | None = None
    wfdb: Path | None = None
    #: An EDF, EDF+ or BDF(+) file.
    edf: Path | None = None
    rate: float | None = None
    #: With a CSV time column: keep `rate` even where the column's steps say otherwise.
    rate_overrides_time: bool = False
    #: The CSV file's text encoding when it is not UTF-8 (or UTF-16/32 with a BOM): "cp1252",
    #: "latin-1", ... (None: UTF-8).
    encoding: str | None = None
    column: str | None = None
    delimiter: str | None = None
    #: Missing or non-numeric cells of the ECG column: "error", "interpolate" or "zero".
    fill: str = "error"
    synthetic_hours: float | None = None
    heart_rate: float = 70.0
    ectopic: float = 0.0
    #: Synthetic: how far the mean heart rate swings over a day (0.25: ±25 %).
    day_swing: float = 0.0
    method: str = "adaptive"
    device: str = "cpu"
    epochs: int = 30
    #: The largest training batch; None: vae.default_batch (1024 on the CPU, up to 4096 on a
    #: GPU).
    batch_size: int | None = None
    #: Adam's learning rate for batches up to vae.LR_BATCH beats (larger: × √(batch / LR_BATCH)).
    lr: float = 2e-3
    threads: int | None = None
    #: On a GPU, each training step replays one captured CUDA graph (False: eager steps).
    cuda_graph: bool = True
    #: On a GPU, the reader, zerohop's kernels and torch (its CUDA graphs too) draw from one
    #: zerohop pool (shared_pool.py; False: torch keeps its own allocator).
    shared_pool: bool = True
    #: Training steps compiled by torch.compile: fewer, fused kernels after a compilation of
    #: tens of seconds, for long runs and several GPUs.
    fuse: bool = False
    #: On the CPU, each training step's loss and gradients come from zerohop's kernels
    #: (vae.cpu_pass; False: torch's autograd).
    cpu_kernels: bool = True
    #: Under torchrun, each rank trains on a whole batch (False: the ranks share one out).
    batch_per_rank: bool = False
    #: Held-out beats the loss is measured on after each epoch to decide when training
    #: stops (None: vae.MONITORED_BEATS; 0: all of them).
    monitored: int | None = None
    seed: int = 42
    progress: bool | str = True  # a bar; "lines": a line every few seconds; False: none
    plots: bool = True
    # Many recordings (batch.py): where, and on what.
    records: str | None = None
    workers: int = 1
    ray: str | None = None
    dask: str | None = None
    stop_on_error: bool = False
    #: Seconds a record may take under --workers before its worker is stopped (None: 2 min
    #: plus 30 s per MiB of the record's files).
    record_timeout: float | None = None
    #: Engines' own logs (Dask's worker deaths and task tracebacks) as well as the job's lines.
    verbose: bool = False


@dataclass(frozen=True)
class RecordOptions:
    """What every worker needs besides the record's path (plain values: it is pickled)."""

    method: str = "adaptive"
    column: str | None = None
    rate: float | None = None
    delimiter: str | None = None
    fill: str = "error"
    #: The boot id of the machine the rows go to; a worker on that machine puts them in shared
    #: memory, any other keeps them in its own memory for the transport to carry.
    shared_on: str | None = None
    #: The process that runs the job: the fault-injection switch never fires there.
    job_pid: int | None = None

    def record_config(self, path: Path) -> Config:
        """The configuration that reads the record at `path` (a CSV file, an EDF/BDF file or
        a WFDB header)."""
        is_csv = path.suffix == ".csv"
        is_edf = path.suffix.lower() in EDF_SUFFIXES
        return Config(rate=self.rate if is_csv else None, column=self.column,
                      delimiter=self.delimiter, fill=self.fill,
                      csv=path if is_csv else None, edf=path if is_edf else None,
                      wfdb=None if is_csv or is_edf else path.with_suffix(""))


__all__ = ["EDF_SUFFIXES", "ENERGY_SHOWN_S", "FEW_BEATS", "MARGIN_S", "TOLERANCE_S", "Config", "RecordOptions"]
