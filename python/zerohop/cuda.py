"""CUDA support: availability, device tensors and the CUDA array interface.

zerohop loads libcuda at run time: on a machine without a driver or GPU, `is_available()`
is False and everything else in zerohop works as usual.

    import zerohop, zerohop.cuda
    if zerohop.cuda.is_available():
        t = zerohop.zeros((1024,), "float32", device="cuda:0")
        x = torch.from_dlpack(t)       # same device pointer; torch's stream waits on ours
"""

from ._zerohop import cuda as _cuda

is_available = _cuda.is_available
device_count = _cuda.device_count
synchronize = _cuda.synchronize
from_cuda_array_interface = _cuda.from_cuda_array_interface

__all__ = ["device_count", "from_cuda_array_interface", "is_available", "synchronize"]
