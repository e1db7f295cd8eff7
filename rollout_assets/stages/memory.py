"""Giving the memory a finished step freed back to the system before the next step starts.

The steps of a run share one process (the in-process executor). Python frees a step's objects
when it returns, but the C allocator keeps the freed pages for later allocations, so without
this the run's memory would stay at the high-water mark of every step before."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def return_freed_memory() -> None:
    """Collect what is unreachable, then hand the allocator's free pages back (glibc's
    `malloc_trim`; elsewhere the collection alone)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
