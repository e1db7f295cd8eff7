"""Giving the memory a finished step freed back to the system before the next step starts.

The steps of a run share one process (the in-process executor). Python frees a step's objects
when it returns, but the C allocator keeps the freed pages for later allocations, so without
this the run's memory would stay at the high-water mark of every step before. What a step
imports (pyarrow, inspect_ai) and the arenas a few surviving objects pin are never given back:
a step that needs them runs its work in a forked child (`in_child_process`), and everything
but its result leaves with the child."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from typing import Any, TypeVar

_T = TypeVar("_T")


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


def objects_frozen(call: Callable[[], _T]) -> _T:
    """`call()` with this process's objects frozen: work that forks shares this process's pages
    until they are written, and a child's garbage collector writes to every object it visits;
    frozen, the run's objects stay shared instead of being copied into every child."""
    gc.freeze()
    try:
        return call()
    finally:
        gc.unfreeze()


def in_child_process(function: Callable[..., _T], *args: Any) -> _T:
    """`function(*args)` run in a forked child: its result (and an exception it raises) comes
    back pickled; its imports and allocations end with the child. The child starts from a copy
    of this process, so it reads the same snapshots and settings."""

    def run() -> _T:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
            return pool.submit(function, *args).result()

    return objects_frozen(run)
