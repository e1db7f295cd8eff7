"""PackedStrings: the compact list of strings the manifest keeps one entry a cell in."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import overload


class PackedStrings(Sequence[str]):
    """A list of strings kept as one buffer of their UTF-8 bytes and an array of end offsets.

    A round lists one cell name and one settled call per cell: as str objects (~80 bytes
    each) the manifest grew with the round, and every forked worker that touched a page of
    them copied it. Packed, each costs its bytes plus an 8-byte offset, in two objects.
    """

    __slots__ = ("_data", "_ends")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._data = bytearray()
        self._ends = array("Q")
        for string in strings:
            self.append(string)

    def append(self, string: str) -> None:
        # surrogatepass: file names and JSON strings may hold lone surrogates.
        self._data += string.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._data))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> PackedStrings: ...

    def __getitem__(self, index: int | slice) -> str | PackedStrings:
        if isinstance(index, slice):
            return PackedStrings(self[i] for i in range(*index.indices(len(self))))
        index = range(len(self))[index]  # negative indexes; IndexError past the end
        start = self._ends[index - 1] if index else 0
        return self._data[start : self._ends[index]].decode("utf-8", "surrogatepass")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedStrings):
            return (self._data, self._ends) == (other._data, other._ends)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedStrings({list(self)!r})"
