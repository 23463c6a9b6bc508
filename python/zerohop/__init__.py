"""zerohop: hand tensors between ML frameworks without copying them.

>>> import numpy as np, torch, zerohop
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = zerohop.from_dlpack(a)            # NumPy -> zerohop, same memory
>>> torch.from_dlpack(t).data_ptr() == a.ctypes.data
True
"""

from types import TracebackType

from ._zerohop import (
    DLPACK_VERSION,
    CudaError,
    OutOfMemoryError,
    Table,
    Tensor,
    __version__,
    from_arrow,
    from_dlpack,
    zeros,
)
from ._zerohop import CopyWarning, NoSuchColumnError, StreamError, _AcrossMachinesBlock


class pickling:
    """``with zerohop.pickling(across_machines="bytes"):`` pickles made inside carry their
    host data as bytes (out of band at protocol 5), never as a shared-memory handle, which only
    opens on the machine that made it: for Ray, Dask or files that may go to another machine.
    Each such object is a copy on the way, as any bytes are. CUDA tensors and tables are
    staged through the host: copied there once their stream has written them, and back to a
    device of the receiver (the same number, else 0; `is_copied` is true).

    The setting is process-wide while the block runs (Ray and Dask pickle on threads of their
    own), and on while any such block is open, on any thread: blocks on several threads may
    open and close in any order, and pickles share again once the last one closes. A block
    with ``across_machines=None`` changes nothing (it cannot switch off another thread's)."""

    def __init__(self, across_machines: str | None = None) -> None:
        if across_machines not in (None, "bytes"):
            raise ValueError(f"across_machines={across_machines!r}: use \"bytes\" (or None "
                             f"for handles on one machine)")
        self.across_machines = across_machines
        # One entry per `with` this object is open in (it may be entered on several threads).
        self._blocks: list[_AcrossMachinesBlock] = []

    def __enter__(self) -> "pickling":
        if self.across_machines is not None:
            self._blocks.append(_AcrossMachinesBlock())
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._blocks:
            self._blocks.pop().close()


#: Submodules reachable as attributes (``zerohop.memory`` after ``import zerohop``), imported
#: on first use so that ``import zerohop`` stays fast and never imports torch.
_SUBMODULES = ("cuda", "memory", "tour")

# For type checkers only (False at run time, and no `typing` import): the same submodules,
# so that `zerohop.memory` is typed after `import zerohop`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import cuda, memory, tour


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "ecg":
        raise AttributeError(
            "zerohop.ecg moved out of the library: the ECG app is its own package, zerohop-ecg "
            "(apps/ecg in the repository; `import zerohop_ecg`, or run `zerohop-ecg`)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_SUBMODULES])


__all__ = [
    "CopyWarning", "CudaError", "DLPACK_VERSION", "NoSuchColumnError", "OutOfMemoryError",
    "StreamError", "Table",
    "Tensor", "__version__", "pickling",
    "cuda", "from_arrow", "from_dlpack", "memory", "zeros",
]
