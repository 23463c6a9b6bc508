"""The job's staging folder: nothing of it outlives an interrupted or failed run, and it never
touches a folder that is not its own."""

import os
from pathlib import Path

import pytest

from zerohop_ecg import output
from zerohop_ecg.output import Staging


def staged(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(".out.partial-*"))


def test_an_interrupt_just_after_the_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    # SIGTERM or Ctrl-C raise where the main thread is: here, inside __enter__, before
    # the `with` would clean up.
    made = Path.mkdir

    def mkdir_then_interrupted(self: Path, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", mkdir_then_interrupted)
    staging = Staging(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        with staging:
            pytest.fail("the block ran")
    assert staged(tmp_path) == [] and not (tmp_path / "out").exists()


def test_a_folder_of_the_same_name_is_skipped_and_left_alone(tmp_path, monkeypatch):
    names = iter(["taken", "free"])
    monkeypatch.setattr(output.secrets, "token_hex", lambda n: next(names))

    theirs = tmp_path / f".out.partial-{output._host()}-{os.getpid()}-taken"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("not the job's")
    with Staging(tmp_path / "out") as staging:
        assert staging.path is not None and staging.path.name.endswith("-free")
        (staging.path / "report.md").write_text("done")
        staging.commit()
    assert (tmp_path / "out" / "report.md").read_text() == "done"
    assert staged(tmp_path) == [theirs] and (theirs / "keep.txt").exists()


def test_a_failed_run_leaves_the_output_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the last run's")
    with pytest.raises(RuntimeError):
        with Staging(out) as staging:
            assert staging.path is not None
            (staging.path / "report.md").write_text("half")
            raise RuntimeError("the job failed")
    assert (out / "report.md").read_text() == "the last run's"
    assert list(out.glob(".out.partial-*")) == []
