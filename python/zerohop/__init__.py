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


__all__ = [
    "CopyWarning", "DLPACK_VERSION", "OutOfMemoryError", "Table", "Tensor", "__version__",
    "from_arrow", "from_dlpack", "zeros",
]
