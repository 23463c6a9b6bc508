"""CUDA support: availability, device tensors and the CUDA array interface.

zerohop loads libcuda at run time: on a machine without a driver or GPU, `is_available()`
is False and everything else in zerohop works as usual.

    import zerohop, zerohop.cuda
    if zerohop.cuda.is_available():
        t = zerohop.zeros((1024,), "float32", device="cuda:0")
        x = torch.from_dlpack(t)       # same device pointer; torch's stream waits on ours
"""

import ctypes
import glob
import os
import sys

from ._zerohop import cuda as _cuda

is_available = _cuda.is_available
device_count = _cuda.device_count
synchronize = _cuda.synchronize
from_cuda_array_interface = _cuda.from_cuda_array_interface

__all__ = ["device_count", "from_cuda_array_interface", "is_available", "preload_nvrtc", "synchronize"]


def preload_nvrtc() -> str | None:
    """Loads NVRTC (which compiles zerohop's CUDA kernels at run time) from where pip's
    nvidia packages put it, when the system has none on the loader path. Returns the path
    loaded, or None when nothing needed loading or nothing was found."""
    try:
        ctypes.CDLL("libnvrtc.so.13")
        return None  # the loader finds it already
    except OSError:
        pass
    for root in sys.path:
        pattern = os.path.join(root, "nvidia", "**", "libnvrtc.so*")
        for path in sorted(glob.glob(pattern, recursive=True)):
            if "builtins" in os.path.basename(path):
                continue
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                continue
    return None
