"""Shared helpers: where each framework's data lives, so tests can prove zero-copy."""

import os

import numpy as np
import pytest

import zerohop

# ZEROHOP_TEST_NUMPY_ONLY=1 (scripts/valgrind-pytest.sh) leaves torch and JAX unimported, as
# if absent: under valgrind, importing torch alone takes three minutes, and the suites run there
# drive the extension with NumPy only (tests needing torch or JAX are skipped).
NUMPY_ONLY = os.environ.get("ZEROHOP_TEST_NUMPY_ONLY") == "1"

try:
    if NUMPY_ONLY:
        raise ImportError("ZEROHOP_TEST_NUMPY_ONLY=1")
    import torch
except ImportError:  # pragma: no cover - the Makefile installs torch
    torch = None

try:
    if NUMPY_ONLY:
        raise ImportError("ZEROHOP_TEST_NUMPY_ONLY=1")
    import jax

    # 64-bit dtypes would otherwise be narrowed (a copy) on import.
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
except ImportError:  # pragma: no cover - the Makefile installs jax
    jax = None
    jnp = None


def address(x):
    """The address of element [0, ..., 0] of any framework's array."""
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    if torch is not None and isinstance(x, torch.Tensor):
        return x.data_ptr()
    if jax is not None and isinstance(x, jax.Array):
        return x.unsafe_buffer_pointer()
    raise TypeError(f"no address for {type(x)}")


def filled_zerohop(shape, dtype):
    """A zerohop-owned tensor (128-byte aligned) holding 0, 1, 2, ... cast to dtype."""
    t = zerohop.zeros(shape, dtype)
    count = int(np.prod(shape)) if shape else 1
    if dtype == "bfloat16":
        if torch is None:
            pytest.skip("filling bfloat16 needs torch")
        torch.from_dlpack(t).copy_(torch.arange(count, dtype=torch.float32).reshape(shape))
    elif count:
        view = t.numpy()
        view[...] = (np.arange(count) % 2 if dtype == "bool" else np.arange(count)).reshape(shape)
    return t


requires_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
requires_jax = pytest.mark.skipif(jax is None, reason="jax is not installed")


@pytest.fixture
def tracking():
    """A Tracking adaptor over a pool as the current host resource for one test."""
    import zerohop.memory as zm

    tracker = zm.Tracking(zm.Pool(zm.System()))
    zm.set_current(tracker)
    try:
        yield tracker
    finally:
        zm.reset_current()


def assert_all_freed_once(tracker):
    """Every block the tracker handed out came back, and no free was a double or foreign one."""
    import gc

    import zerohop.memory as zm

    gc.collect()
    assert zm.leaks(tracker) == [], tracker.report()
    assert tracker.invalid_frees() == [], "a double or foreign free reached the tracker"
