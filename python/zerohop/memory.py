"""One memory pool for every framework: resource stacks, the current host resource,
statistics, leak reports, and NumPy's allocator hook.

    import zerohop.memory as zm
    pool = zm.Stats(zm.Pool(zm.System(), initial=64 << 20, maximum=1 << 30))
    zm.set_current(pool)            # zerohop allocations now come from the pool
    with zm.use_for_numpy(pool):    # ... and so do NumPy's
        a = np.ones(1_000_000)
    print(zm.stats())

Resources compose by wrapping: each adaptor takes the resource it draws from.
"""

from __future__ import annotations

import os
from types import TracebackType
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ._zerohop import OutOfMemoryError
from ._zerohop import memory as _m

if TYPE_CHECKING:
    from ._zerohop_memory import _Leak, _Statistics

Resource = _m.Resource

Block = _m.Block

__all__ = [
    "Arena", "Block", "CudaAsync", "CudaDevice", "CudaManaged", "CudaPinned", "CudaVirtual",
    "Limit", "Log", "OnFailure",
    "Monotonic", "OutOfMemoryError", "Pool", "Resource", "Shared", "Stats", "System", "Tracking",
    "get_current",
    "install", "leaks", "reset_current", "set_current", "stats", "use_for_numpy",
    "C_MALLOC_SYMBOL", "C_FREE_SYMBOL", "C_QUIET_MALLOC_SYMBOL", "library_path", "take_refusal",
    "set_framework_resource",
]

#: C symbols exported by the extension, with the signatures torch's CUDAPluggableAllocator
#: expects: ``void* zerohop_malloc(ssize_t, int device, cudaStream_t)`` and
#: ``void zerohop_free(void*, ssize_t, int device, cudaStream_t)``; device -1 is the host.
C_MALLOC_SYMBOL = "zerohop_malloc"
C_FREE_SYMBOL = "zerohop_free"
#: ``zerohop_malloc`` for callers that handle NULL themselves: nothing is raised on the
#: calling thread; the reason waits for `take_refusal` there.
C_QUIET_MALLOC_SYMBOL = "zerohop_malloc_quiet"


def library_path() -> str:
    """Path of the shared library that exports the C allocator symbols."""
    from . import _zerohop

    return _zerohop.__file__


def System() -> Resource:
    """Aligned host memory from the system allocator."""
    return _m.system()


def Shared() -> Resource:
    """Host memory other processes on this machine map without a copy (Linux: one sealed
    memfd per allocation; wrap it in Pool for many small blocks). zerohop tensors and tables
    in it pickle as a handle, not bytes (docs/processes.md)."""
    return _m.shared()


def CudaDevice(device: int = 0) -> Resource:
    """Device memory of a CUDA GPU (cuMemAlloc/cuMemFree); wrap it in Pool for reuse."""
    return _m.cuda_device(device)


def CudaVirtual(device: int = 0, reserve: int | None = None) -> Resource:
    """Device memory backed as it is asked for, in chunks of one address range of `reserve`
    bytes (default: the device's memory) reserved once with CUDA's virtual memory API. A
    Pool over it merges free memory across its chunks, so it grows to every byte of its
    maximum; ``Pool.release()`` unmaps idle chunks and gives them back to the driver."""
    return _m.cuda_virtual(device, reserve)


def CudaAsync(device: int = 0) -> Resource:
    """Stream-ordered device memory (cuMemAllocAsync on the device's memory pool)."""
    return _m.cuda_async(device)


def CudaManaged(device: int = 0) -> Resource:
    """Managed memory (cuMemAllocManaged): one pointer for host and device; may exceed the
    device's memory."""
    return _m.cuda_managed(device)


def CudaPinned(device: int = 0) -> Resource:
    """Page-locked host memory (cuMemHostAlloc), for copies that run alongside the host."""
    return _m.cuda_pinned(device)


def Pool(upstream: Resource | None = None, *, initial: int = 0,
         maximum: int | None = None) -> Resource:
    """Chunks from `upstream` carved into reusable blocks (coalescing best fit, size classes)."""
    return _m.pool(upstream if upstream is not None else System(), initial, maximum)


def Arena(upstream: Resource | None = None, *, cached_per_class: int = 64) -> Resource:
    """Per-thread caches of small blocks in front of `upstream` (usually a Pool)."""
    return _m.arena(upstream if upstream is not None else Pool(), cached_per_class)


def Monotonic(upstream: Resource | None = None, *, chunk: int = 64 << 20) -> Resource:
    """Consecutive blocks from `chunk`-byte chunks of `upstream`, never handed out twice; a
    chunk goes back once a newer one replaced it and every block in it is freed. Over
    `Shared()`, thousands of results for another process live in a few segments (a few
    descriptors, not one each), and each may be freed as soon as the other process mapped it."""
    return _m.monotonic(upstream if upstream is not None else System(), int(chunk))


def Limit(upstream: Resource, nbytes: int) -> Resource:
    """Refuses allocations beyond `nbytes` outstanding with OutOfMemoryError (a MemoryError)."""
    return _m.limit(upstream, int(nbytes))


def OnFailure(upstream: Resource, callback: Callable[[int], object]) -> Resource:
    """When `upstream` refuses an allocation, calls ``callback(nbytes)`` (free caches, spill to
    the host) and, if it returns true, tries once more. The callback runs holding the GIL; an
    allocation it makes through this resource that fails is refused plainly (no second
    callback); an exception it raises goes to `sys.unraisablehook` and counts as giving up."""
    return _m.on_failure(upstream, callback)


def Stats(upstream: Resource) -> Resource:
    """Counts current/peak/total bytes and allocations, and a size histogram."""
    return _m.stats(upstream)


def Tracking(upstream: Resource, *, backtraces: bool = False) -> Resource:
    """Remembers every live allocation (with a backtrace if asked) for leak reports."""
    return _m.tracking(upstream, backtraces)


def Log(upstream: Resource, path: str | os.PathLike[str]) -> Resource:
    """Writes one CSV row per allocation and free: time_us,thread,action,pointer,size,stream."""
    return _m.log(upstream, str(path))


set_current = _m.set_current
get_current = _m.get_current
reset_current = _m.reset_current
take_refusal = _m.take_refusal
set_framework_resource = _m.set_framework_resource


def _find(resource: Resource | None, method: str) -> Any:
    chain = resource if resource is not None else get_current()
    while chain is not None:
        try:
            return getattr(chain, method)()
        except TypeError:
            chain = chain.upstream
    raise TypeError(
        f"no resource in {resource if resource is not None else get_current()!r} supports "
        f"{method}(); wrap the stack in zerohop.memory.{'Stats' if method == 'stats' else 'Tracking'}"
    )


def stats(resource: Resource | None = None) -> _Statistics:
    """Statistics of the nearest Stats adaptor in `resource`'s stack (default: the current one)."""
    return cast("_Statistics", _find(resource, "stats"))


def leaks(resource: Resource | None = None) -> list[_Leak]:
    """Outstanding allocations of the nearest Tracking adaptor in the stack."""
    return cast("list[_Leak]", _find(resource, "leaks"))


class use_for_numpy:
    """Makes NumPy allocate array data from `resource` (default: the current resource).

    Use it as a context manager, or call it and keep the handle to `.restore()` later. Arrays
    made while it was active keep using the resource until they die, after restoring too.
    """

    def __init__(self, resource: Resource | None = None) -> None:
        current = get_current()
        self.resource: Resource = (resource if resource is not None else
                                   current if current is not None else System())
        self._previous = _m.install_numpy_handler(self.resource)

    def restore(self) -> None:
        if self._previous is not None:
            _m.restore_numpy_handler(self._previous)
            self._previous = None

    def __enter__(self) -> use_for_numpy:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.restore()


from ._install import install  # noqa: E402  (it builds on the names above)
