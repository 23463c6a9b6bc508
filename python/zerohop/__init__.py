"""zerohop: hand tensors between ML frameworks without copying them.

>>> import numpy as np, torch, zerohop
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = zerohop.from_dlpack(a)            # NumPy -> zerohop, same memory
>>> torch.from_dlpack(t).data_ptr() == a.ctypes.data
True
"""

from ._zerohop import (
    DLPACK_VERSION,
    OutOfMemoryError,
    Table,
    Tensor,
    __version__,
    from_arrow,
    from_dlpack,
    zeros,
)


class CopyWarning(UserWarning):
    """zerohop made a copy because the caller allowed one (copy=True or materialize=...)."""


class NoSuchColumnError(KeyError, ValueError):
    """A table has no column of that name: the same exception from `table["x"]`, from
    `table.tensors(["x"])` and from every other call that names columns. It is a KeyError (a
    lookup by name) and a ValueError (a bad argument), so code catching either still works."""

    def __str__(self) -> str:  # KeyError's own quotes the message
        return str(self.args[0]) if self.args else ""


#: Submodules reachable as attributes (``zerohop.memory`` after ``import zerohop``), imported
#: on first use so that ``import zerohop`` stays fast and never imports torch.
_SUBMODULES = ("cuda", "ecg", "memory", "tour")

# For type checkers only (False at run time, and no `typing` import): the same submodules,
# so that `zerohop.memory` is typed after `import zerohop`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import cuda, ecg, memory, tour


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_SUBMODULES])


__all__ = [
    "CopyWarning", "DLPACK_VERSION", "NoSuchColumnError", "OutOfMemoryError", "Table", "Tensor", "__version__",
    "cuda", "ecg", "from_arrow", "from_dlpack", "memory", "zeros",
]
