# Stub-only module: the type of the `zerohop._zerohop.memory` attribute (a module object the
# extension builds in crates/zerohop-python/src/memory.rs and numpy_hook.rs). No module of
# this name exists at runtime; import it as `from zerohop._zerohop import memory`, or use the
# public `zerohop.memory`. scripts/stubtest.sh checks this file against that attribute.

import os
from collections.abc import Callable
from typing import Self, TypedDict, final, type_check_only

from ._zerohop import _Capsule

__all__ = [
    "Resource",
    "Block",
    "system",
    "shared",
    "cuda_device",
    "cuda_virtual",
    "cuda_async",
    "cuda_managed",
    "cuda_pinned",
    "pool",
    "arena",
    "monotonic",
    "limit",
    "on_failure",
    "stats",
    "tracking",
    "log",
    "set_current",
    "get_current",
    "reset_current",
    "take_refusal",
    "set_framework_resource",
    "install_numpy_handler",
    "restore_numpy_handler",
]

@type_check_only
class _Statistics(TypedDict):
    current_bytes: int
    peak_bytes: int
    total_bytes: int
    current_count: int
    peak_count: int
    total_count: int
    failed_count: int
    # (bucket: a power of two in bytes, allocations of up to that size), non-empty buckets.
    histogram: tuple[tuple[int, int], ...]

@type_check_only
class _Leak(TypedDict):
    address: int
    bytes: int
    align: int
    stream: int
    thread: str
    backtrace: str | None
    python_stack: str | None

@type_check_only
class _InvalidFree(TypedDict):
    address: int
    bytes: int
    # None when the pointer was not a live allocation.
    allocated_bytes: int | None
    thread: str

@type_check_only
class _PoolUsage(TypedDict):
    reserved: int
    in_use: int
    chunks: int
    free_blocks: int

@type_check_only
class _MonotonicUsage(TypedDict):
    chunks: int
    live_blocks: int

@type_check_only
class _LimitUsage(TypedDict):
    in_use: int
    limit: int

# Introspection methods raise TypeError on resources of the wrong kind (`stats` needs a
# Stats adaptor, `leaks` a Tracking one, ...), which zerohop.memory.stats() relies on.
@final
class Resource:
    @property
    def upstream(self) -> Resource | None: ...
    @property
    def device(self) -> str: ...
    def stats(self) -> _Statistics: ...
    def leaks(self) -> list[_Leak]: ...
    def invalid_frees(self) -> list[_InvalidFree]: ...
    def report(self) -> str: ...
    # A Pool's, a Monotonic's or a Limit's usage.
    def usage(self) -> _PoolUsage | _MonotonicUsage | _LimitUsage: ...
    def release(self) -> int: ...
    def flush(self) -> None: ...
    def allocate(self, nbytes: int, align: int = ..., stream: int = 0) -> int: ...
    def deallocate(self, address: int, nbytes: int, align: int = ..., stream: int = 0) -> None: ...

@final
class Block:
    def __new__(cls, resource: Resource, nbytes: int, stream: int = 0) -> Self: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def stream(self) -> int: ...

def system() -> Resource: ...
def shared() -> Resource: ...
def cuda_device(device: int = 0) -> Resource: ...
def cuda_virtual(device: int = 0, reserve: int | None = None) -> Resource: ...
def cuda_async(device: int = 0) -> Resource: ...
def cuda_managed(device: int = 0) -> Resource: ...
def cuda_pinned(device: int = 0) -> Resource: ...
def pool(upstream: Resource, initial: int = 0, maximum: int | None = None) -> Resource: ...
def arena(upstream: Resource, cached_per_class: int = ...) -> Resource: ...
def monotonic(upstream: Resource, chunk: int = ...) -> Resource: ...
def limit(upstream: Resource, nbytes: int) -> Resource: ...
def on_failure(upstream: Resource, callback: Callable[[int], object]) -> Resource: ...
def stats(upstream: Resource) -> Resource: ...
def tracking(upstream: Resource, backtraces: bool = False) -> Resource: ...
def log(upstream: Resource, path: str | os.PathLike[str]) -> Resource: ...
def set_current(resource: Resource) -> None: ...
def get_current(device: str = "cpu") -> Resource | None: ...
def reset_current(device: str = "cpu") -> None: ...
def take_refusal() -> str | None: ...
def set_framework_resource(resource: Resource | None, device: str = "cuda:0") -> None: ...

# NumPy's memory handler (NEP 49): install returns the previous handler capsule, which
# restore puts back.
def install_numpy_handler(resource: Resource) -> _Capsule: ...
def restore_numpy_handler(previous: _Capsule) -> None: ...
