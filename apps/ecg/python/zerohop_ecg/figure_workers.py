"""The figures drawn in worker processes beside the job, when the machine has cores to spare.

matplotlib draws on the interpreter's thread (threads would take turns), so on a machine with
cores to spare the job starts a few processes as it begins: each imports matplotlib while the
job reads the recording and imports torch, and the figures are then drawn side by side, the
ones that need no model as soon as the beats are known (on the GPU, while the job trains).
On a small machine the job draws them itself, after training, as before. The inputs a
figure draws (a few MB for a day-long record) are pickled to its worker: the report counts
them among the copies.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from . import plots


def figure_workers(cores: int) -> int:
    """How many figure workers a machine of `cores` cores gets: none below 4 (the job's own
    threads need them), 2 below 8, else 4 (seven figures, the slowest ~0.25 s)."""
    if cores < 4:
        return 0
    return 2 if cores < 8 else 4


def _start_worker() -> None:
    """Each worker imports pyplot once, as it starts. Ctrl-C reaches the whole process group:
    the job handles it and shuts the workers down, which must not print tracebacks of their
    own meanwhile."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    plots.use_agg()
    import matplotlib.pyplot  # noqa: F401


def _nbytes(data: dict[str, Any]) -> int:
    return sum(v.nbytes for v in data.values() if isinstance(v, np.ndarray))


class Drawing:
    """Draws the job's figures into `out`: in `workers` processes, or in this process (with
    matplotlib imported on a thread meanwhile) when `workers` is 0 or they cannot start."""

    def __init__(self, out: Path, workers: int) -> None:
        self.out = out
        self.workers = 0
        self.pickled_bytes = 0
        #: The figures this process drew itself (all of them without workers).
        self.drawn_here: list[str] = []
        self._futures: dict[str, Future[Path]] = {}
        self._here: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, dict[str, Any]] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._imported: Callable[[], None] | None = None
        if workers > 0:
            try:
                import multiprocessing

                self._pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker)
                # One no-op each: the pool starts a process per task while none is idle.
                for _ in range(workers):
                    self._pool.submit(int)
                self.workers = workers
            except OSError:  # no processes to be had: draw here
                self._pool = None

    def import_here(self) -> None:
        """Without workers, starts importing matplotlib on a thread (call it once torch is
        imported: imported side by side, the two took turns with the interpreter)."""
        if self._pool is None and self._imported is None:
            self._imported = plots.import_in_background()

    def submit(self, figures: dict[str, dict[str, Any]]) -> None:
        """Queues figures ({name: inputs}) to be drawn."""
        for name, data in figures.items():
            self._inputs[name] = data
            if self._pool is None:
                self._here[name] = data
                continue
            try:
                self._futures[name] = self._pool.submit(plots.draw, name, self.out, data)
                self.pickled_bytes += _nbytes(data)
            except BrokenProcessPool:
                self._here[name] = data

    def finish(self) -> dict[str, Path]:
        """Waits for every figure and returns {name: path} in the report's order. A worker
        that died leaves its figures to this process; an error in a figure's drawing is
        raised here."""
        paths: dict[str, Path] = {}
        for name, future in self._futures.items():
            try:
                paths[name] = future.result()
            except BrokenProcessPool:
                self._here[name] = self._inputs[name]
        self._futures.clear()
        self.close()
        if self._here:
            self.import_here()
            assert self._imported is not None
            self._imported()
            for name, data in self._here.items():
                paths[name] = plots.draw(name, self.out, data)
                self.drawn_here.append(name)
            self._here.clear()
        return {name: paths[name] for name in plots.FIGURES if name in paths}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
