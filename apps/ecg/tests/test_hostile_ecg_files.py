"""Hostile files and sizes for the ECG readers and the job (issue #40): signal files that are
devices, FIFOs or far longer than their header says, recordings too large for the machine,
an output folder that is a link to nothing, and stale staging folders of killed jobs. Each is
a clear error naming the input, or the job going on, never a hang, an abort or a half-written
output folder. Cases that could hang or abort run in a child process. docs/hostile-inputs.md
lists every case id below with its outcome; a test keeps the two in step."""

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import zerohop_ecg as ecg
from zerohop_ecg import output
from zerohop_ecg.errors import EcgInputError
from zerohop_ecg.output import Staging

DOCS = Path(__file__).resolve().parents[3] / "docs" / "hostile-inputs.md"

HEADER = "rec 1 360 1000\nrec.dat 16 200 11 0 0 0 0 MLII\n"


def child(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter: a hang is a timeout, an abort a status, not a dead
    pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def record(tmp_path: Path, signal_file: str) -> Path:
    (tmp_path / "rec.hea").write_text(HEADER)
    if signal_file == "dev-zero":
        (tmp_path / "rec.dat").symlink_to("/dev/zero")
    elif signal_file == "fifo":
        os.mkfifo(tmp_path / "rec.dat")
    else:  # a terabyte, sparse: no disk is used
        with open(tmp_path / "rec.dat", "wb") as f:
            f.truncate(1 << 40)
    return tmp_path / "rec"


@pytest.mark.parametrize("case", ["wfdb-signal-dev-zero", "wfdb-signal-fifo"])
def test_a_signal_file_that_is_no_file_is_refused_at_once(case, tmp_path):
    rec = record(tmp_path, case.removeprefix("wfdb-signal-"))
    run = child(f"""
        import zerohop_ecg as ecg
        try:
            ecg.read_wfdb({str(rec)!r})
        except ValueError as e:
            print(e)
        """)
    assert run.returncode == 0, run.stderr[-2000:]
    kind = "a character device" if case.endswith("zero") else "a FIFO (named pipe)"
    assert f"rec.dat: {kind}, not a regular file" in run.stdout, run.stdout


def test_a_signal_file_longer_than_its_header_says_is_read_that_far(tmp_path):
    rec = record(tmp_path, "long")  # wfdb-signal-longer-than-header
    run = child(f"""
        import zerohop_ecg as ecg
        table, header = ecg.read_wfdb({str(rec)!r})
        print(len(table), header["leads"])
        """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1000", "['MLII']"]


def test_a_csv_that_is_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "x.csv"  # csv-fifo
    os.mkfifo(fifo)
    run = child(f"""
        import zerohop_ecg as ecg
        for read in (ecg.read_csv, ecg.csv_header):
            try:
                read({str(fifo)!r})
            except ValueError as e:
                print(e)
        """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("x.csv: a FIFO (named pipe), not a regular file") == 2, run.stdout


def test_a_synthetic_recording_too_large_is_a_value_error_with_the_numbers():
    run = child("""
        import zerohop_ecg as ecg
        for seconds in (1e7, 1e9, float("inf")):
            try:
                ecg.synthesize(seconds)
            except ValueError as e:
                print(e)
        """)  # synthesize-too-large
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 3, run.stdout
    for line, seconds in zip(lines, ("10000000 s", "1000000000 s")):
        assert re.fullmatch(rf"invalid recording: synthetic ECG of {seconds} at 250 Hz: "
                            r"[\d,]+ samples need about [\d.]+ GiB, more than half of this "
                            r"machine's [\d.]+ GiB", line), line
    assert "all finite" in lines[2]


def test_the_cli_size_check_is_the_library_rule():
    from zerohop_ecg.sources import check_memory

    with pytest.raises(EcgInputError, match=r"^--synthetic 9: 10,000,000,000,000 samples need "
                                            r"about 298023\.2 GiB, more than half"):
        check_memory(10 ** 13, "--synthetic 9")
    check_memory(1000, "a second")


def test_a_dangling_link_as_out_is_refused_before_any_work(tmp_path):
    out = tmp_path / "out"  # out-dangling-symlink
    out.symlink_to(tmp_path / "nowhere")
    with pytest.raises(EcgInputError, match=r"out is a symbolic link to .*nowhere, which does "
                                            r"not exist"):
        Staging(out)
    with pytest.raises(EcgInputError, match="symbolic link"):
        Staging(out / "deeper")


def test_sigterm_during_the_commit_keeps_the_previous_run(tmp_path, monkeypatch):
    """SIGTERM arrives after the first file is moved (out-sigterm-during-commit): the job
    still ends with 143, the previous run's files are all there, nothing staged is left."""
    from zerohop_ecg.__main__ import _on_sigterm

    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.md", "beats.png"):
        (out / name).write_text("previous")
    (out / "notes.txt").write_text("the user's")
    moves = []
    real_replace = os.replace

    def replace_then_sigterm(src, dst):
        real_replace(src, dst)
        moves.append(dst)
        if len(moves) == 3:  # two moved aside, one new moved in
            os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with pytest.raises(SystemExit) as stopped:
            with Staging(out) as staging:
                for name in ("report.md", "beats.png", "loss.png"):
                    (staging.path / name).write_text("new")
                monkeypatch.setattr(output.os, "replace", replace_then_sigterm)
                staging.commit()
                monkeypatch.setattr(output.os, "replace", real_replace)
        assert stopped.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(p.name for p in out.iterdir()) == ["beats.png", "notes.txt", "report.md"]
    assert {(out / n).read_text() for n in ("report.md", "beats.png")} == {"previous"}
    assert not list(tmp_path.glob(".out.*")) and not list(out.glob(".out.*"))


def test_a_commit_replaces_the_previous_run_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("previous")
    (out / "tachogram.png").write_text("previous")
    (out / "notes.txt").write_text("the user's")
    with Staging(out) as staging:
        (staging.path / "report.md").write_text("new")
        staging.commit()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
    assert (out / "report.md").read_text() == "new"
    # A new folder is the staging folder renamed: whole at once.
    fresh = tmp_path / "a" / "fresh"
    with Staging(fresh) as staging:
        (staging.path / "report.md").write_text("new")
        staging.commit()
    assert [p.name for p in fresh.iterdir()] == ["report.md"]
    assert not list(tmp_path.glob(".*.partial-*"))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_stale_staging_folders_of_dead_jobs_are_removed_and_live_ones_kept(tmp_path):
    """stale-staging-folder: a SIGKILLed job's partial folder goes on the next run; a live
    job's, another host's and one not named like the job's stay; a commit a SIGKILL cut in
    half is undone."""
    out = tmp_path / "out"
    out.mkdir()
    host, dead = output._host(), dead_pid()
    stale = [tmp_path / f".out.partial-{host}-{dead}-0a1b2c3d",
             tmp_path / f".out.partial-{dead}-0a1b2c3e"]  # as older versions named them
    kept = [tmp_path / f".out.partial-{host}-{os.getpid()}-0a1b2c3d",
            tmp_path / f".out.partial-elsewhere-{dead}-0a1b2c3d",
            tmp_path / f".other.partial-{host}-{dead}-0a1b2c3d"]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "report.md").write_text("half")
    # Cut in the middle of a commit: the previous report aside, a new figure already in.
    aside = out / f".out.previous-{host}-{dead}-0a1b2c3d"
    aside.mkdir()
    (aside / "report.md").write_text("previous")
    (out / "beats.png").write_text("new, half committed")
    with Staging(out):
        pass
    assert all(not f.exists() for f in stale) and all(f.exists() for f in kept)
    assert not aside.exists() and [p.name for p in out.iterdir()] == ["report.md"]
    assert (out / "report.md").read_text() == "previous"


CASES = {"wfdb-signal-dev-zero", "wfdb-signal-fifo", "wfdb-signal-longer-than-header",
         "csv-fifo", "synthesize-too-large", "out-dangling-symlink", "out-sigterm-during-commit",
         "stale-staging-folder"}


def test_the_docs_page_lists_every_case():
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", DOCS.read_text(), flags=re.M))
    missing = CASES - listed
    assert not missing, f"docs/hostile-inputs.md lacks {sorted(missing)}"
