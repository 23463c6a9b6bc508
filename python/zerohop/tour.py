"""A short tour of zero-copy hand-offs: `python -m zerohop.tour`. Every step prints the address
of the data, which never changes."""

import sys
from typing import Any

import numpy as np

import zerohop


def _address(x: Any) -> int:
    if isinstance(x, zerohop.Tensor):
        return x.data_ptr
    if isinstance(x, np.ndarray):
        return int(x.__array_interface__["data"][0])
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    return int(x.unsafe_buffer_pointer())


def main() -> int:
    steps: list[tuple[str, Any]] = []

    def hand_off(label: str, obj: Any) -> Any:
        steps.append((label, obj))
        kind = f"{type(obj).__module__}.{type(obj).__name__}"
        print(f"  {label:<32} {kind:<24} 0x{_address(obj):x}")
        return obj

    print(f"zerohop {zerohop.__version__} (DLPack {'.'.join(map(str, zerohop.DLPACK_VERSION))})")
    print("1. NumPy -> zerohop -> PyTorch -> JAX -> zerohop -> NumPy")
    a = hand_off("numpy.zeros((4, 3), float32)", zerohop.zeros((4, 3), "float32").numpy())
    a[:] = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = hand_off("zerohop.from_dlpack(numpy)", zerohop.from_dlpack(a))
    try:
        import torch

        x = hand_off("torch.from_dlpack(zerohop)", torch.from_dlpack(t))
        x.mul_(10)  # written in place, seen by every other view
        source = x
        done = "after torch's in-place x10"
    except ImportError:
        print("  (torch not installed: skipped)")
        source = t
        done = "(torch not installed, so not multiplied)"
    try:
        import jax.numpy as jnp

        j = hand_off("jax.numpy.from_dlpack(...)", jnp.from_dlpack(source))
        source = hand_off("zerohop.from_dlpack(jax)", zerohop.from_dlpack(j))
    except ImportError:
        print("  (jax not installed: skipped)")
    back = hand_off("numpy.from_dlpack(...)", np.from_dlpack(source))

    addresses = {_address(obj) for _, obj in steps}
    print(f"  values {done}: {back.ravel().tolist()}")
    print(f"  distinct data addresses across {len(steps)} hand-offs: {len(addresses)}")

    print("2. Non-contiguous: a transposed, stepped view keeps its strides")
    view = a.T[::2]
    z = zerohop.from_dlpack(view)
    print(f"  numpy strides (bytes) {view.strides} -> zerohop strides (elements) {z.strides}")
    print(f"  same address: {z.data_ptr == _address(view)}")

    print("3. Negative strides are refused, never passed to a consumer that would abort")
    flipped = zerohop.from_dlpack(np.arange(4.0)[::-1])
    try:
        flipped.__dlpack__()
    except BufferError as err:
        print(f"  BufferError: {err}")
    print(f"  an explicit copy works: {np.from_dlpack(flipped.copy()).tolist()}")
    return 0 if len(addresses) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
