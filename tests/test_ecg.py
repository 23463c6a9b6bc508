"""The ECG pipeline from Python: the job on the bundled recording and on synthetic data, the
zero-copy hand-offs it checks, and its errors."""

import numpy as np
import pytest

import zerohop
import zerohop.ecg as ecg
from conftest import address, requires_torch, torch
from zerohop.ecg.__main__ import main


def test_read_csv_parses_into_table_columns(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("time,mv\n0,0.5\n1,-1.25\n")
    table = ecg.read_csv(path)
    assert table.columns == ["time", "mv"] and len(table) == 2
    assert np.from_dlpack(table["mv"]).tolist() == [0.5, -1.25]
    only = ecg.read_csv(path, columns=["mv"])
    assert only.columns == ["mv"]
    path.write_text("mv\n1\nx\n")
    with pytest.raises(ValueError, match=r"line 3, column 1 \(mv\): \"x\" is not a number"):
        ecg.read_csv(path)
    path.write_text("a;b\n1;\n2;3\n")
    with pytest.raises(ValueError, match=r"line 2, column 2 \(b\): empty field"):
        ecg.read_csv(path, header=True, delimiter=";")
    filled = ecg.read_csv(path, header=True, delimiter=";", empty="nan")
    assert np.isnan(np.from_dlpack(filled["b"])[0])
    assert np.from_dlpack(ecg.read_csv(path, delimiter=";", empty=-1)["b"]).tolist() == [-1, 3]
    with pytest.raises(OSError, match="missing.csv"):
        ecg.read_csv(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="nan="):
        ecg.read_csv(path, nan="maybe")


@requires_torch
def test_segment_outputs_are_zerohop_memory_handed_to_torch_without_copy():
    signal = zerohop.from_dlpack(ecg.load_record_208())
    seg = ecg.segment(signal, ecg.RECORD_208_RATE)
    beats = seg["beats"]
    assert beats.shape == (499, 512) and beats.dtype == "float32"
    assert beats.data_ptr % 128 == 0
    x = torch.from_dlpack(beats)
    assert address(x) == beats.data_ptr
    assert seg["gates"].shape == (504,)
    assert np.from_dlpack(seg["gates"])[:3].tolist() == [15, 233, 442]
    assert [name for name, _ in seg["timings"]] == ["curvature", "gates", "indices", "prune", "embed"]
    with pytest.raises(ValueError, match="1-d float32"):
        ecg.segment(np.zeros(1000), 360.0)
    with pytest.raises(ValueError, match="shorter than"):
        ecg.segment(np.zeros(10, np.float32), 360.0)
    with pytest.raises(ValueError, match="sampling rate"):
        ecg.segment(np.zeros(1000, np.float32), 0.0)


def test_synthetic_detection_meets_the_accuracy_goal():
    rate = 250.0
    signal, peaks, ectopic = ecg.synthesize(600.0, rate=rate, seed=7)
    assert signal.shape == (150_000,) and not any(ectopic)
    seg = ecg.segment(signal, rate)
    detected = (np.from_dlpack(seg["gates"]) + seg["params"]["gate_to_peak"]).tolist()
    sens, ppv, tp, fp, fn = ecg.score(detected, np.from_dlpack(peaks).tolist(), 0.05 * rate, 250, 150_000)
    assert sens >= 0.99 and ppv >= 0.99, (sens, ppv, tp, fp, fn)


@requires_torch
def test_the_job_on_the_bundled_recording(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--epochs", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "zero-copy hand-offs verified: 5/5" in out
    report = (tmp_path / "report.md").read_text()
    assert "record 208" in report and "gates: 504; beats kept: 499" in report
    stage_rows = [line for line in report.splitlines() if line.startswith("| ") and " B |" in line]
    assert stage_rows and all(line.endswith("| 0 B |") for line in stage_rows), stage_rows
    assert "| NO |" not in report
    for name in ("signal_gates", "lengths", "beats", "latent", "decoded_grid", "loss"):
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"({name}.png)" in report
    assert "Most outlying beats" in report


@requires_torch
def test_the_job_on_synthetic_data_reports_accuracy(tmp_path, capsys):
    assert main(["--synthetic", "0.05", "--out", str(tmp_path), "--epochs", "1", "--no-progress"]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "sensitivity" in report
    line = next(l for l in report.splitlines() if l.startswith("- sensitivity"))
    sens = float(line.split()[2])
    ppv = float(line.split()[7])
    assert sens >= 99.0 and ppv >= 99.0, line
    assert (tmp_path / "synthetic_r_peaks.csv").exists()


@requires_torch
def test_the_job_reports_bad_input_clearly(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("mv\n0.1\noops\n")
    assert main(["--csv", str(bad), "--rate", "250", "--out", str(tmp_path)]) == 2
    assert "line 3" in capsys.readouterr().err
    assert main(["--csv", str(bad), "--out", str(tmp_path)]) == 2
    assert "--rate" in capsys.readouterr().err
    short = tmp_path / "short.csv"
    short.write_text("mv\n" + "0.1\n" * 50)
    assert main(["--csv", str(short), "--rate", "250", "--out", str(tmp_path)]) == 2
    assert "shorter than" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--epochs", "0"])
