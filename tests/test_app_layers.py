"""The ECG app is a client of zerohop like any other (issue 43): scripts/check-app.py fails on
a cycle among the app's modules, however the import is written and wherever it runs, and on
any use of a private zerohop name; it passes an acyclic package that uses zerohop's public API,
and (once the app has moved there) the app's package itself."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check-app.py"
APP = ROOT / "apps" / "ecg" / "python" / "zerohop_ecg"

spec = importlib.util.spec_from_file_location("check_app", SCRIPT)
check_app = importlib.util.module_from_spec(spec)
sys.modules["check_app"] = check_app  # for its dataclasses
spec.loader.exec_module(check_app)


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
        timeout=120, cwd=ROOT,
    )


def package(tmp_path, files, name="app"):
    """A package folder `name` under tmp_path holding `files` (path: source); __init__.py
    is added empty unless given."""
    root = tmp_path / name
    files = {"__init__.py": "", **files}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def check(tmp_path, files, name="app"):
    return check_app.Package(package(tmp_path, files, name), name).check()


def edges(report):
    return {(a, b) for a, deps in report.graph.items() for b in deps}


def test_an_acyclic_package_using_zerohop_in_public_passes(tmp_path):
    root = package(tmp_path, {
        "__init__.py": "from .pipeline import run\n",
        "pipeline.py": """\
            import zerohop
            import zerohop.memory as zm
            from zerohop import Table
            from . import sources
            from .errors import AppError

            def run():
                from .report import write
                return zerohop.__version__, zm.Resource, Table, write
        """,
        "sources.py": "from .errors import AppError\n",
        "errors.py": "class AppError(Exception): pass\n",
        "report.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .sources import X
        """,
    })
    result = run("--package", root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "check-app: app: 5 modules, 6 imports, no cycle, no private zerohop name"
    )


def test_an_extension_module_is_a_leaf_not_the_package(tmp_path):
    """`from . import _native` names a compiled module (its stub beside the sources), which
    imports nothing of the package: no edge back to __init__, so no false cycle."""
    report = check(tmp_path, {
        "__init__.py": "from .kernels import run\n",
        "kernels.py": "from . import _native\nrun = _native.run\n",
        "_native.pyi": "def run() -> None: ...\n",
    })
    assert not report.cycles
    assert ("app.kernels", "app") not in edges(report)


def test_a_cycle_through_a_function_local_import_is_caught(tmp_path):
    root = package(tmp_path, {
        "pipeline.py": "from .records import find\n",
        "records.py": "def find():\n    from .pipeline import Config\n    return Config\n",
    })
    result = run("--package", root)
    assert result.returncode == 1
    assert "cycle: app.pipeline -> app.records -> app.pipeline" in result.stderr
    assert "records.py:2 (function-local)" in result.stderr
    assert "pipeline.py:1 (module-level)" in result.stderr


def test_a_type_checking_cycle_is_caught(tmp_path):
    report = check(tmp_path, {
        "sources.py": "from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from .pipeline import Config\n",
        "pipeline.py": "import typing\nif typing.TYPE_CHECKING:\n    import app.sources\n",
    })
    assert report.cycles == [["app.pipeline", "app.sources", "app.pipeline"]]
    assert "(TYPE_CHECKING)" in "\n".join(report.problems())


def test_a_cycle_lists_its_modules_in_order(tmp_path):
    result = run("--package", package(tmp_path, {
        "a.py": "from . import b\n",
        "b.py": "from app.c import f\n",
        "c.py": "import app.a\n",
        "d.py": "from . import a\n",
    }))
    assert result.returncode == 1
    assert "cycle: app.a -> app.b -> app.c -> app.a" in result.stderr
    assert "app.d" not in result.stderr.split("cycle:")[1]
    assert "1 cycle(s), 0 private zerohop use(s)" in result.stderr


@pytest.mark.parametrize("line", [
    "from . import b",
    "from .b import name",
    "from app.b import name",
    "from app import b",
    "import app.b",
    "import app.b as bee",
    "from .b import *",
])
def test_each_form_of_import_is_an_edge_to_the_submodule(tmp_path, line):
    report = check(tmp_path, {"a.py": line + "\n", "b.py": ""})
    assert edges(report) == {("app.a", "app.b")}


def test_an_import_of_a_name_from_the_package_is_an_edge_to_its_init(tmp_path):
    report = check(tmp_path, {
        "__init__.py": "from .reader import read\nRECORD = 'mitdb100'\n",
        "reader.py": "def read():\n    from . import RECORD\n    return RECORD\n",
    })
    assert edges(report) == {("app", "app.reader"), ("app.reader", "app")}
    assert report.cycles == [["app", "app.reader", "app"]]


def test_a_subpackage_resolves_its_relative_imports(tmp_path):
    report = check(tmp_path, {
        "plots/__init__.py": "from .figures import draw\n",
        "plots/figures.py": "from ..errors import AppError\nfrom . import style\n",
        "plots/style.py": "",
        "errors.py": "",
    })
    assert edges(report) == {
        ("app.plots", "app.plots.figures"), ("app.plots.figures", "app.errors"),
        ("app.plots.figures", "app.plots.style"),
    }
    assert report.cycles == []


def test_third_party_and_standard_imports_are_ignored(tmp_path):
    report = check(tmp_path, {"a.py": """\
        import os
        from torch import _C

        def train():
            import numpy as np
            from matplotlib import pyplot
            return np._NoValue, _C, os._exit
    """})
    assert edges(report) == set()
    assert report.problems() == []


def test_the_apps_own_private_names_are_its_own(tmp_path):
    report = check(tmp_path, {"a.py": "from .report import _bytes\n", "report.py": "_bytes = 1\n"})
    assert report.problems() == []


@pytest.mark.parametrize("source, line, name", [
    ("import zerohop._zerohop\n", 1, "zerohop._zerohop"),
    ("from zerohop import _zerohop\n", 1, "zerohop._zerohop"),
    ("from zerohop._zerohop import ecg\n", 1, "zerohop._zerohop.ecg"),
    ("from zerohop.memory import _Pool\n", 1, "zerohop.memory._Pool"),
    ("import zerohop\nTable = zerohop._zerohop.Table\n", 2, "zerohop._zerohop"),
    ("import zerohop as zh\nx = zh._install\n", 2, "zerohop._install"),
    ("import zerohop.memory as zm\nx = zm._pool\n", 2, "zerohop.memory._pool"),
    ("from zerohop import memory\nx = memory._pool\n", 2, "zerohop.memory._pool"),
    ("import zerohop\nx = getattr(zerohop, '_zerohop')\n", 2, "zerohop._zerohop"),
    ("import importlib\nm = importlib.import_module('zerohop._zerohop')\n", 2, "zerohop._zerohop"),
    ("def f():\n    from zerohop._zerohop import ecg\n", 2, "zerohop._zerohop.ecg"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from zerohop._zerohop import Tensor\n", 3, "zerohop._zerohop.Tensor"),
])
def test_each_private_zerohop_name_is_caught(tmp_path, source, line, name):
    result = run("--package", package(tmp_path, {"a.py": source}))
    assert result.returncode == 1
    assert f"a.py:{line}: " in result.stderr
    assert f"private name {name} " in result.stderr
    assert "0 cycle(s), 1 private zerohop use(s)" in result.stderr


def test_a_public_import_from_zerohop_passes(tmp_path):
    report = check(tmp_path, {"a.py": "from zerohop import Table\nimport zerohop\n"
                                      "v = zerohop.__version__\n"})
    assert report.problems() == []


def test_relative_imports_out_of_the_old_location_are_caught(tmp_path):
    """While the app sat inside zerohop (python/zerohop/ecg), `..` reached zerohop itself."""
    (tmp_path / "zerohop").mkdir()
    (tmp_path / "zerohop" / "__init__.py").write_text("")
    root = package(tmp_path / "zerohop", {
        "__init__.py": "from .. import _zerohop\n",
        "adam.py": "from .._zerohop import ecg as _ecg\n",
        "plots.py": "from .. import Table\n",
        "records.py": "from zerohop.ecg import adam\nfrom zerohop import ecg\n",
    }, name="ecg")
    assert check_app.dotted_name(root) == "zerohop.ecg"
    report = check_app.Package(root, "zerohop.ecg").check()
    problems = "\n".join(report.problems())
    assert "ecg/__init__.py:1: imports zerohop's private name zerohop._zerohop " in problems
    assert "ecg/adam.py:1: imports zerohop's private name zerohop._zerohop.ecg " in problems
    assert "ecg/plots.py:1: `from .. import Table` climbs out of the package zerohop.ecg" \
        in problems
    assert len(report.private) == 3
    assert edges(report) == {("zerohop.ecg.records", "zerohop.ecg.adam"),
                             ("zerohop.ecg.records", "zerohop.ecg")}


def test_a_relative_import_above_a_top_level_package_is_caught(tmp_path):
    report = check(tmp_path, {"a.py": "from .. import zerohop\n"}, name="zerohop_ecg")
    assert report.private == [
        f"{check_app.shown(tmp_path / 'zerohop_ecg' / 'a.py')}:1: `from .. import zerohop` climbs "
        "out of the top-level package zerohop_ecg"
    ]


@pytest.mark.skipif(not APP.is_dir(),
                    reason="the ECG app has not moved to apps/ecg/python/zerohop_ecg yet")
def test_the_app_has_no_cycle_and_no_private_zerohop_name():
    for result in (run("--package", APP), run()):
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("check-app: zerohop_ecg: ")
        assert result.stdout.rstrip().endswith(" no cycle, no private zerohop name")
