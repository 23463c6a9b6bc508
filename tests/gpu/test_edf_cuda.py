"""The EDF/BDF reader straight into device memory against the host reader: bitwise the same
values, the same annotations, limits and errors; EDF+D files go through the host and say so;
the table comes from the device's current zerohop resource. Skipped without a GPU."""

import sys
from pathlib import Path

import numpy as np
import pytest

import zerohop
import zerohop.cuda
import zerohop.memory as zm
import zerohop_ecg as ecg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "apps" / "ecg" / "tests"))
from edf_files import tal, write_edf  # noqa: E402
from table_bits import column_bits  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)
SEEDS = ROOT / "fuzz" / "seeds" / "edf_reader"


@pytest.fixture(scope="module", autouse=True)
def nvrtc():
    zerohop.cuda.preload_nvrtc()


def both(path, **options):
    """Each device's outcome: ("ok", {name: uint32 bits}, info without timings) or ("error",
    type, message)."""
    results = []
    for device in ("cpu", "cuda:0"):
        try:
            table, info = ecg.read_edf(path, device=device, **options)
        except (ValueError, OSError) as e:
            results.append(("error", type(e).__name__, str(e)))
            continue
        bits = column_bits(table, device, torch)
        info = {k: v for k, v in info.items() if k not in ("timings", "fallback", "bytes")}
        info["beats"] = (info["beats"]["sample"].tolist(), info["beats"]["symbol"])
        notes = info["annotations"]
        info["annotations"] = (notes["onset"].tolist(),
                               np.nan_to_num(notes["duration"], nan=-1.0).tolist(),
                               notes["text"])
        results.append(("ok", bits, info))
    return results


def assert_same(path, **options):
    cpu, gpu = both(path, **options)
    assert cpu[0] == gpu[0], (cpu[:2], gpu[:2])
    if cpu[0] == "error":
        assert cpu == gpu
        return
    assert cpu[1].keys() == gpu[1].keys()
    for name in cpu[1]:
        np.testing.assert_array_equal(cpu[1][name], gpu[1][name], err_msg=name)
    assert cpu[2] == gpu[2]


@pytest.mark.parametrize("bdf", [False, True])
def test_a_day_long_holter_file_reads_bitwise_as_on_the_host(tmp_path, bdf):
    # 2 h at 256 Hz and a 32 Hz signal interleaved, 1-s records, beats every 0.8 s.
    rng = np.random.default_rng(3)
    seconds = 2 * 3600
    ecg_values = np.cumsum(rng.normal(0, 0.01, 256 * seconds)) % 4 - 2
    resp = np.sin(np.arange(32 * seconds) / 30.0)
    tals = [tal(r + 0.4, "N") + (tal(r + 0.8, "V") if r % 7 == 0 else b"")
            for r in range(seconds)]
    path = write_edf(tmp_path / ("holter.bdf" if bdf else "holter.edf"),
                     [("ECG II", ecg_values, 256, (-2.5, 2.5)), ("Resp", resp, 32, (-1, 1))],
                     seconds=1, bdf=bdf, plus="C", tals=tals)
    assert_same(path, leads=["ECG II"])
    assert_same(path, leads=["Resp"])
    _, info = ecg.read_edf(path, leads=["ECG II"], device="cuda:0")
    assert info["fallback"] is None and info["bytes"] > 0
    assert len(info["beats"]["sample"]) == seconds + seconds // 7 + 1


def test_clipped_samples_are_counted_on_the_device(tmp_path):
    values = np.concatenate([np.full(100, 9.0), np.linspace(-1, 1, 900), np.full(24, -9.0)])
    path = write_edf(tmp_path / "clip.edf", [("ECG", values, 256, (-2, 2))], seconds=1)
    cpu, gpu = both(path)
    assert cpu[2]["at_limits"] == gpu[2]["at_limits"] == [124]


def test_edf_plus_d_goes_through_the_host_and_says_so(tmp_path):
    x = np.sin(np.arange(300 * 3) / 9.0)
    path = write_edf(tmp_path / "d.edf", [("ECG", x, 300, (-1, 1))], seconds=1, plus="D",
                     starts=[0, 1, 5])
    assert_same(path)
    _, info = ecg.read_edf(path, device="cuda:0")
    assert "EDF+D" in info["fallback"] and info["gaps"] == [(600, 900, 2.0)]


def test_seed_files_and_their_damage_give_the_same_outcome(tmp_path):
    for seed in sorted(SEEDS.iterdir()):
        data = seed.read_bytes()[1:]
        for cut in (len(data), len(data) - 7, 300, 256):
            path = tmp_path / f"{seed.name}-{cut}"
            path.write_bytes(data[:cut])
            assert_same(path)


def test_the_table_comes_from_the_current_zerohop_resource(tmp_path):
    x = np.sin(np.arange(360 * 60) / 11.0)
    path = write_edf(tmp_path / "pool.edf", [("ECG", x, 360, (-1, 1))], seconds=1)
    stats = zm.Stats(zm.Pool(zm.CudaDevice(0)))
    zm.set_current(stats)
    try:
        table, _ = ecg.read_edf(path, device="cuda:0")
        assert zm.stats(stats)["current_bytes"] >= 360 * 60 * 4
        pointer = torch.from_dlpack(table["ECG"]).data_ptr()
        assert pointer == table["ECG"].__cuda_array_interface__["data"][0]
        del table
    finally:
        zm.reset_current("cuda:0")


def test_the_ecg_job_reads_an_edf_file_on_the_gpu(tmp_path):
    from zerohop_ecg.__main__ import main

    table, _ = ecg.read_wfdb(ecg.RECORD_100)
    x = np.from_dlpack(table["MLII"])[:360 * 120]
    path = write_edf(tmp_path / "job.edf", [("ECG II", x, 360, (-5, 5))], seconds=1,
                     plus="C", tals=[b""] * 120)
    code = main(["--edf", str(path), "--device", "cuda", "--epochs", "1", "--no-plots",
                 "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "read EDF into a zerohop Table in GPU memory" in report
