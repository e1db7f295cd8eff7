"""What a dataset's selection holds per ledger line, in a few bytes a line: the fate of every
line (`Fates`, one byte each) and the rows as tuples of line indexes (`RowIndexes`, eight bytes
an index). A dict of strings and a list of tuples of ints cost about a hundred bytes a line."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, MutableMapping

from rollout_assets.training.filter import DROP_REASONS

FATES = ("row", *DROP_REASONS)
_CODES = {fate: code for code, fate in enumerate(FATES, 1)}  # 0: no fate yet


class Fates(MutableMapping[int, str]):
    """Line index -> fate (`row` or a drop reason), as a dict of them would answer; iterated
    in line order."""

    def __init__(self) -> None:
        self._codes = bytearray()
        self._count = 0

    def _code(self, index: int) -> int:
        return self._codes[index] if 0 <= index < len(self._codes) else 0

    def __getitem__(self, index: int) -> str:
        code = self._code(index)
        if not code:
            raise KeyError(index)
        return FATES[code - 1]

    def __setitem__(self, index: int, fate: str) -> None:
        code, codes = _CODES.get(fate), self._codes
        if code is None:
            raise ValueError(f"{fate!r} is no fate of a line: one of {', '.join(FATES)}")
        if index >= len(codes):
            codes.extend(bytes(index + 1 - len(codes)))
        elif index < 0:
            raise KeyError(index)
        if not codes[index]:
            self._count += 1
        codes[index] = code

    def __delitem__(self, index: int) -> None:
        if not self._code(index):
            raise KeyError(index)
        self._codes[index] = 0
        self._count -= 1

    def setdefault(self, index: int, fate: str) -> str:  # type: ignore[override]
        code = self._code(index)
        if code:
            return FATES[code - 1]
        self[index] = fate
        return fate

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and bool(self._code(index))

    def __iter__(self) -> Iterator[int]:
        return (index for index, code in enumerate(self._codes) if code)

    def __len__(self) -> int:
        return self._count


class RowIndexes:
    """A list of rows, each a tuple of line indexes, appended and iterated in order."""

    def __init__(self, rows: Iterable[tuple[int, ...]] = ()) -> None:
        self._indexes = array("q")
        self._ends = array("q")  # where each row's indexes end
        for row in rows:
            self.append(row)

    def append(self, row: tuple[int, ...]) -> None:
        self._indexes.extend(row)
        self._ends.append(len(self._indexes))

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        start = 0
        for end in self._ends:
            yield tuple(self._indexes[start:end])
            start = end

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RowIndexes, list)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIndexes({list(self)!r})"
