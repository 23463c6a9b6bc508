"""The job's output folder: checked before any work, written only when the whole job succeeds.

Files are made in a private staging folder beside the output folder (same file system, so the
final moves are renames); a failed run removes it and leaves the output folder as it was.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from .errors import EcgInputError

#: What a run writes; a new run replaces all of them, so no stale figure outlives its report.
OWN_FILES = ("report.md", "signal_peaks.png", "tachogram.png", "beats.png", "latent.png",
             "decoded_grid.png", "loss.png", "outliers.png", "signal_gates.png", "lengths.png")


def _nearest_existing(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return candidate
    return Path.cwd()


def check_writable(out: Path) -> Path:
    """The existing folder in which `out` will be made; refuses a file in its way or a folder
    this process may not write."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise EcgInputError(f"--out {out}: exists and is not a folder")
    base = _nearest_existing(out.absolute())
    if not base.is_dir():
        raise EcgInputError(f"--out {out}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise EcgInputError(f"--out {out}: {base} is not writable")
    # access() answers yes to root whatever the mode, and knows nothing of pseudo file systems
    # or quotas: a real folder made and removed is the only answer that holds.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".zerohop-probe-", dir=base))
    except OSError as error:
        raise EcgInputError(f"--out {out}: {base} is not writable ({error.strerror})") from None
    return base


class Staging:
    """``with Staging(out) as s:`` write into ``s.path``, then ``s.commit()``."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path: Path | None = None
        self._base = check_writable(self.out)

    def __enter__(self) -> Staging:
        parent = self.out if self.out.is_dir() else self._base
        # SIGTERM and Ctrl-C raise wherever the main thread is, and while torch is imported
        # on a thread the main one can wait a long time for the interpreter between making
        # the folder and leaving here, outside any `with`. So the folder is named before it
        # is made (this process's, by its pid) and removed on any exception from here on.
        try:
            for _ in range(100):
                self.path = parent / (f".{self.out.name}.partial-{os.getpid()}-"
                                      f"{secrets.token_hex(4)}")
                try:
                    self.path.mkdir(mode=0o700)
                    return self
                except FileExistsError:
                    self.path = None  # not ours: never removed
                    continue
            raise FileExistsError(f"--out {self.out}: no free name for a staging folder "
                                  f"in {parent}")
        except BaseException:
            self.__exit__()
            raise

    def commit(self) -> None:
        """Moves every staged file into the output folder, replacing the ones a run writes."""
        if self.path is None:
            raise RuntimeError("Staging.commit() outside its `with` block")
        self.out.mkdir(parents=True, exist_ok=True)
        for name in OWN_FILES:
            (self.out / name).unlink(missing_ok=True)
        for item in sorted(self.path.iterdir()):
            os.replace(item, self.out / item.name)

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
