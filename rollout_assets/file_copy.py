"""Copying bytes from one open file to another by the kernel, with a buffered fallback.

`os.copy_file_range` moves the bytes inside the kernel: no pass through Python's buffers, and
on a filesystem that shares extents (XFS, Btrfs) no copy of the data at all. Copying the
benchmark round's 695 MB opencode store from the page cache on ext4 takes 0.24-0.29 s this
way; read in a new 1 MiB block at a time, a first copy in a process took 0.64-1.59 s
(docs/performance.md). Where the kernel
refuses (two filesystems, an old kernel, a filesystem without it) or stops short of the
source's end, the rest is read and written in blocks, so the result is the same everywhere.
"""

from __future__ import annotations

import contextlib
import os

_BLOCK = 1 << 20


class CopyTargetError(OSError):
    """Writing the copy failed (its filesystem is full, say), as opposed to reading the source."""


def copy_range(source: int, target: int, offset: int = 0, length: int | None = None) -> int:
    """Copy `length` bytes of the file open as `source`, from `offset` (to its end when
    `length` is None), to the file open as `target` at its current position, which advances;
    `source`'s own position is left where it was. Returns how many bytes were copied: fewer
    than `length` only when the source ends first. A failure to write raises CopyTargetError."""
    wanted = length if length is not None else max(0, os.fstat(source).st_size - offset)
    copied = 0
    # Any refusal of the kernel's copy leaves the rest to the buffered copy below, which
    # raises a real error (a full disk, an unreadable source) again, with its own cause.
    with contextlib.suppress(OSError):
        while copied < wanted:
            step = os.copy_file_range(source, target, wanted - copied, offset + copied)
            if step == 0:
                break
            copied += step
    # The rest: up to `length`, or to the source's end as it is now (it may have grown).
    while length is None or copied < length:
        size = _BLOCK if length is None else min(_BLOCK, length - copied)
        block = os.pread(source, size, offset + copied)
        if not block:
            break
        _write_all(target, block)
        copied += len(block)
    return copied


def _write_all(target: int, block: bytes) -> None:
    view = memoryview(block)
    try:
        while view:
            view = view[os.write(target, view) :]
    except OSError as error:
        raise CopyTargetError(error.errno, error.strerror) from error
