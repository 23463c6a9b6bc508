"""torch's own tools with zerohop's pool installed (the default torch_mode "mempool"): one
test per tool a torch user reaches for, each run in a fresh process by bench/torch_tools.py,
which checks answers, not only the absence of errors (graph replays against eager results
after the memory around them was reused; statistics against zerohop's own). Skipped without
a GPU."""

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import zerohop.cuda

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (zerohop.cuda.is_available() and torch.cuda.is_available()),
    reason="needs a CUDA GPU and a CUDA build of torch",
)

_spec = importlib.util.spec_from_file_location(
    "torch_tools", Path(__file__).resolve().parents[2] / "bench" / "torch_tools.py"
)
tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tools)


@pytest.fixture(scope="module")
def with_zerohops_pool():
    """Every row at once, 6 processes at a time: each compiles or captures on its own."""
    rows = list(tools.ROWS)
    with ThreadPoolExecutor(6) as pool:
        results = pool.map(lambda row: tools.run_child(["--child", "mempool", row]), rows)
    return dict(zip(rows, results))


@pytest.mark.parametrize("row", list(tools.ROWS))
def test_a_torch_tool_works_with_zerohops_pool_underneath(with_zerohops_pool, row):
    result = with_zerohops_pool[row]
    print(row, "->", result["detail"])
    assert result["ok"], result["detail"]


def test_the_replaced_allocator_still_serves_torch_and_says_what_it_cannot_do():
    """torch_mode="allocator": every tensor a zerohop block; torch's statistics fail with
    torch's own words, which docs/memory.md's table quotes."""
    works = tools.run_child(["--child", "allocator", "CuPy and torch share the pool"])
    assert works["ok"], works["detail"]
    stats = tools.run_child(["--child", "allocator", "memory_allocated()"])
    assert not stats["ok"] and "getDeviceStats" in stats["detail"], stats["detail"]
