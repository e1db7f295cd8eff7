"""Merging the counters of one round's parts, written once.

A round is counted in parts (units of cells in forked workers, byte ranges of a ledger) and the
parts' tallies are added up in order. Every tally is a dataclass; `merge_counters` walks its
fields with `dataclasses.fields`, so a field added later is merged too instead of being
silently lost by a hand-written list. A field says how it merges in its metadata; without
metadata it is summed by its type:

- a number (int, float, Fraction) is added;
- a `Counter` is updated (counts added); a set gets the union; a list is extended;
- a dict is merged key by key: numbers added, lists of numbers added element-wise, dicts
  recursively, any other value kept from the earlier part.

Other policies, set with `field(metadata=...)`: `KEEP` (the tally's identity, such as the
file it counts: never merged), `FIRST` (a dict whose first entry per key wins, such as the
first error seen) and `sample(n)` (a list capped at n entries, earlier ones first).

A subclass that merges the fields it adds by a rule of its own (runs of lines, say) merges its
base's share with `fields_of=` the base class, then its own fields itself.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from fractions import Fraction
from typing import Any

KEEP: dict[str, Any] = {"merge": "keep"}
FIRST: dict[str, Any] = {"merge": "first"}


def sample(limit: int) -> dict[str, Any]:
    """Metadata of a list that keeps at most `limit` entries, the earliest parts' first."""
    return {"merge": "sample", "limit": limit}


def merge_counters(into: Any, later: Any, *, fields_of: type | None = None) -> None:
    """Add the tally `later` (of the part that follows) into `into`, field by field: every
    field of `into`, or only those the dataclass `fields_of` declares."""
    for spec in dataclasses.fields(fields_of or into):
        if not hasattr(later, spec.name):
            continue  # a tally of a narrower kind (a base class) merges what it has
        how = spec.metadata.get("merge", "sum")
        if how == "keep":
            continue
        mine, theirs = getattr(into, spec.name), getattr(later, spec.name)
        if how == "first":
            for key, value in theirs.items():
                mine.setdefault(key, value)
        elif how == "sample":
            mine.extend(theirs[: max(0, spec.metadata["limit"] - len(mine))])
        elif how == "sum":
            setattr(into, spec.name, _summed(mine, theirs, spec.name))
        else:
            raise ValueError(f"field {spec.name}: unknown merge policy {how!r}")


def _summed(mine: Any, theirs: Any, name: str) -> Any:
    if isinstance(mine, bool) or isinstance(theirs, bool):
        raise TypeError(f"field {name}: a flag is not a count; give it a merge policy")
    if isinstance(mine, int | float | Fraction):
        return mine + theirs
    if isinstance(mine, Counter):
        mine.update(theirs)
        return mine
    if isinstance(mine, set):
        mine |= theirs
        return mine
    if isinstance(mine, list):
        mine.extend(theirs)
        return mine
    if isinstance(mine, dict):
        for key, value in theirs.items():
            mine[key] = _summed_value(mine[key], value, name) if key in mine else _copied(value)
        return mine
    if mine is None or theirs is None:
        return mine if theirs is None else theirs
    raise TypeError(f"field {name}: cannot sum a {type(mine).__name__}; give it a merge policy")


def _summed_value(mine: Any, theirs: Any, name: str) -> Any:
    if isinstance(mine, list) and isinstance(theirs, list | tuple):
        for index, value in enumerate(theirs):
            mine[index] += value
        return mine
    if isinstance(mine, int | float | Fraction | dict | Counter | set):
        return _summed(mine, theirs, name)
    return mine  # a label or other value: the earlier part's stays


def _copied(value: Any) -> Any:
    # A list or dict taken from the later part is copied, so later merges into it do not
    # change the part it came from.
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return type(value)(value)
    return value
