"""docs/benchmarks.md is generated from bench/results/ by scripts/benchmarks-page.py, and is
never stale: a results file added or changed without regenerating the page fails here."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "benchmarks-page.py"
PAGE = ROOT / "docs" / "benchmarks.md"

# scripts/gpu-check.sh runs the suite from a copy without scripts/ and bench/.
pytestmark = pytest.mark.skipif(not SCRIPT.exists() or not (ROOT / "bench" / "results").is_dir(),
                                reason="needs the repository's scripts/ and bench/results/")


def load():
    spec = importlib.util.spec_from_file_location("benchmarks_page", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_scripts_output():
    page = load().render()
    assert PAGE.read_text(encoding="utf-8") == page, (
        "docs/benchmarks.md is out of date with bench/results/: run "
        "python scripts/benchmarks-page.py")


def test_check_mode_agrees():
    run = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_every_results_file_is_an_entry_newest_first():
    module = load()
    entries = module.read_entries()
    names = {p.name for p in (ROOT / "bench" / "results").glob("*.md")}
    assert {e.name for e in entries} == names
    dates = [e.date or "" for e in entries]
    assert dates == sorted(dates, reverse=True)
    page = module.render()
    for e in entries:
        assert f"{{#{e.anchor}}}" in page and f"`bench/results/{e.name}`" in page
        assert e.machine and e.title


def test_machine_and_date_come_from_the_file_name(tmp_path):
    module = load()
    (tmp_path / "gpu-h200x2-2031-01-02-thing.md").write_text("# Two cards\n\n| a |\n|---|\n| 1 |\n")
    (tmp_path / "gpu-h100-2030-05-06.md").write_text("# One card\n\n## A section\n\ntext\n")
    (tmp_path / "plain.md").write_text("Something measured (2029-01-01, x86_64, 2 cores).\n")
    entries = module.read_entries(tmp_path)
    assert [(e.date, e.machine) for e in entries] == [
        ("2031-01-02", "2 × NVIDIA H200"),
        ("2030-05-06", "NVIDIA H100"),
        ("2029-01-01", "2-core x86_64"),
    ]
    page = module.render(tmp_path)
    # The file's headings sit below the entry's own `##`.
    assert re.search(r"^### A section$", page, re.M)
    assert page.index("Two cards") < page.index("One card") < page.index("Something measured")
