# Stub-only module: the type of the `zerohop._zerohop.cuda` attribute (a module object the
# extension builds in crates/zerohop-python/src/cuda.rs). No module of this name exists at
# runtime; import it as `from zerohop._zerohop import cuda`, or use the public `zerohop.cuda`.
# scripts/stubtest.sh checks this file against that attribute.

from collections.abc import Mapping
from typing import Any, Protocol, type_check_only

from ._zerohop import Tensor

__all__ = ["is_available", "device_count", "synchronize", "from_cuda_array_interface"]

@type_check_only
class _SupportsCudaArrayInterface(Protocol):
    @property
    def __cuda_array_interface__(self) -> Mapping[str, Any]: ...

def is_available() -> bool: ...
def device_count() -> int: ...
def synchronize(device: int = 0, stream: int = 1) -> None: ...
def from_cuda_array_interface(obj: _SupportsCudaArrayInterface) -> Tensor: ...
