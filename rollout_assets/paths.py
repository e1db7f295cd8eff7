"""Where outputs may go: path containment once symlinks are followed, and what kind of file a
path leads to. No Dagster here.

The inputs (a round's outDir, the Claude projects folder, the opencode store and the files
SQLite keeps beside it) are read-only. The command line checks its OUT path and the Dagster
resources their ledger root with these helpers, so both refuse the same places.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# Files SQLite keeps beside a database while it is open: writing any of them corrupts the store.
SQLITE_SIBLING_SUFFIXES = ("", "-wal", "-journal", "-shm")

# What a path may lead to besides a regular file, a folder or nothing, by the test of its mode.
_SPECIAL_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# The kinds a file can be written into without being replaced (a pipe, /dev/stdout, /dev/null).
STREAM_KINDS = ("a FIFO", "a character device")

StrPath = str | os.PathLike[str]


def real_path(path: StrPath) -> Path:
    """`path` absolute, with every symlink followed (as far as it exists)."""
    return Path(os.path.realpath(path))


def is_inside(path: StrPath, folder: StrPath) -> bool:
    """True when `path` is `folder` or lies below it, once symlinks are followed."""
    try:
        real_path(path).relative_to(real_path(folder))
    except ValueError:
        return False
    return True


def folder_relation(folder: StrPath, other: StrPath) -> str | None:
    """How `folder` sits relative to `other` once symlinks are followed: "is", "lies inside",
    "contains", or None when the two are apart."""
    if real_path(folder) == real_path(other):
        return "is"
    if is_inside(folder, other):
        return "lies inside"
    if is_inside(other, folder):
        return "contains"
    return None


def sqlite_files(database: StrPath) -> list[Path]:
    """The database and the files SQLite keeps beside it, both beside the path as given and
    beside the file it leads to (first the database itself); symlinks followed, no duplicates."""
    given = os.fspath(database)
    stores = (os.path.realpath(given), given)
    found = [real_path(store + suffix) for suffix in SQLITE_SIBLING_SUFFIXES for store in stores]
    return list(dict.fromkeys(found))


def special_file_kind(path: StrPath) -> str | None:
    """What `path` leads to, symlinks followed, when it is neither a regular file nor a folder:
    "a FIFO", "a character device", "a block device" or "a socket". None for a regular file, a
    folder, or a path that leads nowhere."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((kind for is_kind, kind in _SPECIAL_FILE_KINDS if is_kind(mode)), None)
