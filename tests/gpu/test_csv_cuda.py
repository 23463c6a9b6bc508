"""The CSV reader on the GPU against the CPU reader: bitwise the same values and the same
errors (line, column, reason) over the fuzz seed corpus and over generated tables in many
styles; the table in device memory from the current zerohop resource. Skipped without a GPU."""

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zerohop
import zerohop.cuda
import zerohop_ecg as ecg
import zerohop.memory as zm
from table_bits import column_bits

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

SEEDS = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "csv_reader"


@pytest.fixture(scope="module", autouse=True)
def nvrtc():
    zerohop.cuda.preload_nvrtc()


def outcome(path, **options):
    """("ok", {name: uint32 bits}) or ("error", type name, message) for both devices."""
    results = []
    for device in ("cpu", "cuda:0"):
        try:
            table = ecg.read_csv(path, device=device, **options)
        except (ValueError, OSError) as e:
            results.append(("error", type(e).__name__, str(e)))
            continue
        results.append(("ok", column_bits(table, device, torch)))
    return results


def assert_same(path, **options):
    cpu, gpu = outcome(path, **options)
    if cpu[0] == "ok" and gpu[0] == "ok":
        assert list(cpu[1]) == list(gpu[1]), path
        for name in cpu[1]:
            a, b = cpu[1][name], gpu[1][name]
            assert a.shape == b.shape, (path, name)
            bad = np.flatnonzero(a != b)
            assert len(bad) == 0, (path, name, bad[:5], a[bad[:5]], b[bad[:5]])
    else:
        assert cpu == gpu, path
    return cpu


def test_the_fuzz_seed_corpus_reads_the_same(tmp_path):
    seeds = sorted(SEEDS.iterdir())
    assert len(seeds) > 100
    kinds = {"ok": 0, "error": 0}
    for seed in seeds:
        path = tmp_path / "seed.csv"
        path.write_bytes(seed.read_bytes())
        kinds[assert_same(path)[0]] += 1
    # The corpus exercises both sides of the comparison.
    assert kinds["ok"] > 10 and kinds["error"] > 10, kinds


def styled_table(rng, rows, columns, style):
    """A CSV text of `rows` rows: plain decimals mostly, with the forms the host takes."""
    d = style.get("delimiter", ",")
    eol = style.get("eol", "\n")
    lines = []
    if style.get("header", True):
        lines.append(d.join(f"c{i}" if not style.get("quoted") else f'"c{i}"'
                            for i in range(columns)))
        if style.get("units"):
            lines.append(d.join("'mV'" for _ in range(columns)))
    for r in range(rows):
        fields = []
        for _ in range(columns):
            digits = rng.randint(0, 6)
            v = rng.randint(-10**7, 10**7) / 10**digits
            text = f"{v:.{digits}f}"
            roll = rng.random()
            if roll < style.get("exponents", 0.0):
                text = f"{v:e}"
            elif roll < style.get("exponents", 0.0) + style.get("spaces", 0.0):
                text = f"  {text} "
            elif roll < style.get("exponents", 0.0) + style.get("spaces", 0.0) + \
                    style.get("quotes", 0.0):
                text = f'"{text}"'
            fields.append(text)
        lines.append(d.join(fields))
    text = eol.join(lines)
    if style.get("trailing_eol", True):
        text += eol
    return text + style.get("tail", "")


STYLES = {
    "plain": {},
    "crlf": {"eol": "\r\n"},
    "no final newline": {"trailing_eol": False},
    "semicolons, units row": {"delimiter": ";", "units": True},
    "tabs, quoted names": {"delimiter": "\t", "quoted": True},
    "headerless": {"header": False},
    "exponents and spaces": {"exponents": 0.01, "spaces": 0.01},
    "quoted values": {"quotes": 0.02},
    "trailing blank lines": {"tail": "\n  \n"},
}


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("columns", [1, 3])
def test_generated_tables_read_the_same(tmp_path, style, columns):
    rng = random.Random(f"{style}{columns}")
    path = tmp_path / "t.csv"
    path.write_text(styled_table(rng, 20_000, columns, STYLES[style]))
    result = assert_same(path)
    assert result[0] == "ok", result


def test_a_large_file_crosses_every_chunk_and_lane(tmp_path):
    # About 60 MB: more chunks than reading threads, rows split across chunk edges.
    rng = random.Random(7)
    path = tmp_path / "big.csv"
    body = "\n".join(f"{rng.randint(-99999, 99999) / 10000:.4f},{i}" for i in range(4_000_000))
    path.write_text("mv,i\n" + body + "\n")
    assert path.stat().st_size > 40e6
    table, report = ecg.read_csv(path, device="cuda:0", report=True)
    assert report["fallback"] is None and report["host_lines"] == 0
    assert report["rows"] == 4_000_000 == len(table)
    assert_same(path)


def test_columns_selected_and_empty_fields(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1.5,,3\n4,5.25,\n7,8,9\n")
    assert_same(path, columns=["c", "0"], empty="nan")
    assert_same(path, empty=-1.0)
    cpu, gpu = outcome(path)
    assert cpu == gpu and cpu[0] == "error" and "line 2, column 2 (b)" in cpu[2]


@pytest.mark.parametrize("bad", ["1.5,x\n", "1.5\n", "1.5,2,3\n", "nan,1\n", ",1\n"])
def test_errors_name_the_same_line_and_column(tmp_path, bad):
    rng = random.Random(3)
    rows = [f"{rng.randint(-9999, 9999) / 1000:.3f},{rng.randint(0, 99)}" for _ in range(50_000)]
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "\n".join(rows[:31_337]) + "\n" + bad + "\n".join(rows[31_337:]))
    cpu, gpu = outcome(path)
    assert cpu[0] == "error" and "line 31339" in cpu[2], cpu
    assert cpu == gpu


def test_a_blank_line_inside_the_data_falls_back_to_the_host(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("mv\n1\n2\n\n3\n4\n")
    table, report = ecg.read_csv(path, device="cuda:0", report=True)
    assert report["fallback"] == "blank lines inside the data"
    assert torch.from_dlpack(table["mv"]).cpu().tolist() == [1, 2, 3, 4]
    assert_same(path)


def test_clock_times_everywhere_fall_back_and_stay_right(tmp_path):
    path = tmp_path / "t.csv"
    rows = [f"'0:{i // 1000:02d}.{i % 1000:03d}',{i / 100:.2f}" for i in range(5000)]
    path.write_text("'Elapsed time','MLII'\n'hh:mm:ss.mmm','mV'\n" + "\n".join(rows) + "\n")
    table, report = ecg.read_csv(path, device="cuda:0", report=True)
    assert report["fallback"] is not None and "host" in report["fallback"]
    assert_same(path)


def test_the_table_comes_from_the_current_device_resource(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("mv\n" + "\n".join(f"{i / 8:.3f}" for i in range(100_000)) + "\n")
    stats = zm.Stats(zm.Pool(zm.CudaDevice(0)))
    zm.set_current(stats)
    try:
        table = ecg.read_csv(path, device="cuda:0")
        pointer = torch.from_dlpack(table["mv"]).data_ptr()
        assert zm.stats(stats)["current_bytes"] >= 100_000 * 4
        # The tensor torch sees is the table's column, not a copy.
        assert pointer == table["mv"].__cuda_array_interface__["data"][0]
        del table
    finally:
        zm.reset_current("cuda:0")


def test_the_ecg_job_reads_its_csv_on_the_gpu(tmp_path):
    signal, *_ = ecg.synthesize(120, rate=250, seed=1)
    path = tmp_path / "ecg.csv"
    path.write_text("mv\n" + "\n".join(f"{v:.4f}" for v in np.from_dlpack(signal)) + "\n")
    from zerohop_ecg.pipeline import Config, run

    result = run(Config(csv=path, rate=250.0, device="cuda", epochs=1, plots=False,
                        progress=False, out=tmp_path / "out"), say=lambda *_: None)
    assert result.stages[0][0] == "parse CSV into a zerohop Table in GPU memory"
    assert all(same for _, _, same in result.hand_offs)


def test_a_lab_export_with_gaps_reads_and_draws_on_the_gpu_without_torch_in_the_read(tmp_path):
    signal, *_ = ecg.synthesize(120, rate=250, seed=2)
    values = np.from_dlpack(signal)
    lines = [f"{k / 250:.4f},{v:.4f}" for k, v in enumerate(values)]
    for k in (1000, 1001, 5000):  # blank cells: --fill interpolate
        lines[k] = lines[k].split(",")[0] + ","
    path = tmp_path / "export.csv"
    path.write_text("time_s,MLII\n" + "\n".join(lines) + "\n")
    from zerohop_ecg.pipeline import Config, run

    result = run(Config(csv=path, device="cuda", fill="interpolate", epochs=1, plots=True,
                        progress=False, out=tmp_path / "out"), say=lambda *_: None)
    assert result.stages[0][0] == "parse CSV into a zerohop Table in GPU memory"
    copied = dict((name, n) for name, _, n in result.stages)
    back = next(n for name, n in copied.items() if name.startswith("device → host"))
    assert back >= 4 * len(values)  # the signal's host copy is counted
    assert result.plots["signal_peaks"].is_file()
    report = result.report.read_text()
    assert "30,000 samples at 250 Hz" in report  # the rate came from the time column
    assert "3 missing sample(s) in column 'MLII' interpolated" in report


POOL_JOB = r"""
import gc, sys
from pathlib import Path
import torch
import zerohop.memory as zm
from zerohop_ecg import shared_pool
from zerohop_ecg.pipeline import Config, run

pools = []
real = shared_pool.SharedPool.__init__
def keep(self, device):
    real(self, device)
    pools.append(self)
shared_pool.SharedPool.__init__ = keep

result = run(Config(csv=Path(sys.argv[1]), rate=250.0, device="cuda", epochs=2, plots=False,
                    progress=False, out=Path(sys.argv[2])), say=lambda *_: None)
(pool,) = pools
memory = result.memory
assert memory is not None and memory["peak_bytes"] > 0, memory
# torch's segments (2 MiB and up) and the reader's and kernels' blocks (smaller) in one pool.
sizes = [size for size, count in zm.stats(pool.stats)["histogram"] if count]
assert min(sizes) < (1 << 20) and max(sizes) >= (2 << 20), sizes
report = result.report.read_text()
assert "- memory: one zerohop pool" in report, report
assert "each step one CUDA graph replay" in report, report
# The job over and its result gone: the pool holds nothing (torch's cuBLAS workspaces, which
# never die on their own, were the last blocks it held; the installation's close drops them).
del result
gc.collect()
torch.cuda.empty_cache()
held = zm.leaks(pool.tracking)
assert held == [], [block["bytes"] for block in held]
print("ok", memory)
"""


def test_the_gpu_job_trains_from_one_pool_with_cuda_graphs(tmp_path):
    """The flagship's shared pool: the reader, zerohop's kernels and torch (its CUDA graph
    too) draw from one zerohop pool; the report gives its peak and what it holds; after the
    job nothing is left in it. In a fresh process: torch's allocator routes once per
    process."""
    signal, *_ = ecg.synthesize(120, rate=250, seed=3)
    path = tmp_path / "ecg.csv"
    path.write_text("mv\n" + "\n".join(f"{v:.4f}" for v in np.from_dlpack(signal)) + "\n")
    done = subprocess.run([sys.executable, "-c", POOL_JOB, str(path), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    print(done.stdout[-2000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout
