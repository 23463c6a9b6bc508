"""EDF, EDF+ and BDF(+) recordings: zerohop's reader against two independent ones (edfio and
pyedflib, which also write the files), the lead chosen by label, beat annotations scoring the
detection, EDF+D gaps, the start time in the report, and files told by their content."""

import datetime
import shutil

import numpy as np
import pytest

import zerohop_ecg as ecg
from conftest import requires_torch
from edf_files import tal, write_edf
from zerohop_ecg.__main__ import main

edfio = pytest.importorskip("edfio")
pyedflib = pytest.importorskip("pyedflib")


def record_100(seconds=None):
    """The bundled record's MLII lead (mV, 360 Hz) and its beat annotations."""
    table, _ = ecg.read_wfdb(ecg.RECORD_100)
    x = np.from_dlpack(table["MLII"]).astype(np.float64)
    ann = ecg.read_annotations(f"{ecg.RECORD_100}.atr")
    beats = np.asarray(ann["is_beat"], dtype=bool)
    samples = np.asarray(ann["sample"])[beats]
    symbols = np.asarray(ann["symbol"])[beats]
    if seconds is not None:
        n = int(seconds * 360)
        keep = samples < n
        x, samples, symbols = x[:n], samples[keep], symbols[keep]
    return x, samples, symbols


def write_edfio(path, signals, *, annotations=(), bdf=False, start=datetime.time(22, 15, 5),
                record_duration=1.0):
    """A file written by edfio: `signals` are (label, values, rate, units)."""
    kind = (edfio.BdfSignal, edfio.Bdf) if bdf else (edfio.EdfSignal, edfio.Edf)
    made = [kind[0](values, rate, label=label, physical_dimension=units)
            for label, values, rate, units in signals]
    notes = [edfio.EdfAnnotation(onset, None, text) for onset, text in annotations]
    kind[1](made, starttime=start, annotations=notes or None,
            data_record_duration=record_duration).write(path)
    return path


def test_values_match_edfio_and_pyedflib_on_an_edf_plus_file_they_wrote(tmp_path):
    x, _, _ = record_100(120)
    resp = np.sin(np.arange(120 * 25) / 25.0)
    path = write_edfio(tmp_path / "two.edf", [("ECG II", x, 360, "mV"), ("Resp", resp, 25, "")],
                       annotations=[(1.0, "Lights off")])
    table, info = ecg.read_edf(path, leads=["ECG II"])
    ours = np.from_dlpack(table["ECG II"])
    # The column is the reader's own memory, handed on without a copy.
    assert ours.__array_interface__["data"][0] == table["ECG II"].data_ptr
    theirs = edfio.read_edf(path).get_signal("ECG II").data
    with pyedflib.EdfReader(str(path)) as f:
        flib = f.readSignal(0)
    assert ours.dtype == np.float32 and len(ours) == len(theirs) == len(flib) == 120 * 360
    # float32 against their float64: within float32's rounding of the same physical value.
    np.testing.assert_allclose(ours, theirs, rtol=2e-7, atol=1e-6)
    np.testing.assert_allclose(ours, flib, rtol=2e-7, atol=1e-6)
    assert info["rate"] == 360.0 and info["format"] == "EDF+C"
    assert info["units"] == ["mV"] and info["start_time"] == 22 * 3600 + 15 * 60 + 5
    notes = info["annotations"]
    assert notes["text"] == ["Lights off"] and notes["onset"].tolist() == [1.0]
    assert np.isnan(notes["duration"]).all()
    header = ecg.edf_header(path)
    assert [s["label"] for s in header["signals"]] == ["ECG II", "Resp", "EDF Annotations"]
    assert [s["rate"] for s in header["signals"][:2]] == [360.0, 25.0]


def test_bdf_24_bit_values_match_edfio(tmp_path):
    rng = np.random.default_rng(5)
    values = np.cumsum(rng.normal(0, 30.0, 256 * 20))  # µV, wandering far from zero
    path = write_edfio(tmp_path / "a.bdf", [("EXG1", values, 256, "uV")], bdf=True)
    table, info = ecg.read_edf(path)
    ours = np.from_dlpack(table["EXG1"])
    theirs = edfio.read_bdf(path).signals[0].data
    np.testing.assert_allclose(ours, theirs, rtol=2e-7, atol=1e-4)
    assert info["format"].startswith("BDF")


def test_plain_edf_from_pyedflib_reads_every_signal_of_one_rate(tmp_path):
    rng = np.random.default_rng(1)
    data = [rng.normal(0, 1, 500 * 8) for _ in range(3)]
    headers = [{"label": name, "dimension": "mV", "sample_frequency": 500,
                "physical_max": 5.0, "physical_min": -5.0, "digital_max": 32767,
                "digital_min": -32768, "transducer": "", "prefilter": ""}
               for name in ("I", "II", "III")]
    path = tmp_path / "plain.edf"
    pyedflib.highlevel.write_edf(str(path), data, headers, file_type=pyedflib.FILETYPE_EDF)
    table, info = ecg.read_edf(path)
    assert info["leads"] == ["I", "II", "III"] and info["format"] == "EDF"
    with pyedflib.EdfReader(str(path)) as f:
        for i, name in enumerate(info["leads"]):
            np.testing.assert_allclose(np.from_dlpack(table[name]), f.readSignal(i),
                                       rtol=2e-7, atol=1e-6)


def test_errors_name_the_file_and_the_problem(tmp_path):
    path = tmp_path / "bad.edf"
    path.write_bytes(b"1       " + b" " * 300)
    with pytest.raises(ValueError, match="not an EDF version"):
        ecg.read_edf(path)
    good = write_edfio(tmp_path / "g.edf", [("ECG", np.zeros(360 * 2) + 0.1, 360, "mV")])
    with pytest.raises(ValueError, match=r"no signal 'V9'|no signal \"V9\""):
        ecg.read_edf(good, leads=["V9"])
    with pytest.raises(FileNotFoundError):
        ecg.read_edf(tmp_path / "missing.edf")


def job(tmp_path, capsys, *args):
    code = main([*args, "--epochs", "1", "--no-plots", "--no-progress",
                 "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    report = (tmp_path / "out" / "report.md").read_text() if code == 0 else ""
    return code, captured.out + captured.err, report


@requires_torch
def test_the_job_reads_lead_ii_scores_against_the_file_s_beats_and_gives_clock_times(
        tmp_path, capsys):
    x, samples, symbols = record_100(300)
    v5 = -0.5 * x
    path = write_edfio(tmp_path / "holter.edf",
                       [("ECG V5", v5, 360, "mV"), ("ECG II", x, 360, "mV")],
                       annotations=[(s / 360.0, str(k)) for s, k in zip(samples, symbols)])
    code, said, report = job(tmp_path, capsys, "--edf", str(path))
    assert code == 0, said
    assert "signal 'ECG II' (360 Hz)" in report
    assert f"{len(samples):,} beat annotations in the file" in said
    # Scored against the file's annotations: record 100's detection is near perfect.
    assert "against the file's beat annotations (EDF+C)" in said
    assert "sensitivity 99" in said or "sensitivity 100" in said
    assert "from 22:15:05" in report


@requires_torch
def test_a_plain_path_is_told_by_its_content(tmp_path, capsys):
    x, _, _ = record_100(60)
    path = write_edfio(tmp_path / "recording.edf", [("EKG", x, 360, "mV")])
    renamed = tmp_path / "export.dat"
    shutil.copy(path, renamed)
    code, said, report = job(tmp_path, capsys, str(renamed))
    assert code == 0, said
    assert "EDF signal 'EKG'" in report


@requires_torch
def test_edf_plus_d_gaps_are_refused_by_name_or_filled(tmp_path, capsys):
    x, _, _ = record_100(120)
    path = tmp_path / "gaps.edf"
    write_edf(path, [("ECG", x[:90 * 360], 30 * 360, (-5.0, 5.0))], seconds=30, plus="D",
              starts=[0, 30, 90])
    code, said, _ = job(tmp_path, capsys, "--edf", str(path))
    assert code == 2
    assert "EDF+D file with 1 gap(s)" in said and "0:01:00 from the start" in said
    assert "lasting 30 s" in said and "--fill interpolate" in said
    code, said, report = job(tmp_path, capsys, "--edf", str(path), "--fill", "interpolate")
    assert code == 0, said
    assert "EDF+D gap(s)" in report


@requires_torch
def test_a_folder_of_edf_and_bdf_files_runs_as_many_recordings(tmp_path, capsys):
    x, samples, symbols = record_100(120)
    folder = tmp_path / "archive"
    folder.mkdir()
    write_edfio(folder / "a.edf", [("ECG II", x, 360, "mV")],
                annotations=[(s / 360.0, str(k)) for s, k in zip(samples, symbols)])
    write_edfio(folder / "b.BDF", [("EKG", -x[::-1], 360, "mV")], bdf=True)
    (folder / "notes.txt").write_text("not a recording")
    code, said, report = job(tmp_path, capsys, "--records", str(folder))
    assert code == 0, said
    assert "| a | 360 | 0:02:00 |" in report and "| b | 360 | 0:02:00 |" in report
    assert "over the 1 annotated record(s)" in report and "notes" not in report
