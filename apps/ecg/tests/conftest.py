"""The app's test helpers: torch when installed, and where a tensor's data lives (to prove
that every hand-off shares memory)."""

import numpy as np
import pytest

import zerohop

try:
    import torch
except ImportError:  # pragma: no cover - `make test` installs torch
    torch = None


def address(x):
    """The address of a zerohop tensor's, NumPy array's or torch tensor's first element."""
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    if torch is not None and isinstance(x, torch.Tensor):
        return x.data_ptr()
    raise TypeError(f"no address for {type(x)}")


requires_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
