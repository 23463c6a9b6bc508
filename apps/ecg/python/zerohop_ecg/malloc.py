"""glibc's malloc tuned for CPU training, in a module of its own: the job applies it before
torch is imported (which it does on a thread, while the recording is read)."""

from __future__ import annotations

#: malloc serves blocks up to this size from its heap after `keep_freed_memory`...
KEEP_BLOCKS_BELOW = 64 << 20
#: ...and keeps up to this much freed memory before handing any back to the system.
KEEP_FREED_UP_TO = 256 << 20


def keep_freed_memory() -> bool:
    """Has glibc's malloc keep the memory a CPU training step frees, for the next step.

    A step allocates and frees its activations, a few MB each. By default glibc maps blocks
    that size afresh and unmaps them when freed, so every step faults its pages in again: a
    24-hour record's CPU training took 30 M page faults and ~50 s of system time on 2
    cores, and a step at batch 1024 took 60 ms instead of 50 (with this, ~20 faults a step).
    The setting is process-wide (at most KEEP_FREED_UP_TO bytes stay mapped while unused),
    so the job (`python -m zerohop_ecg`) applies it, not `train`. Returns whether it applied:
    False where the C library is not glibc."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    return bool(mallopt(m_mmap_threshold, KEEP_BLOCKS_BELOW)
                and mallopt(m_trim_threshold, KEEP_FREED_UP_TO))
