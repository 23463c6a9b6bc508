"""Who keeps what alive: producers outliving consumers and the reverse, at 1 GiB, and
deleters that run at interpreter shutdown."""

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import zerohop
from conftest import address, requires_torch, torch

GIB_OF_FLOAT32 = (1 << 30) // 4


@requires_torch
def test_one_gib_producer_deleted_before_consumer():
    a = np.full(GIB_OF_FLOAT32, 3.0, dtype=np.float32)
    a[-1] = 7.0
    alive = weakref.ref(a)
    ptr = address(a)
    t = zerohop.from_dlpack(a)
    y = torch.from_dlpack(t)
    assert address(y) == ptr
    del a, t
    gc.collect()
    assert alive() is not None, "the consumer must keep the producer alive"
    assert y[-1].item() == 7.0 and y[0].item() == 3.0
    assert y.numel() == GIB_OF_FLOAT32
    del y
    gc.collect()
    assert alive() is None, "the producer must be released once the last consumer is gone"


@requires_torch
def test_one_gib_consumer_deleted_before_producer():
    t = zerohop.zeros((GIB_OF_FLOAT32,), "float32")
    y = torch.from_dlpack(t)
    n = np.from_dlpack(t)
    assert address(y) == address(n) == t.data_ptr
    y[123] = 5.0
    del y, n
    gc.collect()
    back = t.numpy()
    assert back[123] == 5.0 and back.shape == (GIB_OF_FLOAT32,)


@requires_torch
def test_torch_producer_is_released_exactly_when_its_last_view_goes():
    x = torch.arange(1000, dtype=torch.float64)
    alive = weakref.ref(x)
    t = zerohop.from_dlpack(x)
    views = [np.from_dlpack(t), torch.from_dlpack(t), zerohop.from_dlpack(t)]
    del x, t
    gc.collect()
    assert alive() is not None
    assert all(address(v) == address(views[0]) for v in views)
    views.clear()
    gc.collect()
    assert alive() is None


SHUTDOWN_SCRIPT = textwrap.dedent(
    """
    import threading, numpy as np, zerohop
    try:
        import torch
    except ImportError:
        torch = None

    # Kept alive until the interpreter tears down module globals.
    owned = zerohop.zeros((1 << 20,), "float32")
    unconsumed = [owned.__dlpack__(), owned.__dlpack__(max_version=(1, 3))]
    np_view = np.from_dlpack(owned)
    foreign = zerohop.from_dlpack(np.arange(1 << 16, dtype=np.float64))
    chained = zerohop.from_dlpack(np.from_dlpack(foreign))
    if torch is not None:
        torch_view = torch.from_dlpack(owned)
        from_torch = zerohop.from_dlpack(torch.ones(1 << 16))
        torch_of_torch = torch.from_dlpack(from_torch)

    # A daemon thread still holding views when the interpreter exits.
    held = [zerohop.from_dlpack(np_view) for _ in range(8)]
    stop = threading.Event()
    def hold():
        local = list(held)
        stop.wait()
    threading.Thread(target=hold, daemon=True).start()
    print("ready", flush=True)
    """
)


@pytest.mark.parametrize("exit_call", ["", "import os; os._exit(0)", "raise SystemExit(0)"])
def test_interpreter_shutdown_with_live_exports(exit_call):
    result = subprocess.run(
        [sys.executable, "-c", SHUTDOWN_SCRIPT + "\n" + exit_call],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ready" in result.stdout
    assert "Fatal" not in result.stderr and "panicked" not in result.stderr, result.stderr
