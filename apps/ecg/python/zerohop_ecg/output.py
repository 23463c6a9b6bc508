"""The job's output folder: checked before any work, written only when the whole job succeeds.

Files are made in a private staging folder beside the output folder (same file system, so the
final moves are renames); a failed run removes it and leaves the output folder as it was. The
commit is one rename when the output folder is new; otherwise the previous run's files are
moved aside into a folder of their own, the new ones moved in, and the previous ones removed
last. SIGTERM, SIGINT and SIGHUP wait while that happens, and one that came puts the previous
run back: a job that is stopped leaves the last complete output, never half of two.

Staging folders are named `.OUT.partial-HOST-PID-TAG` and moved-aside ones
`.OUT.previous-HOST-PID-TAG`: a later run on the same host removes those whose process is gone
(SIGKILL leaves them), puts back a previous run whose commit it interrupted, and never touches
a live job's.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from .errors import EcgInputError

#: What a run writes; a new run replaces all of them, so no stale figure outlives its report.
OWN_FILES = ("report.md", "signal_peaks.png", "tachogram.png", "beats.png", "latent.png",
             "decoded_grid.png", "loss.png", "outliers.png", "signal_gates.png", "lengths.png")

#: Written into a moved-aside folder once the new files are all in place: from then on the
#: commit is done, and the folder is only left to remove.
DONE_MARK = ".committed"

#: The signals that wait for a commit to end (the job ends on each of them).
HELD_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _host() -> str:
    """This host's name as it goes into folder names (letters, digits, dots, hyphens)."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _own_name(out: Path, kind: str) -> str:
    return f".{out.name}.{kind}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}"


def _nearest_existing(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return candidate
    return Path.cwd()


def check_writable(out: Path) -> Path:
    """The existing folder in which `out` will be made; refuses a file in its way, a
    symbolic link to nothing on its way, or a folder this process may not write."""
    out = Path(out)
    for candidate in [out, *out.absolute().parents]:
        # A link to nothing does not "exist", so the job would try to make a folder there,
        # after all its work, and fail.
        if candidate.is_symlink() and not candidate.exists():
            raise EcgInputError(f"--out {out}: {candidate} is a symbolic link to "
                                f"{os.readlink(candidate)}, which does not exist")
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


def _is_gone(pid: int) -> bool:
    """Whether no process `pid` runs on this host (one of another user's still runs)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def clean_stale(out: Path) -> list[Path]:
    """Removes the staging folders of `out` left by jobs of this host that are gone, and puts
    back the previous run's files where such a job was stopped in the middle of its commit.
    Returns what it removed."""
    out = Path(out)
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(partial|previous)-(?:(.+)-)?(\d+)-[^-]+")
    removed: list[Path] = []
    places = {out.absolute().parent, *([out.absolute()] if out.is_dir() else [])}
    for place in places:
        try:
            entries = list(place.iterdir())
        except OSError:
            continue
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is None or entry.is_symlink() or not entry.is_dir():
                continue
            kind, host, pid = match.group(1), match.group(2), int(match.group(3))
            if (host is not None and host != _host()) or not _is_gone(pid):
                continue
            if kind == "previous" and not (entry / DONE_MARK).exists():
                _put_back(entry, out)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _put_back(aside: Path, out: Path) -> None:
    """Undoes a commit: the files moved aside go back, the new ones that came in go."""
    for name in OWN_FILES:
        if (aside / name).exists():
            os.replace(aside / name, out / name)
        else:
            (out / name).unlink(missing_ok=True)


@contextlib.contextmanager
def _signals_held(caught: list[int]) -> Iterator[None]:
    """HELD_SIGNALS only noted in `caught` during the block (main thread only: elsewhere the
    job's handlers cannot run anyway); the caller decides, then `_deliver` sends them on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = {s: signal.signal(s, note) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


def _deliver(caught: list[int]) -> None:
    """The first held signal, sent again now that the job's own handler is back (which runs
    as this call returns)."""
    if caught:
        os.kill(os.getpid(), caught[0])


class Staging:
    """``with Staging(out) as s:`` write into ``s.path``, then ``s.commit()``."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path: Path | None = None
        self._base = check_writable(self.out)

    def __enter__(self) -> Staging:
        clean_stale(self.out)
        parent = self.out if self.out.is_dir() else self._base
        # SIGTERM and Ctrl-C raise wherever the main thread is, and while torch is imported
        # on a thread the main one can wait a long time for the interpreter between making
        # the folder and leaving here, outside any `with`. So the folder is named before it
        # is made (this process's, by its pid) and removed on any exception from here on.
        try:
            for _ in range(100):
                self.path = parent / _own_name(self.out, "partial")
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
        """Puts the staged files in the output folder in place of the previous run's, all or
        none: a held signal that came meanwhile undoes it and is then delivered."""
        if self.path is None:
            raise RuntimeError("Staging.commit() outside its `with` block")
        caught: list[int] = []
        with _signals_held(caught):
            if self.out.exists() or not self._rename_whole(caught):
                self._replace_files(caught)
        _deliver(caught)

    def _rename_whole(self, caught: list[int]) -> bool:
        """A new output folder: the staging folder becomes it in one rename. False when the
        output folder appeared meanwhile."""
        assert self.path is not None
        self.out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self.path, self.out)
        except OSError:
            if not self.out.exists():
                raise
            return False
        if caught:
            os.rename(self.out, self.path)  # stopped: as if never committed
        else:
            self.path = None
        return True

    def _replace_files(self, caught: list[int]) -> None:
        """An existing output folder: the previous run's files go aside, the new ones come in,
        and only then does the previous run go."""
        assert self.path is not None
        self.out.mkdir(parents=True, exist_ok=True)
        aside = self.out / _own_name(self.out, "previous")
        aside.mkdir(mode=0o700)
        moved: list[str] = []
        try:
            for name in OWN_FILES:
                if (self.out / name).exists():
                    os.replace(self.out / name, aside / name)
            for item in sorted(self.path.iterdir()):
                os.replace(item, self.out / item.name)
                moved.append(item.name)
            done = not caught
        except BaseException:
            done = False
            raise
        finally:
            if done:
                (aside / DONE_MARK).touch()
            else:  # failed or stopped: the new files back to staging, the previous in place
                for name in moved:
                    os.replace(self.out / name, self.path / name)
                _put_back(aside, self.out)
                os.rmdir(aside)
        shutil.rmtree(aside, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
