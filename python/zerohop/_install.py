"""`zerohop.memory.install`: PyTorch, CuPy and Numba allocating device memory from one
zerohop resource, each through its own Stats share so one view says what each holds."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
from typing import Any

from . import memory as zm

FRAMEWORKS = ("torch", "cupy", "numba")
TORCH_MODES = ("mempool", "allocator")


class Installation:
    """What `install` set up: the shared `resource` and each framework's Stats share."""

    def __init__(self, resource: zm.Resource, device: int) -> None:
        self.resource = resource
        self.device = device
        self.shares: dict[str, zm.Resource] = {}
        self.torch_mode: str | None = None
        self._torch_route: _TorchRoute | None = None

    def stats(self) -> dict[str, Any]:
        """Statistics per framework (current/peak/total bytes and counts), plus "total"
        when the shared resource has a Stats adaptor of its own."""
        out: dict[str, Any] = {name: zm.stats(share) for name, share in self.shares.items()}
        with contextlib.suppress(TypeError):
            out["total"] = zm.stats(self.resource)
        return out

    def graph_pool(self) -> Any:
        """A torch MemPool whose segments come from zerohop, for a CUDA graph's private memory
        (`torch.cuda.graph(g, pool=installed.graph_pool().id)`): the graph's memory then counts
        in zerohop's statistics and limit. Graphs captured without it (and torch.compile's
        "reduce-overhead" graphs) keep torch's own private pools. Needs torch_mode "mempool"."""
        if self._torch_route is None:
            raise ValueError("graph_pool needs install(torch=True) with torch_mode='mempool'")
        return self._torch_route.graph_pool()

    def close(self) -> None:
        """Ends torch's route (torch_mode "mempool"): torch allocates from its own pools
        again, and the extension's C symbols serve the device's current resource again.
        Tensors already in zerohop's memory stay valid; their memory goes back when they die
        and torch's cache is emptied. cuBLAS's workspaces, which never die on their own, are
        dropped (after a device synchronisation) and made anew when next needed. (CuPy's and
        Numba's hooks stay.)"""
        route = self._torch_route
        if route is not None and _ROUTES.get(route.device) is route:
            route.drop_blas_workspaces()
            del _ROUTES[route.device]
            route.retire()
            # Graph pools still in use by a graph wait for a later empty_cache.
            _RETIRED_GRAPH_POOLS.extend(route.graph_pools)
            route.graph_pools = []
            _drop_idle_graph_pools()
            # The C symbols serve the device's current resource again (blocks torch's share
            # made still go back to it): left on the share, they kept serving whatever loads
            # them (another extension following zerohop's current resource, a C program)
            # from an installation that had ended.
            zm.set_framework_resource(None, f"cuda:{route.device}")
        self._torch_route = None

    def __repr__(self) -> str:
        return f"Installation({sorted(self.shares)} on cuda:{self.device} from {self.resource!r})"


def install(torch: bool = False, cupy: bool = False, numba: bool = False, *,
            resource: zm.Resource | None = None, device: int = 0,
            torch_mode: str = "mempool") -> Installation:
    """Makes the chosen frameworks allocate CUDA memory of `device` from `resource` (default:
    a Pool over CudaDevice). Wrap the resource in Limit or Tracking and the limit and the leak
    report cover every framework at once.

    torch_mode "mempool" (the default) keeps torch's caching allocator and its tools
    (statistics, CUDA graphs, torch.compile's reduce-overhead) and has it take its segments
    from zerohop; "allocator" replaces torch's allocator, so every tensor is a zerohop block
    and torch's tools that need its own allocator fail (docs/memory.md has the table).

    Call it before the frameworks allocate on the device: PyTorch cannot swap an allocator it
    has used ("allocator" mode), and Numba's memory manager is chosen when its context is
    created.
    """
    if torch_mode not in TORCH_MODES:
        raise ValueError(f"torch_mode must be one of {TORCH_MODES}, got {torch_mode!r}")
    if resource is None:
        resource = zm.Pool(zm.CudaDevice(device))
    if resource.device != f"cuda:{device}":
        raise ValueError(f"install needs a resource on cuda:{device}, got one on {resource.device}")
    done = Installation(resource, device)
    if torch:
        share = zm.Stats(resource)
        done._torch_route = _install_torch(share, device, torch_mode)
        done.torch_mode = torch_mode
        done.shares["torch"] = share
    for name, wanted in (("cupy", cupy), ("numba", numba)):
        if wanted:
            share = zm.Stats(resource)
            globals()[f"_install_{name}"](share, device)
            done.shares[name] = share
    return done


def _install_torch(share: zm.Resource, device: int, mode: str) -> Any:
    import torch

    # Both modes reach zerohop through the extension's C symbols, which allocate from the
    # device's framework resource: torch's share, while zerohop's own allocations on the
    # device keep the current resource (and are not counted as torch's).
    zm.set_framework_resource(share)
    if mode == "mempool":
        return _TorchRoute(torch, device)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        zm.library_path(), zm.C_MALLOC_SYMBOL, zm.C_FREE_SYMBOL
    )
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "torch has already allocated CUDA memory with its own allocator; call "
            "zerohop.memory.install(torch=True, torch_mode='allocator') before torch's first "
            "CUDA allocation, or use torch_mode='mempool'"
        ) from e
    return None


class _TorchRoute:
    """torch's caching allocator keeps its bookkeeping (statistics, graph pools, live-block
    checks) and takes its segments from zerohop: a torch MemPool over zerohop's C symbols,
    made the pool of every allocation on the device, from every thread and stream (backward's
    threads too). A graph capture's allocations still go to the graph's own private pool,
    whose memory torch keeps for replays (measured: bench/torch_tools.py).

    torch counts the route as a capture underway, and a MemPool that dies while any is
    underway aborts the process (torch 2.11 asserts in emptyCache): so no MemPool of zerohop's
    dies while a route is on; a route is ended before its pool is dropped, and at exit."""

    def __init__(self, torch: Any, device: int) -> None:
        self.torch, self.device = torch, device
        torch.cuda.init()
        # The quiet symbol: torch checks for NULL here and raises its own OutOfMemoryError
        # (while the route is on it does not free its cache first), to which zerohop's
        # reason is added as a note.
        self.allocator = torch.cuda.memory.CUDAPluggableAllocator(
            zm.library_path(), zm.C_QUIET_MALLOC_SYMBOL, zm.C_FREE_SYMBOL
        )
        self.graph_pools: list[Any] = []
        # torch gives an allocation to the first routed pool: a second install takes over.
        earlier = _ROUTES.pop(device, None)
        if earlier is not None:
            earlier.retire()
            self.graph_pools = earlier.graph_pools
        self.pool: Any = self._route_to_new_pool()
        _ROUTES[device] = self
        _note_refusals_on_torch_oom(torch)
        _empty_cache_returns_to_zerohop(torch)

    def _route_to_new_pool(self) -> Any:
        pool = self.torch.cuda.MemPool(self.allocator.allocator())
        self.torch._C._cuda_beginAllocateToPool(self.device, pool.id)
        return pool

    def graph_pool(self) -> Any:
        # Kept alive: see the class's note on MemPools dying.
        pool = self.torch.cuda.MemPool(self.allocator.allocator())
        self.graph_pools.append(pool)
        return pool

    def release_cached(self) -> None:
        """torch's empty_cache never frees the routed pool's cache: the route ends, its pool
        is released and dropped (which empties that pool's cache into zerohop; tensors alive
        in it stay valid and go back when they die), and a fresh pool takes the route.
        Graph pools whose graphs are gone go too."""
        self.retire()
        # With no route underway, one allocation lets torch process the events it deferred
        # while the route was on (blocks used on other streams: record_stream), so their
        # memory comes free for the cache emptying that follows.
        self.torch.empty(1, device=f"cuda:{self.device}")
        # Graph pools no graph uses any more (only this list holds them) die now, with no
        # route underway, and give their memory back too.
        self.graph_pools = [pool for pool in self.graph_pools if pool.use_count() > 1]
        self.pool = self._route_to_new_pool()

    def drop_blas_workspaces(self) -> None:
        """cuBLAS's workspaces (one per handle and stream: 32 MiB each on Hopper, 1 MiB for
        cuBLASLt) came from the route and never die on their own; dropped, torch makes them
        anew from wherever it then allocates, when next needed. Measured on an H200: they
        were every block the ECG job left in zerohop's pool."""
        clear = getattr(self.torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            # Kernels still queued may be using them.
            self.torch.cuda.synchronize(self.device)
            clear()

    def retire(self) -> None:
        torch, device, pool = self.torch, self.device, self.pool
        if pool is None:
            return
        torch._C._cuda_endAllocateToPool(device, pool.id)
        # The route's own reference (beginAllocateToPool took one); the MemPool's goes as the
        # object dies just below, with no route underway.
        torch._C._cuda_releasePool(device, pool.id)
        self.pool = None


def _end_routes() -> None:
    """At exit, before the interpreter drops zerohop's MemPools."""
    for route in _ROUTES.values():
        if route.pool is not None:
            route.torch._C._cuda_endAllocateToPool(route.device, route.pool.id)


def _note_refusals_on_torch_oom(torch: Any) -> None:
    """torch raises its own OutOfMemoryError when the pool refuses; the note added here says
    why in zerohop's numbers (requested, in use, limit)."""
    error = torch.OutOfMemoryError
    if getattr(error, "_zerohop_noted", False):
        return
    plain_init = error.__init__

    def __init__(self: BaseException, *args: Any) -> None:
        plain_init(self, *args)
        reason = zm.take_refusal()
        if reason is not None:
            self.add_note(f"zerohop's pool refused the allocation: {reason}")

    error.__init__ = __init__
    error._zerohop_noted = True


_ROUTES: dict[int, _TorchRoute] = {}
#: Graph pools of closed routes, kept while a graph uses them.
_RETIRED_GRAPH_POOLS: list[Any] = []
atexit.register(_end_routes)


def _drop_idle_graph_pools() -> None:
    """Graph pools of closed routes that no graph uses any more die (giving their memory
    back) — only with no route underway, when a MemPool may die."""
    if not _ROUTES:
        _RETIRED_GRAPH_POOLS[:] = [p for p in _RETIRED_GRAPH_POOLS if p.use_count() > 1]


def _empty_cache_returns_to_zerohop(torch: Any) -> None:
    plain = torch.cuda.memory.empty_cache
    if getattr(plain, "_zerohop_routes", False):
        return

    def empty_cache() -> None:
        for route in _ROUTES.values():
            route.release_cached()
        _drop_idle_graph_pools()
        plain()

    empty_cache.__doc__ = plain.__doc__
    empty_cache._zerohop_routes = True  # type: ignore[attr-defined]
    torch.cuda.memory.empty_cache = torch.cuda.empty_cache = empty_cache


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
