"""`zerohop.memory.install`: PyTorch, CuPy and Numba allocating device memory from one
zerohop resource, each through its own Stats share so one view says what each holds."""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

from . import memory as zm

FRAMEWORKS = ("torch", "cupy", "numba")


class Installation:
    """What `install` set up: the shared `resource` and each framework's Stats share."""

    def __init__(self, resource: zm.Resource, device: int) -> None:
        self.resource = resource
        self.device = device
        self.shares: dict[str, zm.Resource] = {}

    def stats(self) -> dict[str, Any]:
        """Statistics per framework (current/peak/total bytes and counts), plus "total"
        when the shared resource has a Stats adaptor of its own."""
        out: dict[str, Any] = {name: zm.stats(share) for name, share in self.shares.items()}
        with contextlib.suppress(TypeError):
            out["total"] = zm.stats(self.resource)
        return out

    def __repr__(self) -> str:
        return f"Installation({sorted(self.shares)} on cuda:{self.device} from {self.resource!r})"


def install(torch: bool = False, cupy: bool = False, numba: bool = False, *,
            resource: zm.Resource | None = None, device: int = 0) -> Installation:
    """Makes the chosen frameworks allocate CUDA memory of `device` from `resource` (default:
    a Pool over CudaDevice). Wrap the resource in Limit or Tracking and the limit and the leak
    report cover every framework at once.

    Call it before the frameworks allocate on the device: PyTorch cannot swap an allocator it
    has used, and Numba's memory manager is chosen when its context is created.
    """
    if resource is None:
        resource = zm.Pool(zm.CudaDevice(device))
    if resource.device != f"cuda:{device}":
        raise ValueError(f"install needs a resource on cuda:{device}, got one on {resource.device}")
    done = Installation(resource, device)
    for name, wanted in (("torch", torch), ("cupy", cupy), ("numba", numba)):
        if wanted:
            share = zm.Stats(resource)
            globals()[f"_install_{name}"](share, device)
            done.shares[name] = share
    return done


def _install_torch(share: zm.Resource, device: int) -> None:
    import torch

    # torch's pluggable allocator calls the extension's C symbols, which allocate from the
    # device's current zerohop resource.
    zm.set_current(share)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        zm.library_path(), zm.C_MALLOC_SYMBOL, zm.C_FREE_SYMBOL
    )
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "torch has already allocated CUDA memory with its own allocator; call "
            "zerohop.memory.install(torch=True) before torch's first CUDA allocation"
        ) from e


def _install_cupy(share: zm.Resource, device: int) -> None:
    import cupy  # type: ignore[import-not-found, import-untyped, unused-ignore]

    def allocate(nbytes: int) -> Any:
        stream = cupy.cuda.get_current_stream().ptr
        block = zm.Block(share, nbytes, stream)
        # CuPy keeps `block` alive as the memory's owner; its death frees the block.
        memory = cupy.cuda.memory.UnownedMemory(block.ptr, nbytes, block, device)
        return cupy.cuda.memory.MemoryPointer(memory, 0)

    cupy.cuda.set_allocator(allocate)


def _numba_pointer(driver: Any, address: int) -> Any:
    if getattr(driver, "USE_NV_BINDING", False):
        return driver.binding.CUdeviceptr(address)
    return ctypes.c_void_p(address)


def _install_numba(share: zm.Resource, device: int) -> None:
    from numba import cuda  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from numba.cuda.cudadrv import driver  # type: ignore[import-not-found, import-untyped, unused-ignore]

    # numba is untyped: its classes are Any to mypy.
    bases: tuple[Any, ...] = (cuda.GetIpcHandleMixin, cuda.HostOnlyCUDAMemoryManager)

    class ZerohopNumbaMemoryManager(*bases):  # type: ignore[misc]
        """Numba's External Memory Management plugin over a zerohop resource."""

        def memalloc(self, size: int) -> Any:
            block = zm.Block(share, size, 0)
            pointer = _numba_pointer(driver, block.ptr)
            # The finalizer holds the block; Numba runs it when the array dies.
            return cuda.MemoryPointer(
                self.context, pointer, size, finalizer=lambda block=block: None
            )

        def initialize(self) -> None:
            pass

        def get_memory_info(self) -> Any:
            free, total = cuda.current_context().get_memory_info()
            return cuda.MemoryInfo(free=free, total=total)

        @property
        def interface_version(self) -> int:
            return 1

    cuda.set_memory_manager(ZerohopNumbaMemoryManager)
