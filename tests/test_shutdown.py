"""Lifetimes at the edges: capsules that nobody consumes, consumers that outlive their
producer's Python object, and deleters that run while the interpreter shuts down.

Leaks at shutdown are proven with a Log resource: the log file is written when the resource
itself is dropped, which happens only after the last block it handed out was freed. A
complete log whose allocations all have frees means nothing leaked, even during teardown;
a leak leaves the file empty (see the control test)."""

import csv
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zerohop
import zerohop.memory as zm
from conftest import address, requires_torch, torch

pa = pytest.importorskip("pyarrow")




def capsule_makers(tensor, table):
    return {
        "dltensor": lambda: tensor.__dlpack__(),
        "dltensor_versioned": lambda: tensor.__dlpack__(max_version=(1, 3)),
        "tensor arrow array": lambda: tensor.__arrow_c_array__(),
        "tensor arrow device array": lambda: tensor.__arrow_c_device_array__(),
        "table arrow array": lambda: table.__arrow_c_array__(),
        "table arrow stream": lambda: table.__arrow_c_stream__(),
        "table arrow device array": lambda: table.__arrow_c_device_array__(),
        "table arrow schema": lambda: table.__arrow_c_schema__(),
    }


def test_capsules_never_consumed_release_what_they_hold(tracking):
    tensor = zerohop.zeros((256,), "float32")
    table = zerohop.Table([("x", "float64"), ("n", "int32")], 100)
    makers = capsule_makers(tensor, table)
    capsules = {name: make() for name, make in makers.items()}
    del tensor, table, makers
    gc.collect()
    assert len(zm.leaks(tracking)) == 2, "the capsules keep both allocations alive"
    capsules.clear()
    gc.collect()
    assert zm.leaks(tracking) == []


def test_each_unconsumed_capsule_alone_keeps_its_memory_until_dropped(tracking):
    for name in capsule_makers(None, None):
        tensor = zerohop.zeros((64,), "int16")
        table = zerohop.Table([("x", "float32")], 10)
        capsule = capsule_makers(tensor, table)[name]()
        del tensor, table
        gc.collect()
        if name != "table arrow schema":  # a schema holds no data
            assert zm.leaks(tracking) != [], name
        del capsule
        gc.collect()
        assert zm.leaks(tracking) == [], name


def test_pyarrow_outlives_the_zerohop_table_it_shares(tracking):
    table = zerohop.Table([("x", "float64"), ("n", "int64")], 1000)
    table["x"].numpy()[:] = np.arange(1000)
    ptr = table["x"].data_ptr
    shared = pa.table(table)
    assert shared.column("x").chunks[0].buffers()[1].address == ptr
    del table
    gc.collect()
    assert zm.leaks(tracking) != []
    assert shared.column("x").to_pylist()[999] == 999.0
    del shared
    gc.collect()
    assert zm.leaks(tracking) == []


def test_zerohop_outlives_the_pyarrow_producer():
    source = pa.array(np.arange(5000, dtype=np.int32))
    ptr = source.buffers()[1].address
    imported = zerohop.from_arrow(pa.table({"v": source}))
    del source
    gc.collect()
    view = imported["v"]
    assert view.data_ptr == ptr
    assert np.from_dlpack(view)[4999] == 4999


@requires_torch
def test_torch_outlives_a_table_and_its_tensor_map(tracking):
    table = zerohop.Table([("x", "float32"), ("y", "float32")], 64)
    table["y"].numpy()[:] = 2.5
    xy = table.tensors({"xy": ["x", "y"]}, "torch")[0]
    assert address(xy) == table["x"].data_ptr
    del table
    gc.collect()
    assert xy[63, 1].item() == 2.5
    del xy
    gc.collect()
    assert zm.leaks(tracking) == []


SHUTDOWN_SCRIPT = textwrap.dedent(
    """
    import atexit, sys
    import numpy as np, pyarrow as pa, zerohop, zerohop.memory as zm
    try:
        import torch
    except ImportError:
        torch = None

    log = zm.Log(zm.Pool(zm.System()), sys.argv[1])
    zm.set_current(log)
    # The current-resource slot is a process-wide static; clearing it leaves only the blocks
    # (and `log` itself) holding the resource, so it is dropped, and its file written, once
    # the last block is freed during teardown.
    atexit.register(zm.reset_current)

    owned = zerohop.zeros((1 << 16,), "float32")
    capsules = [owned.__dlpack__(), owned.__dlpack__(max_version=(1, 3))]
    np_view = np.from_dlpack(owned)
    table = zerohop.Table([("x", "float32"), ("y", "float32")], 1000)
    arrow_capsules = [table.__arrow_c_array__(), table.__arrow_c_stream__()]
    arrow_view = pa.table(table)
    foreign = zerohop.from_dlpack(np.arange(1000.0))
    if torch is not None:
        torch_view = torch.from_dlpack(owned)
        torch_map = table.tensors({"xy": ["x", "y"]}, "torch")
        from_torch = zerohop.from_dlpack(torch.ones(1000))

    class Cycle:
        pass
    cycle = Cycle()
    cycle.me, cycle.tensor = cycle, zerohop.zeros((100,), "int64")

    class DropsOnTeardown:
        def __init__(self, view):
            self.view = view
        def __del__(self):
            # A deleter that runs while modules are being torn down.
            del self.view
    holder = DropsOnTeardown(np.from_dlpack(zerohop.zeros((10,), "float64")))
    print("ready", flush=True)
    """
)

LEAK = textwrap.dedent(
    """
    import threading, time
    threading.Thread(target=lambda held=owned: time.sleep(60), daemon=True).start()
    """
)


def run_and_read_log(tmp_path, tail):
    log = tmp_path / "events.csv"
    result = subprocess.run(
        [sys.executable, "-c", SHUTDOWN_SCRIPT + tail, str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "ready" in result.stdout, result.stderr
    assert "Fatal" not in result.stderr and "panicked" not in result.stderr, result.stderr
    rows = list(csv.DictReader(log.open())) if log.stat().st_size else None
    return result, rows


@pytest.mark.parametrize(
    "ending", ["", "raise SystemExit(0)", "raise RuntimeError('unhandled')"]
)
def test_every_block_is_freed_by_interpreter_teardown(tmp_path, ending):
    result, rows = run_and_read_log(tmp_path, "\n" + ending)
    assert result.returncode == (1 if "RuntimeError" in ending else 0), result.stderr
    assert rows is not None, "the log was never written: a block outlived the interpreter"
    allocated = [r["pointer"] for r in rows if r["action"] == "allocate"]
    freed = [r["pointer"] for r in rows if r["action"] == "free"]
    assert len(allocated) == 4  # owned, the table, the cycle's tensor, the holder's tensor
    assert sorted(allocated) == sorted(freed)


def test_the_teardown_check_sees_a_leak(tmp_path):
    """Control: a daemon thread still holding a tensor at exit keeps its block, and the
    resource, alive, so the log is never written and the check above would fail."""
    result, rows = run_and_read_log(tmp_path, LEAK)
    assert result.returncode == 0, result.stderr
    assert rows is None
