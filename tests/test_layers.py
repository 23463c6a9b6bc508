"""The Python extension crate keeps its layers: scripts/check-layers.py passes on the tree and
fails on an upward use or a cycle."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check-layers.py"
SRC = ROOT / "crates" / "zerohop-python" / "src"


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
        timeout=120,
    )


def test_the_crate_has_no_cycle_and_no_upward_use():
    result = run()
    assert result.returncode == 0, result.stderr
    assert "no cycle" in result.stdout


def with_use(tmp_path, file, line):
    """A copy of the crate's sources with `line` put at the top of `file`."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    target = src / file
    target.write_text(line + "\n" + target.read_text())
    return src


def test_an_upward_use_is_caught(tmp_path):
    result = run(with_use(tmp_path, "base/tensor.rs", "use crate::tables::table::PyTable;"))
    assert result.returncode == 1
    assert "base::tensor uses tables::table, a layer above it" in result.stderr


def test_a_cycle_inside_a_layer_is_caught(tmp_path):
    result = run(with_use(tmp_path, "tables/storage.rs", "use crate::tables::table::PyTable;"))
    assert result.returncode == 1
    assert "cycle: tables::table -> tables::storage -> tables::table" in result.stderr


def test_the_crate_stays_a_layer_of_conversions(tmp_path):
    assert "lines of code (at most 3000)" in run().stdout
    padded = with_use(tmp_path, "base/value.rs", "\n".join(f"const L{i}: u8 = 0;" for i in range(100)))
    result = run(padded)
    assert result.returncode == 1
    assert "over the 3000 an extension of conversions needs" in result.stderr


@pytest.mark.parametrize("line", [
    'fn f(py: Python<\'_>) { let _ = py.import("zerohop"); }',
    'fn f(py: Python<\'_>) { let _ = py.import(intern!(py, "zerohop.memory")); }',
])
def test_a_detour_through_the_python_package_is_caught(tmp_path, line):
    result = run(with_use(tmp_path, "tables/storage.rs", line))
    assert result.returncode == 1
    assert "imports the Python package" in result.stderr


def test_the_extension_module_itself_is_not_a_detour(tmp_path):
    line = 'fn f(py: Python<\'_>) { let _ = py.import(intern!(py, "zerohop._zerohop")); }'
    assert run(with_use(tmp_path, "tables/storage.rs", line)).returncode == 0
