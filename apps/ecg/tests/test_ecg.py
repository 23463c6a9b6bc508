"""The ECG pipeline from Python: detection on real and synthetic recordings, the job's
inputs (WFDB, CSV as people have them, synthetic), the zero-copy hand-offs it checks, its
output folder and its errors."""

import os
import re
import sys

import numpy as np
import pytest

import zerohop
import zerohop_ecg as ecg
from zerohop_ecg.errors import MissingCellError
from conftest import address, requires_torch, torch
from zerohop_ecg.__main__ import main


def test_read_csv_parses_into_table_columns(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("time,mv\n0,0.5\n1,-1.25\n")
    table = ecg.read_csv(path)
    assert table.columns == ["time", "mv"] and len(table) == 2
    assert np.from_dlpack(table["mv"]).tolist() == [0.5, -1.25]
    only = ecg.read_csv(path, columns=["mv"])
    assert only.columns == ["mv"]
    path.write_text("mv\n1\nx\n")
    with pytest.raises(ValueError, match=r"line 3, column 1 \(mv\): \"x\" is not a number") as bad:
        ecg.read_csv(path)
    assert not isinstance(bad.value, MissingCellError), "text is malformed, not missing"
    path.write_text("mv\n1\nnan\n")
    with pytest.raises(MissingCellError, match="not finite"):
        ecg.read_csv(path)
    path.write_text("a;b\n1;\n2;3\n")
    # A typed problem: the app tells a missing cell by its class, not by its message.
    with pytest.raises(MissingCellError, match=r"line 2, column 2 \(b\): empty field") as gap:
        ecg.read_csv(path, header=True, delimiter=";")
    assert isinstance(gap.value, ValueError)
    filled = ecg.read_csv(path, header=True, delimiter=";", empty="nan")
    assert np.isnan(np.from_dlpack(filled["b"])[0])
    assert np.from_dlpack(ecg.read_csv(path, delimiter=";", empty=-1)["b"]).tolist() == [-1, 3]
    with pytest.raises(OSError, match="missing.csv"):
        ecg.read_csv(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="nan="):
        ecg.read_csv(path, nan="maybe")


def record_100():
    table, header = ecg.read_wfdb(ecg.RECORD_100)
    ann = ecg.read_annotations(f"{ecg.RECORD_100}.atr")
    beats = np.asarray(ann["sample"])[np.asarray(ann["is_beat"], dtype=bool)]
    return table, header, beats


def test_record_100_is_detected_to_the_aami_goal():
    table, header, truth = record_100()
    rate = header["rate"]
    assert rate == 360.0 and len(table) == 650_000 and len(truth) == 2273
    seg = ecg.segment(table["MLII"], rate)
    r_peaks = np.from_dlpack(seg["r_peaks"])
    sens, ppv, tp, fp, fn = ecg.score(r_peaks.tolist(), truth.tolist(), 0.15 * rate,
                                      int(5 * rate), len(table))
    assert sens >= 0.995 and ppv >= 0.995, (sens, ppv, tp, fp, fn)
    rows = seg["beats"].shape[0]
    assert rows + seg["edge_dropped"] == len(r_peaks) and rows >= 0.99 * len(r_peaks)


@requires_torch
def test_segment_outputs_are_zerohop_memory_handed_to_torch_without_copy():
    signal = zerohop.from_dlpack(ecg.load_record_208())
    seg = ecg.segment(signal, ecg.RECORD_208_RATE)
    beats = seg["beats"]
    p = seg["params"]
    assert seg["method"] == "adaptive" and beats.shape[1] == p["width"] == 256
    assert beats.dtype == "float32" and beats.data_ptr % 128 == 0
    x = torch.from_dlpack(beats)
    assert address(x) == beats.data_ptr
    peaks = np.from_dlpack(seg["beat_peaks"])
    rows = np.from_dlpack(beats)
    raw = ecg.load_record_208()
    # Each row is the signal around its R peak, the peak `before` samples in.
    for k in (0, len(peaks) // 2, len(peaks) - 1):
        r = peaks[k]
        span = p["before"] + p["after"]
        assert np.array_equal(rows[k, :span], raw[r - p["before"]:r + p["after"]])
        assert not rows[k, span:].any()
    assert [name for name, _ in seg["timings"]] == ["curvature", "energy", "candidates",
                                                     "decide", "embed"]
    assert np.all(np.diff(np.from_dlpack(seg["r_peaks"])) > 0)


def test_the_blog_method_is_kept_as_it_was():
    seg = ecg.segment(ecg.load_record_208(), ecg.RECORD_208_RATE, method="blog")
    assert seg["beats"].shape == (499, 512)
    assert np.from_dlpack(seg["gates"])[:3].tolist() == [15, 233, 442]
    to_peak = int(seg["params"]["gate_to_peak"])
    assert np.array_equal(np.from_dlpack(seg["r_peaks"]), np.from_dlpack(seg["gates"]) + to_peak)


def test_segment_takes_signals_as_people_have_them_and_refuses_what_it_cannot_use():
    raw = ecg.load_record_208()
    as_float32 = np.from_dlpack(ecg.segment(raw, 360.0)["r_peaks"])
    as_float64 = np.from_dlpack(ecg.segment(raw.astype(np.float64), 360.0)["r_peaks"])
    as_list = np.from_dlpack(ecg.segment(raw[:36_000].tolist(), 360.0)["r_peaks"])
    assert np.array_equal(as_float32, as_float64)
    assert np.array_equal(as_list, as_float32[as_float32 < 36_000 - 200][:len(as_list)])
    with pytest.raises(ValueError, match="1-d"):
        ecg.segment(np.zeros((10, 10)), 360.0)
    with pytest.raises(ValueError, match="shorter than"):
        ecg.segment(np.zeros(10, np.float32), 360.0)
    with pytest.raises(ValueError, match="sampling rate"):
        ecg.segment(np.zeros(1000, np.float32), 0.0)
    with pytest.raises(ValueError, match="method"):
        ecg.segment(raw, 360.0, method="magic")
    holed = raw.copy()
    holed[5000] = np.nan
    with pytest.raises(ValueError, match="first at sample 5000"):
        ecg.segment(holed, 360.0)


@pytest.mark.parametrize("bpm", [30, 75, 150, 240])
def test_synthetic_rhythms_are_detected_at_any_rate(bpm):
    rate = 250.0
    signal, peaks, ectopic = ecg.synthesize(300.0, rate=rate, heart_rate=bpm, ectopic=0.1,
                                            noise_mv=0.05, seed=bpm)
    seg = ecg.segment(signal, rate)
    sens, ppv, tp, fp, fn = ecg.score(np.from_dlpack(seg["r_peaks"]).tolist(),
                                      np.from_dlpack(peaks).tolist(), 0.15 * rate,
                                      int(5 * rate), signal.shape[0])
    assert sens >= 0.995 and ppv >= 0.995, (bpm, sens, ppv, tp, fp, fn)


# ---------------------------------------------------------------- the job


def run_job(tmp_path, *args):
    out = tmp_path / "out"
    return main(["--out", str(out), "--epochs", "1", "--no-progress", *args]), out


@requires_torch
def test_the_job_on_the_bundled_record_100_scores_its_detection(tmp_path, capsys):
    status, out = run_job(tmp_path)
    assert status == 0
    printed = capsys.readouterr().out
    assert "zero-copy hand-offs verified: 5/5" in printed
    report = (out / "report.md").read_text()
    assert "record 100" in report and "lead MLII" in report
    table = report.split("| sensitivity | positive predictivity |")[1].splitlines()[2]
    sens, ppv = (float(cell.strip(" %")) for cell in table.split("|")[1:3])
    assert sens >= 99.5 and ppv >= 99.5, table
    assert "| V | premature ventricular |" in report
    # The outliers carry their reference class, a clock time and the RR context.
    ranked = report.split("| RR before / after (ms) |")[1].splitlines()[2:12]
    assert len(ranked) == 10 and all(row.split("|")[3].strip() in "NAVLRFJ?" for row in ranked)
    assert all(re.search(r"\| \d+:\d\d:\d\d\.\d\d \| (\d+|–) / (\d+|–) \|", row)
               for row in ranked), ranked
    stage_rows = [line for line in report.splitlines() if line.startswith("| ") and " B |" in line]
    assert stage_rows and all(line.endswith("| 0 B |") for line in stage_rows), stage_rows
    assert "| NO |" not in report
    for name in ("signal_peaks", "tachogram", "beats", "latent", "decoded_grid", "outliers",
                 "loss"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"({name}.png)" in report
    assert not list(tmp_path.glob(".*partial*")) and not list(out.glob(".*partial*"))


@requires_torch
def test_the_job_on_synthetic_tachycardia_reports_accuracy(tmp_path):
    status, out = run_job(tmp_path, "--synthetic", "0.05", "--heart-rate", "200",
                          "--ectopic", "0.1", "--no-plots")
    assert status == 0
    report = (out / "report.md").read_text()
    assert "the generator's R peaks" in report and "at 200 bpm" in report
    assert not list(out.glob("*.png"))


def test_a_synthetic_day_swings_its_heart_rate():
    """`day_swing` slows the small hours and quickens the afternoon, as a Holter record's
    rate does; out of range it is refused by name."""
    rate = 50.0
    _, peaks, _ = ecg.synthesize(24 * 3600.0, rate=rate, heart_rate=70.0, day_swing=0.3)
    hours = np.from_dlpack(peaks) / rate / 3600.0
    night = np.count_nonzero((hours >= 1) & (hours < 3)) / 120.0
    afternoon = np.count_nonzero((hours >= 13) & (hours < 15)) / 120.0
    assert 47 < night < 52 and 88 < afternoon < 93, (night, afternoon)
    with pytest.raises(ValueError, match="day swing"):
        ecg.synthesize(60.0, heart_rate=200.0, day_swing=0.3)


def test_the_command_line_refuses_a_day_swing_out_of_range(capsys):
    from zerohop_ecg.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--synthetic", "1", "--day-swing", "1.5"])
    assert exit_.value.code == 2
    assert "argument --day-swing: 1.5: the day swing must be 0 to 0.9" in capsys.readouterr().err


def physionet_csv(path, delimiter=","):
    """A CSV as PhysioNet's export writes it: quoted names, a units row, time first."""
    signal, _, _ = ecg.synthesize(60.0, rate=360.0, seed=5)
    values = np.from_dlpack(signal)
    d = delimiter
    lines = [f"'Elapsed time'{d}'MLII'{d}'V1'", f"'seconds'{d}'mV'{d}'mV'"]
    lines += [f"{i / 360:.6f}{d}{v:.4f}{d}{-v:.4f}" for i, v in enumerate(values)]
    path.write_text("\r\n".join(lines) + "\r\n")
    return path


@requires_torch
@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_the_job_takes_a_physionet_style_csv(tmp_path, capsys, delimiter):
    path = physionet_csv(tmp_path / "export.csv", delimiter)
    status, out = run_job(tmp_path, "--csv", str(path), "--no-plots")
    assert status == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "time axis" in printed and "360 Hz" in printed
    report = (out / "report.md").read_text()
    assert "lead 'MLII'" in report and "amplitude in mV" in report
    status, out = run_job(tmp_path, "--csv", str(path), "--column", "V1", "--rate", "360",
                          "--no-plots")
    assert status == 0 and "lead 'V1'" in (out / "report.md").read_text()


@requires_torch
def test_bad_input_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys):
    def refused(*args, says):
        status, out = run_job(tmp_path, *args)
        err = capsys.readouterr().err
        assert status == 2, err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists(), "a failed run left its output folder"
        assert not list(tmp_path.glob(".*partial*"))

    bad = tmp_path / "bad.csv"
    bad.write_text("mv\n0.1\noops\n")
    refused("--csv", str(bad), "--rate", "250", says="line 3")
    refused("--csv", str(bad), says="--rate")
    refused("--csv", str(tmp_path / "absent.csv"), "--rate", "250", says="no such file")
    short = tmp_path / "short.csv"
    short.write_text("mv\n" + "0.1\n0.2\n" * 25)
    refused("--csv", str(short), "--rate", "250", says="shorter than")
    flat = tmp_path / "flat.csv"
    flat.write_text("mv\n" + "0.5\n" * 5000)
    refused("--csv", str(flat), "--rate", "250", says="constant")
    clock = tmp_path / "clock.csv"
    clock.write_text("t\n" + "".join(f"{i}\n" for i in range(5000)))
    refused("--csv", str(clock), "--rate", "250", says="time axis")
    physionet = physionet_csv(tmp_path / "export.csv")
    refused("--csv", str(physionet), "--column", "II", says="no column 'II'")
    refused("--csv", str(physionet), "--column", "MLII", "--rate", "100000", says="100000 Hz")
    noise = tmp_path / "noise.csv"
    noise.write_text("mv\n" + "".join(f"{v:.3f}\n" for v in np.random.default_rng(1).normal(size=20)))
    refused("--csv", str(noise), "--rate", "250", says="shorter than")
    refused("--wfdb", str(tmp_path / "nothing"), says="no header")


@requires_torch
def test_arguments_are_checked_before_any_work(tmp_path, capsys):
    for args, says in ((["--synthetic", "inf"], "finite"), (["--synthetic", "1e6"], "hours"),
                       (["--rate", "0"], "50 to 100000"), (["--batch-size", "0"], "--batch-size"),
                       (["--epochs", "0"], "--epochs"), (["--delimiter", "|"], "tab"),
                       (["--seed", "-1"], "--seed must be 0 to 4294967295"),
                       (["--seed", str(2 ** 64)], "--seed must be 0 to 4294967295"),
                       (["--threads", "0"], "--threads must be 1 to 1024"),
                       (["--lr", "0"], "the learning rate must be 1e-06 to 1")):
        with pytest.raises(SystemExit) as exit:
            main(["--out", str(tmp_path / "never"), *args])
        assert exit.value.code == 2 and says in capsys.readouterr().err, args
    assert not (tmp_path / "never").exists()
    help = main.__globals__["parser"]().format_help()
    assert "(default: 42)" in help
    # One default learning rate for the CLI, the job's Config and train().
    from zerohop_ecg.pipeline import Config
    from zerohop_ecg.vae import LR
    assert f"(default: {LR:g})" in help and Config(out=tmp_path).lr == LR == 2e-3
    assert "default 1024 on the CPU" in " ".join(help.split())
    assert "None" not in help and "(default: False)" not in help


@requires_torch
def test_the_output_folder_is_checked_first_and_replaced_whole(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    assert main(["--out", str(a_file), "--synthetic", "0.01"]) == 2
    assert "not a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
    status, out = run_job(tmp_path, "--synthetic", "0.02")
    assert status == 0 and (out / "beats.png").exists()
    (out / "notes.txt").write_text("kept")
    status, out = run_job(tmp_path, "--synthetic", "0.02", "--no-plots")
    assert status == 0 and not list(out.glob("*.png")), "stale figures from the earlier run"
    assert "## Figures" not in (out / "report.md").read_text()
    assert (out / "notes.txt").read_text() == "kept"


@requires_torch
def test_a_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    # /proc refuses new folders to root too, where a chmod would not stop root.
    assert main(["--out", "/proc/zerohop-out", "--synthetic", "0.01"]) == 2
    assert "not writable" in capsys.readouterr().err
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main(["--out", str(locked / "out"), "--synthetic", "0.01"]) == 2
        assert "not writable" in capsys.readouterr().err and not list(locked.iterdir())


def test_the_job_reads_its_recording_before_torch_is_imported():
    # torch is imported on a thread while the recording is read (seconds on a GPU machine's
    # host): the job's entry point and the malloc setting it applies first must not import it.
    import subprocess

    # Nor the check that matplotlib is there, run before torch's import starts.
    code = ("import sys, zerohop_ecg.__main__, zerohop_ecg.pipeline, zerohop_ecg.sources; "
            "from zerohop_ecg.malloc import keep_freed_memory; keep_freed_memory(); "
            "zerohop_ecg.sources.require_rest_of_job(zerohop_ecg.pipeline.Config()); "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_a_missing_torch_is_named_with_the_install_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["--out", str(tmp_path / "out"), "--synthetic", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'zerohop[ecg]'" in err and "Traceback" not in err


def test_a_missing_matplotlib_is_named_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["--out", str(tmp_path / "out"), "--synthetic", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "matplotlib, which is not installed" in err and "--no-plots" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@requires_torch
def test_outlier_ranking_does_not_depend_on_the_inputs_units():
    from zerohop_ecg.vae import embed, train

    table, header, _ = record_100()
    beats = torch.from_dlpack(ecg.segment(table["MLII"], 360.0)["beats"])[:400]
    rankings = []
    for x in (beats, beats * 200.0 + 1024.0):           # mV, and the record's ADC counts
        trained = train(x, epochs=2, progress=False, threads=1)
        _, _, _, error = embed(trained["model"], x, trained["scale"], center=trained["center"])
        rankings.append(set(torch.argsort(error, descending=True)[:5].tolist()))
    assert rankings[0] == rankings[1]


@requires_torch
def test_the_latent_does_not_collapse_so_the_decoded_grid_shows_different_beats():
    # Without free nats in the KL term every μ of record 100 sat within 0.03 of 0 and the 25
    # decoded beats differed by 0.002 (normalised units): 25 copies of one beat.
    from zerohop_ecg.vae import embed, train

    table, _, _ = record_100()
    x = torch.from_dlpack(ecg.segment(table["MLII"], 360.0)["beats"])
    trained = train(x, epochs=15, progress=False, threads=2)
    mu = embed(trained["model"], x, trained["scale"], center=trained["center"])[0].numpy()
    low, high = np.percentile(mu, [2, 98], axis=0)
    assert (high - low).max() > 0.2, (low, high)
    grid = torch.tensor([(a, b) for a in np.linspace(low[0], high[0], 5)
                         for b in np.linspace(low[1], high[1], 5)], dtype=torch.float32)
    with torch.no_grad():
        decoded = trained["model"].decode(grid).squeeze(1).numpy()
    assert (decoded.max(axis=0) - decoded.min(axis=0)).max() > 0.1


def test_the_reports_accuracy_agrees_with_score():
    from zerohop_ecg.detection import accuracy
    from zerohop_ecg.sources import Truth

    signal, peaks, ectopic = ecg.synthesize(300.0, rate=360.0, heart_rate=150, ectopic=0.1, seed=4)
    found = np.from_dlpack(ecg.segment(signal, 360.0)["r_peaks"])[::7][1:]  # most beats missed
    truth = Truth(np.from_dlpack(peaks).astype(np.int64), ["V" if e else "N" for e in ectopic], "t")
    got = accuracy(found, truth, 360.0, signal.shape[0])
    sens, ppv, tp, fp, fn = ecg.score(found.tolist(), truth.samples.tolist(), 54.0, 1800,
                                      signal.shape[0])
    assert (got["tp"], got["fp"], got["fn"]) == (tp, fp, fn) and got["sensitivity"] == sens
    assert sum(c["found"] for c in got["classes"]) == tp


@requires_torch
def test_training_keeps_every_physical_core_however_loaded_the_machine(monkeypatch):
    from zerohop_ecg.vae import MAX_TRAINING_THREADS, physical_cores, training_threads

    cores = physical_cores(sorted(os.sched_getaffinity(0)))
    monkeypatch.setattr(os, "getloadavg", lambda: (1000.0, 1000.0, 1000.0))
    assert MAX_TRAINING_THREADS == 16
    assert training_threads() == max(1, min(cores, MAX_TRAINING_THREADS))
    assert training_threads(3) == 3


@requires_torch
def test_embedding_many_small_records_batches_across_them():
    from zerohop_ecg.vae import _normalised_batches

    parts = [torch.arange(k * 4, dtype=torch.float32).reshape(k, 4) + 100 * k
             for k in (3, 0, 5, 1)]
    batches = list(_normalised_batches(parts, 4, 4, "cpu", center=1.0, scale=2.0))
    assert [int(b.shape[0]) for b in batches] == [4, 4, 1]
    expected = (torch.cat(parts) - 1.0) / 2.0
    assert torch.equal(torch.cat(batches), expected)


@requires_torch
def test_a_short_recording_says_it_was_not_scored_and_warns_of_few_beats(tmp_path, capsys):
    assert main(["--synthetic", "0.0025", "--epochs", "2", "--no-plots",
                 "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "not scored: a 9.0 s recording, 5 s excluded at each end" in printed, printed
    assert "0.00 %" not in printed
    assert "warning: only 10 beats to train on (fewer than 50)" in printed
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Not scored: a 9.0 s recording, 5 s excluded at each end" in report
    assert "**warning**: only 10 beats" in report
    assert "The 10 highest of the 10 beats ranked." in report


@requires_torch
def test_planted_ectopic_beats_outrank_normal_beats_on_a_wandering_baseline():
    """Five minutes with 3 % premature ventricular beats and 0.5 mV of baseline wander: the
    beats the model reconstructs worst are the ectopic ones (before beats were levelled, the
    top of the ranking was normal beats riding the wander: 1 or 2 of 13)."""
    from zerohop_ecg.vae import embed, train

    rate = 360.0
    signal, peaks, ectopic = ecg.synthesize(300.0, rate=rate, heart_rate=75, ectopic=0.03,
                                            wander_mv=0.5, seed=2)
    seg = ecg.segment(signal, rate)
    beats = torch.from_dlpack(seg["beats"])
    truth = np.from_dlpack(peaks)
    nearest = np.abs(np.from_dlpack(seg["beat_peaks"])[:, None] - truth[None, :]).argmin(1)
    planted = np.asarray(ectopic)[nearest]
    trained = train(beats, epochs=20, seed=1, progress=False, threads=2)
    _, _, _, error = embed(trained["model"], beats, trained["scale"], center=trained["center"])
    ranked = np.argsort(-error.numpy())
    k = int(planted.sum())
    assert k >= 5
    assert planted[ranked[:k]].sum() >= k - 1, (k, planted[ranked[:k]])


def test_a_beat_s_baseline_is_levelled_whatever_its_offset_and_slope():
    from zerohop_ecg.vae import level_baseline_

    t = torch.linspace(0, 1, 256)
    shape = torch.exp(-((t - 0.5) / 0.02) ** 2)  # a spike amid flat ends
    rows = torch.stack([shape, shape + 3.0, shape + 2.0 * t - 1.0])
    level_baseline_(rows)
    assert torch.allclose(rows[1], rows[0], atol=1e-5) and torch.allclose(rows[2], rows[0],
                                                                            atol=1e-4)
    assert abs(float(rows[0, :16].mean())) < 1e-6 and abs(float(rows[0, -16:].mean())) < 1e-6


@requires_torch
def test_the_stopping_loss_watches_a_sample_of_the_held_out_beats_and_the_last_all(monkeypatch):
    from zerohop_ecg import vae

    signal, _, _ = ecg.synthesize(300.0, rate=360.0, seed=1)
    beats = torch.from_dlpack(ecg.segment(signal, 360.0)["beats"])
    held_out = len(beats) - int(0.75 * len(beats))
    measured: list[int] = []
    real = vae._held_out_loss

    def spy(model, normalised, indices, device, native=None):  # type: ignore[no-untyped-def]
        measured.append(len(indices))
        return real(model, normalised, indices, device, native)

    monkeypatch.setattr(vae, "_held_out_loss", spy)
    some = vae.train(beats, epochs=3, progress=False, threads=1, monitored=20)
    assert measured == [20, 20, 20, held_out]
    assert (some["monitored_beats"], some["held_out_beats"]) == (20, held_out)
    assert some["test_loss"] != some["held_out"][-1]  # the last over all, not the sample
    measured.clear()
    every = vae.train(beats, epochs=3, progress=False, threads=1, monitored=0)
    assert measured == [held_out] * 3 and every["test_loss"] == every["held_out"][-1]
    assert every["monitored_beats"] == every["held_out_beats"] == held_out
    assert vae.train(beats, epochs=1, progress=False, threads=1)["monitored_beats"] == \
        min(held_out, vae.MONITORED_BEATS)
    with pytest.raises(ValueError, match="monitored=-1"):
        vae.train(beats, epochs=1, progress=False, monitored=-1)


@requires_torch
def test_the_report_says_which_held_out_beats_stopped_training(tmp_path, capsys):
    from zerohop_ecg import vae
    from zerohop_ecg.__main__ import parser
    from zerohop_ecg.plots import held_out_label

    status, out = run_job(tmp_path, "--synthetic", "0.05", "--no-plots", "--epochs", "2",
                          "--held-out-beats", "10")
    assert status == 0, out
    report = (tmp_path / "out" / "report.md").read_text()
    assert re.search(r"held-out loss [\d.]+ over all [\d,]+ held-out beats \(after each "
                     r"epoch, to decide when to stop, over 10 of them\)", report), report
    assert held_out_label(10, 50) == "held-out (10 of 50 beats)"
    assert held_out_label(50, 50) == "held-out (50 beats)"
    assert f"(default {vae.MONITORED_BEATS}," in " ".join(parser().format_help().split())
    with pytest.raises(SystemExit) as refused:
        run_job(tmp_path, "--synthetic", "0.05", "--held-out-beats", "-1")
    assert refused.value.code == 2
    assert "--held-out-beats must be 0 to" in capsys.readouterr().err


def test_training_progress_in_a_log_is_a_line_every_few_seconds_with_the_time_left(monkeypatch):
    import io

    from zerohop_ecg import vae

    out, state, clock = io.StringIO(), {}, [0.0]
    monkeypatch.setattr(vae.time, "perf_counter", lambda: clock[0])
    for epoch in range(1, 31):
        clock[0] = epoch * 1.0
        vae._progress(epoch, 30, 0.5, 0.0, "lines", state, stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "  training: epoch 5/30, loss 0.50000, 5 s, about 25 s left"
    assert len(lines) == 6 and lines[-1].endswith("epoch 30/30, loss 0.50000, 30 s, done")
    assert "\r" not in out.getvalue()


@requires_torch
def test_training_stops_once_the_held_out_loss_stops_improving_and_says_so(monkeypatch):
    from zerohop_ecg import vae

    signal, _, _ = ecg.synthesize(60.0, rate=360.0, seed=1)
    beats = torch.from_dlpack(ecg.segment(signal, 360.0)["beats"])
    monkeypatch.setattr(vae, "_held_out_loss", lambda *a, **k: 1.0)  # flat from the start
    flat = vae.train(beats, epochs=30, progress=False, threads=1)
    assert (flat["epochs_run"], flat["best_epoch"], flat["stopped_early"]) == (6, 1, True)
    assert len(flat["losses"]) == len(flat["held_out"]) == 6
    assert vae.convergence_note(flat, 30).startswith("stopped after epoch 6 of 30")
    falling = iter([1.0 / (k + 1) for k in range(100)])
    monkeypatch.setattr(vae, "_held_out_loss", lambda *a, **k: next(falling))
    still = vae.train(beats, epochs=8, progress=False, threads=1)
    assert (still["epochs_run"], still["best_epoch"], still["stopped_early"]) == (8, 8, False)
    assert "not converged, more --epochs may help" in vae.convergence_note(still, 8)


def test_matplotlib_is_imported_on_a_thread_while_the_job_trains(monkeypatch):
    """The job imports pyplot (~0.4 s) beside training; a failing import is left for
    write_plots to report, never raised from the thread's join."""
    pytest.importorskip("matplotlib")
    import sys

    from zerohop_ecg import plots

    def broken() -> None:
        raise ImportError("no backend")

    monkeypatch.setattr(plots, "use_agg", broken)
    plots.import_in_background()()  # joined: the error stayed in the thread
    monkeypatch.undo()
    ready = plots.import_in_background()
    ready()
    import matplotlib

    assert "matplotlib.pyplot" in sys.modules and matplotlib.get_backend().lower() == "agg"


def test_the_decoded_grid_is_one_set_of_axes_with_scale_bars_and_only_beat_windows():
    pytest.importorskip("matplotlib")
    from matplotlib.collections import LineCollection

    from zerohop_ecg import plots

    plots.use_agg()
    decoded = np.sin(np.linspace(0, 3, 25 * 200)).reshape(25, 200) * 1.3
    grid = [(a, b) for b in (2.0, 1.0, 0.0, -1.0, -2.0) for a in (-2.0, -1.0, 0.0, 1.0, 2.0)]
    fig = plots.decoded_grid_figure(decoded, grid, -0.25, 360.0, "mV")
    (ax,) = fig.axes
    curves = [c for c in ax.collections if isinstance(c, LineCollection)][0].get_segments()
    assert len(curves) == 25 and all(len(c) == 200 for c in curves), "beat windows only"
    # Row by row from the highest μ₂, column by column from the lowest μ₁.
    assert curves[0][0, 1] > curves[5][0, 1] and curves[1][0, 0] > curves[0][0, 0]
    texts = [t.get_text() for t in ax.texts]
    assert "z=(-2.00, 2.00)" in texts and "z=(2.00, -2.00)" in texts
    assert "0.2 s" in texts and "0.5 mV" in texts  # the largest 1-2-5 bar within half a cell
    fig.clf()
