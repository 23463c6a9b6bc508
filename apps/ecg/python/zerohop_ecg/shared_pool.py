"""One memory pool for the GPU job: the reader and zerohop's kernels (zerohop's current
resource on the device), torch's tensors and its CUDA graphs (`zerohop.memory.install`, whose
default keeps torch's caching allocator and its tools) all draw from one zerohop Pool, so the
report gives one peak and one list of what is held. `--no-shared-pool` leaves torch on its
own allocator."""

from __future__ import annotations

from typing import Any, TypedDict

#: The pool the running job draws from (one job at a time per process), for the training
#: step's graph capture to take its private memory from it too.
ACTIVE: SharedPool | None = None


class MemorySummary(TypedDict):
    peak_bytes: int
    held_blocks: int
    held_bytes: int


class SharedPool:
    def __init__(self, device: int) -> None:
        import zerohop.memory as zm

        self._zm = zm
        self.device = device
        self.pool = zm.Pool(zm.CudaDevice(device))
        self.tracking = zm.Tracking(self.pool)
        self.stats = zm.Stats(self.tracking)
        self.installed: Any = None
        zm.set_current(self.stats)

    def __enter__(self) -> SharedPool:
        global ACTIVE
        ACTIVE = self
        return self

    def __exit__(self, *_: object) -> None:
        global ACTIVE
        ACTIVE = None
        # torch goes back to its own allocator for whatever the process does next (another
        # job in this process takes the pool again).
        if self.installed is not None:
            self.installed.close()
            # What torch cached from the pool goes back to it: the job leaves nothing held.
            import torch

            torch.cuda.empty_cache()
        self._zm.reset_current(f"cuda:{self.device}")

    def install_torch(self) -> None:
        """On the thread that imported torch, before torch allocates on the device."""
        self.installed = self._zm.install(torch=True, resource=self.stats, device=self.device)

    def graph_pool(self) -> tuple[int, int] | None:
        """The pool id for a CUDA graph's capture (its private memory from this pool too);
        None before torch is installed."""
        if self.installed is None:
            return None
        pool_id: tuple[int, int] = self.installed.graph_pool().id
        return pool_id

    def summary(self) -> MemorySummary:
        held = self._zm.leaks(self.tracking)
        return {"peak_bytes": int(self._zm.stats(self.stats)["peak_bytes"]),
                "held_blocks": len(held),
                "held_bytes": sum(int(block["bytes"]) for block in held)}


def graph_pool() -> tuple[int, int] | None:
    """The active job's pool id for a graph capture, or None (torch's own graph pool)."""
    return ACTIVE.graph_pool() if ACTIVE is not None else None


def summary_line(memory: MemorySummary) -> str:
    mib = 1 << 20
    return (f"- memory: one zerohop pool for the reader, zerohop's kernels and torch (CUDA "
            f"graphs included): peak {memory['peak_bytes'] / mib:.1f} MiB; held when the "
            f"report was written: {memory['held_blocks']} blocks, "
            f"{memory['held_bytes'] / mib:.1f} MiB (the model, its outputs and the segments "
            f"torch caches)")
