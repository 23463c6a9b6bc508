"""The ECG job on CSV files as labs export them: 12 leads with a time column (lead II by
default, the rate from the time column whichever lead is named), time in ms without a units
row, missing cells (--fill), compressed files told by their content, UTF-16 and UTF-32."""

import bz2
import gzip
import re

import numpy as np
import pytest

import zerohop_ecg as ecg
from conftest import requires_torch
from zerohop_ecg.__main__ import main

pytestmark = requires_torch


def export(seconds=30.0, time_scale=1.0, units=None, blanks=()):
    """A lab's export: time, then leads I, II and V1, one row per sample at 360 Hz."""
    signal, _, _ = ecg.synthesize(seconds, rate=360.0, heart_rate=70, seed=3)
    x = np.from_dlpack(signal)
    leads = {"I": 0.5 * x, "II": x, "V1": -0.3 * x}
    rows = ["time," + ",".join(leads)] + ([units] if units else [])
    for i in range(len(x)):
        cells = [f"{lead[i]:.4f}" for lead in leads.values()]
        if i in blanks:
            cells[1] = ""
        rows.append(f"{i / 360.0 * time_scale:.6f}," + ",".join(cells))
    return "\n".join(rows) + "\n"


def run(tmp_path, capsys, name, data, *args):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    code = main(["--csv", str(path), "--epochs", "1", "--no-plots", "--no-progress",
                 "--out", str(tmp_path / "out"), *args])
    captured = capsys.readouterr()
    report = (tmp_path / "out" / "report.md").read_text() if code == 0 else ""
    return code, captured.out + captured.err, report


def test_a_twelve_lead_export_is_read_from_lead_ii_at_its_time_column_s_rate(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "twelve.csv", export())
    assert code == 0, said
    assert "using 'II'" in said and "360 Hz, is read from the time column 'time'" in said
    assert "lead 'II'" in report and "at 360 Hz" in report


def test_a_lead_named_by_hand_keeps_the_time_column_s_rate(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "twelve.csv", export(), "--column", "V1")
    assert code == 0, said
    assert "360 Hz, is read from the time column" in said and "lead 'V1'" in report


def test_time_in_ms_without_a_units_row_is_recognised_and_said(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "ms.csv", export(time_scale=1000.0))
    assert code == 0, said
    assert "its steps read as ms; if that is wrong, pass --rate HZ" in said
    assert "at 360 Hz" in report


def test_missing_cells_are_refused_pointing_to_fill_or_filled_and_listed(tmp_path, capsys):
    data = export(blanks=(100, 101, 5000))
    code, said, _ = run(tmp_path, capsys, "blanks.csv", data)
    assert code == 2 and "empty field; pass --fill interpolate" in said, said
    code, said, report = run(tmp_path, capsys, "blanks.csv", data, "--fill", "interpolate")
    assert code == 0, said
    listed = "3 missing sample(s) in column 'II' interpolated (--fill interpolate), at " \
             "sample(s) 100, 101, 5000"
    assert listed in said and listed in report
    code, said, report = run(tmp_path, capsys, "blanks.csv", data, "--fill", "zero")
    assert code == 0 and "set to 0 (--fill zero)" in report


@pytest.mark.parametrize("name, pack, says", [
    ("gz.csv.gz", lambda t: gzip.compress(t.encode()), "gzip-compressed"),
    ("no-extension", lambda t: gzip.compress(t.encode()), "gzip-compressed"),
    ("bz.csv", lambda t: bz2.compress(t.encode()), "bzip2-compressed"),
    ("z.csv.zst", lambda t: __import__("zstandard").ZstdCompressor().compress(t.encode()),
     "zstd-compressed"),
    ("utf16.csv", lambda t: t.encode("utf-16"), "UTF-16-LE text"),
    ("utf32.csv", lambda t: t.encode("utf-32"), "UTF-32-LE text"),
], ids=["gzip", "gzip-by-content", "bzip2", "zstd", "utf-16", "utf-32"])
def test_compressed_and_wide_encodings_are_read_like_plain_text(tmp_path, capsys, name, pack,
                                                                says):
    code, said, report = run(tmp_path, capsys, name, pack(export()))
    assert code == 0, said
    assert says in said and "read as plain UTF-8" in said
    assert "lead 'II'" in report and "at 360 Hz" in report


def test_a_broken_gzip_is_one_line_naming_the_format(tmp_path, capsys):
    code, said, _ = run(tmp_path, capsys, "broken.gz", gzip.compress(export().encode())[:200])
    assert code == 2 and "could not read it as gzip" in said, said


def test_a_missing_file_is_file_not_found_from_every_reader(tmp_path):
    # One mapping of the ECG crate's errors: the CSV reader used to raise a bare OSError here
    # while the WFDB reader raised FileNotFoundError.
    missing = tmp_path / "nowhere"
    for read in (lambda: ecg.read_csv(missing.with_suffix(".csv")),
                 lambda: ecg.read_wfdb(missing)):
        with pytest.raises(FileNotFoundError, match="nowhere"):
            read()


def test_a_rate_the_time_column_contradicts_is_refused_naming_both(tmp_path, capsys):
    code, said, _ = run(tmp_path, capsys, "twelve.csv", export(), "--rate", "180")
    assert code == 2
    assert "--rate 180 Hz disagrees with the time column 'time', whose steps give 360 Hz" in said
    assert "--rate-overrides-time" in said
    assert not (tmp_path / "out").exists(), "nothing written"


def test_a_rate_may_override_the_time_column_when_asked_and_the_report_says_so(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "twelve.csv", export(), "--rate", "180",
                             "--rate-overrides-time")
    assert code == 0, said
    assert "--rate 180 Hz overrides the time column 'time' (360 Hz)" in report
    assert "at 180 Hz" in report


def test_a_rate_that_agrees_with_the_time_column_is_taken(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "twelve.csv", export(), "--rate", "360")
    assert code == 0, said
    assert "overrides" not in report and "at 360 Hz" in report


def test_a_cp1252_export_is_refused_with_the_hint_then_read_with_encoding(tmp_path, capsys):
    text = export().replace("time,I,II,V1", "Zeit (s),I (µV),Ableitung II (µV),V1 (µV)", 1)
    data = text.encode("cp1252")
    code, said, _ = run(tmp_path, capsys, "german.csv", data, "--column", "2")
    assert code == 2
    assert "not UTF-8" in said and "--encoding cp1252" in said
    code, said, report = run(tmp_path, capsys, "german.csv", data, "--column", "2",
                             "--encoding", "cp1252")
    assert code == 0, said
    assert "lead 'Ableitung II (µV)'" in report and "CP1252 text" in said
    code, said, _ = run(tmp_path, capsys, "german.csv", data, "--encoding", "klingon")
    assert code == 2 and "--encoding klingon: not a text encoding" in said


def test_a_preamble_of_comment_lines_is_skipped(tmp_path, capsys):
    preamble = "# Recorder: Holter XYZ, serial 0042\n# Patient: anonymous\n\n"
    code, said, report = run(tmp_path, capsys, "preamble.csv", preamble + export())
    assert code == 0, said
    assert "using 'II'" in said and "at 360 Hz" in report


def test_a_clock_time_column_gives_the_rate_and_text_elsewhere_is_not_read(tmp_path, capsys):
    """ISO 8601 clock times in the first column (as monitors export them), and a column of
    text (event markers) the job does not use: neither stops it."""
    import datetime

    signal, _, _ = ecg.synthesize(30.0, rate=250.0, heart_rate=70, seed=4)
    x = np.from_dlpack(signal)
    start = datetime.datetime(2026, 11, 27, 10, 0, 0)
    rows = ["timestamp,II,event"]
    for i, v in enumerate(x):
        moment = start + datetime.timedelta(microseconds=4000 * i)
        rows.append(f"{moment.isoformat(timespec='milliseconds')}Z,{v:.4f},"
                    f"{'lead off' if i == 100 else 'ok'}")
    code, said, report = run(tmp_path, capsys, "monitor.csv", "\n".join(rows) + "\n")
    assert code == 0, said
    assert "250 Hz, is read from the time column 'timestamp'" in said
    assert "at 250 Hz" in report and "lead 'II'" in report
    # The clock times carry into the report: the start, and each outlier's time of day.
    assert "(lasting 0:00:30, h:mm:ss, from 10:00:00)" in report
    assert "| clock time (from the start) |" in report
    assert re.search(r"\| 10:00:\d\d\.\d\d \(0:00:\d\d\.\d\d\) \|", report), report


def test_each_first_message_names_the_actual_problem(tmp_path, capsys):
    code, said, _ = run(tmp_path, capsys, "header.csv", "time,II\n")
    assert code == 2 and "a header ('time', 'II') but no rows of data" in said
    (tmp_path / "folder").mkdir()
    code = main(["--csv", str(tmp_path / "folder"), "--no-plots", "--out", str(tmp_path / "o")])
    said = capsys.readouterr().err
    assert code == 2 and "a directory, not a file" in said and "--records" in said
    preamble = "Patient: anonymous\n" + "\n".join(f"{v:.3f}" for v in np.sin(np.arange(900)))
    code, said, _ = run(tmp_path, capsys, "preamble.csv", preamble + "\n")
    assert code == 2 and "one column named 'Patient: anonymous'" in said
    assert "start it with #" in said
    piped = "time|II\n" + "\n".join(f"{i / 360:.5f}|{v:.3f}" for i, v in
                                    enumerate(np.sin(np.arange(900))))
    code, said, _ = run(tmp_path, capsys, "piped.csv", piped + "\n")
    assert code == 2 and "one column named 'time|II'" in said and "--delimiter" in said


def test_excel_s_trailing_delimiter_is_an_empty_column_left_alone(tmp_path, capsys):
    text = "\n".join(line + "," for line in export().splitlines()) + "\n"
    code, said, report = run(tmp_path, capsys, "excel.csv", text)
    assert code == 0, said
    assert "lead 'II'" in report and "at 360 Hz" in report


def test_durations_and_times_read_as_a_clock():
    from zerohop_ecg.report import clock
    from zerohop_ecg.sources import time_of_day

    assert time_of_day("10:20:30.5") == 37230.5 and time_of_day("20:30") == 1230.0
    assert time_of_day("25:00:00") is None and time_of_day("noon") is None
    assert time_of_day(None) is None and time_of_day("1:2:3:4") is None

    assert clock(10) == "0:00:10" and clock(86400) == "24:00:00"
    assert clock(46647.62, 2) == "12:57:27.62" and clock(59.999, 2) == "0:01:00.00"
    assert clock(-1) == "0:00:00"


def test_the_report_gives_the_recording_s_length_as_a_clock(tmp_path, capsys):
    code, said, report = run(tmp_path, capsys, "twelve.csv", export(seconds=30.0))
    assert code == 0, said
    assert "(lasting 0:00:30, h:mm:ss)" in report
    assert "| time from the start (h:mm:ss) |" in report


def test_a_wfdb_base_time_makes_the_report_s_times_clock_times(tmp_path, capsys):
    """A record whose header names its start (WFDB's base time, here 10:20:30): the report
    gives the start and each outlier's time of day."""
    import shutil

    source = ecg.RECORD_100.parent
    for name in ("mitdb100.dat", "mitdb100.atr"):
        shutil.copy(source / name, tmp_path / name)
    lines = (source / "mitdb100.hea").read_text().splitlines()
    lines[0] += " 10:20:30"
    (tmp_path / "mitdb100.hea").write_text("\n".join(lines) + "\n")
    code = main(["--wfdb", str(tmp_path / "mitdb100"), "--epochs", "1", "--no-plots",
                 "--no-progress", "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    assert code == 0, said.err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "(lasting 0:30:06, h:mm:ss, from 10:20:30)" in report
    assert re.search(r"\| 10:[2-5]\d:\d\d\.\d\d \(0:\d\d:\d\d\.\d\d\) \|", report), report
