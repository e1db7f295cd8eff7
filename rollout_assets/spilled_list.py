"""SpilledList: a list written once and read in order, kept in a temporary file rather than in
memory (docs/performance.md, Memory).

What uses it: the manifest stage's per-cell lists (one per-instance row and up to three
artifact paths a cell, held until the manifest's JSON is written, grew the stage by about
180 MiB at 96,000 cells) and the audit's cells in ledger order (`audit/cells.py`). Each value
is `marshal`-encoded (exact for JSON's values and tuples, lone surrogates included) into an
anonymous file, read back from its start at every walk. The file is buffered: a small list
never reaches the disk before it is read.

It is a `list` subclass so that `json.JSONEncoder(indent=...)`, whose pure-Python walk
(`json.encoder._make_iterencode`, used whenever an indent is set) takes any list by
`isinstance`, asks for its length only through truth and then iterates it, encodes it as the
list it stands for. Nothing but appending, iterating, `len` and equality is supported: the
list's own storage stays empty, so indexing raises instead of answering wrong.
"""

from __future__ import annotations

import marshal
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, SupportsIndex

# A spilled list is usually written in full, then read; reading flushes what is pending.
_BUFFER = 1 << 16


class SpilledList(list):  # type: ignore[type-arg]
    """An append-only list of JSON-like values in an anonymous temporary file, removed when
    the list is dropped."""

    def __init__(self, values: Iterable[Any] = ()) -> None:
        super().__init__()
        # Deleted by the system when closed, and closed when the list is dropped.
        self._file = tempfile.TemporaryFile(prefix="rollout-spill-", buffering=_BUFFER)
        self._count = 0
        self.extend(values)

    def append(self, value: Any) -> None:
        marshal.dump(value, self._file)
        self._count += 1

    def extend(self, values: Iterable[Any]) -> None:
        for value in values:
            self.append(value)

    def __iadd__(self, values: Iterable[Any]) -> SpilledList:  # type: ignore[override]
        self.extend(values)
        return self

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        """The values in order. One walk at a time: each walk reads the file from its start."""
        self._file.flush()
        end = self._file.tell()
        self._file.seek(0)
        try:
            for _ in range(self._count):
                yield marshal.load(self._file)
        finally:
            self._file.seek(end)

    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        raise TypeError("a SpilledList is read in order only (iterate it)")

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpilledList({self._count} values on disk)"

    def __reduce__(self) -> Any:
        # Pickled (a manifest handed to a forked worker, say), it travels as the plain list.
        return (list, (list(self),))
