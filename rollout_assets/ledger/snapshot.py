"""One reading of a ledger file: opened once, every pass of a run reads the same handle.

A backfill replaces a ledger by renaming a new file onto its path. A reader that opened the
path again for each pass could read its first pass from one ledger and its second from the
next, and mix the two. A `LedgerSnapshot` keeps the one open file (the old inode stays
readable after a rename) and, at the end, says whether the path still names the file it
read, unchanged: if not, the run's outputs describe a ledger that is no longer there, and
`check_unchanged` fails in one sentence.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from rollout_assets.errors import RoundError
from rollout_assets.io import NotARegularFile, open_regular_file


class LedgerUnreadable(RoundError, ValueError):
    """The ledger cannot be opened, or is not a regular file (a FIFO, a folder, a device)."""


class LedgerChanged(RoundError, ValueError):
    """The ledger was replaced or rewritten while a run read it."""


def _identity(found: os.stat_result) -> tuple[int, int, int, int]:
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


class LedgerSnapshot:
    """A ledger opened once for reading, without waiting on a FIFO (it is refused instead)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.file = open_regular_file(self.path)
        except NotARegularFile as error:
            raise LedgerUnreadable(f"{self.path}: not a ledger file ({error.strerror}); give a regular file") from None
        except (OSError, ValueError) as error:
            why = getattr(error, "strerror", None) or error
            raise LedgerUnreadable(f"{self.path}: cannot read the ledger ({why})") from error
        self._identity = _identity(os.fstat(self.file.fileno()))

    @property
    def size(self) -> int:
        return self._identity[2]

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(offset, raw line with its newline) of every line, from the start of the file."""
        self.file.seek(0)
        offset = 0
        for raw in self.file:
            yield offset, raw
            offset += len(raw)

    def read(self, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (a line found by `lines`); fails when they are gone."""
        data = os.pread(self.file.fileno(), length, offset)
        if len(data) != length:
            raise LedgerChanged(f"{self.path}: the ledger shrank while it was read; run again once it is written")
        return data

    def check_unchanged(self) -> None:
        """LedgerChanged unless the path still names the file opened, with its size and mtime."""
        try:
            now = _identity(os.stat(self.path))
        except OSError:
            now = None
        if now != self._identity or _identity(os.fstat(self.file.fileno())) != self._identity:
            raise LedgerChanged(
                f"{self.path}: the ledger was replaced or rewritten while it was read (a backfill running?); "
                "run again once it is written"
            )

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
