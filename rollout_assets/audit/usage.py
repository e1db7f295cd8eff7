"""The audit's own sums of token usage and spend, and how one is held against a ledger line's
`cost` field (docs/line-format.md): a Claude thread's final usage per API message
(docs/input-formats.md §5, `ThreadUsage`), and the rule that picks a worker's spend from its
session row or its messages (docs/input-formats.md §4, `worker_spend`).

A sum is kept as (total, magnitude, terms): the total of the numbers added (None when none
was: not measured, never 0), the total of their absolute values, and how many there were.
Integer sums are exact and compared exactly. A sum holding a float is compared within what two
orders of adding can differ by (the join adds in its order, the audit in its own): at most
2 * terms * 2**-53 * magnitude. A total that overflows a double is null in the ledger.
"""

from __future__ import annotations

import math
from typing import Any

from rollout_assets.audit.strict_json import is_number

Sum = tuple[Any, Any, int]  # (total or None, magnitude, terms)
NO_SUM: Sum = (None, 0, 0)

# The fields of a ledger line's `cost` the audit recounts, in this order in every record of them.
COST_FIELDS = ("usd", "tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write")
# A Claude API message's usage counts, in the order of the cost fields they sum into:
# tokens_in, tokens_out, cache_read, cache_write.
CLAUDE_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
CLAUDE_COST_FIELDS = ("tokens_in", "tokens_out", "cache_read", "cache_write")

_HALF_ULP = 2.0**-53


def plus(total: Sum, value: Any) -> Sum:
    """`total` with `value` added when it is a JSON number (a bool is none)."""
    if not is_number(value):
        return total
    amount, magnitude, terms = total
    return (value if amount is None else amount + value, magnitude + abs(value), terms + 1)


def exact(value: Any) -> Sum:
    """One recorded value as a sum of itself; a value that is no finite number as none."""
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):
        return (value, abs(value), 1)
    return NO_SUM


class ThreadUsage:
    """The final usage of each API message of one thread of a transcript (its main chain, or one
    sub-agent conversation): the `usage` object of the last assistant line of each string
    `message.id` that carries one. A line whose `message.id` is missing or not a string is a
    message of its own."""

    def __init__(self) -> None:
        self._final: dict[Any, tuple[Any, ...]] = {}
        self._unnamed = 0

    def note(self, entry: dict[str, Any]) -> None:
        """One conversation line of the thread (`type` user or assistant, an object `message`)."""
        if entry.get("type") != "assistant":
            return
        message = entry["message"]
        usage = message.get("usage")
        if not isinstance(usage, dict):
            return
        api_id = message.get("id")
        if not isinstance(api_id, str):
            self._unnamed += 1
            api_id = self._unnamed  # an int: equal to no string id
        self._final[api_id] = tuple(usage.get(name) for name in CLAUDE_USAGE)

    def sums(self) -> tuple[Sum, ...]:
        """The four sums (tokens_in, tokens_out, cache_read, cache_write), each message once."""
        totals = [NO_SUM] * len(CLAUDE_USAGE)
        for usage in self._final.values():
            totals = [plus(total, value) for total, value in zip(totals, usage)]
        return tuple(totals)


def worker_spend(columns: tuple[Any, ...], messages: tuple[Sum, ...]) -> tuple[tuple[Sum, ...], bool]:
    """A worker's six cost fields (COST_FIELDS, docs/line-format.md, Worker lines), and whether
    they are its messages': the session row's columns (`columns`; None for a column the store
    lacks), each a finite number or null; but when every column is null or 0 while some
    assistant message records its spend, the sums over the messages (`messages`, in COST_FIELDS
    order)."""
    recorded = tuple(map(exact, columns))
    if not any(total for total, _, _ in recorded) and any(total is not None for total, _, _ in messages):
        return messages, True  # every column null or 0, and the messages record their spend
    return recorded, False


def sum_problem(field: str, expected: Sum, seen: Any, source: str) -> str | None:
    """What is wrong with the line's `cost.<field>`, `seen`, against the audit's sum over
    `source` (a phrase naming what was read); None when it holds."""
    total, magnitude, terms = expected
    if seen == total and type(seen) is type(total):
        return None  # both null, or the same number: most fields of most lines
    if isinstance(total, float) and not math.isfinite(total):
        total = None  # written null, as a sum that overflows a double is
    if total is None:
        if seen is None:
            return None
        return f"cost.{field} is {seen!r}, but {source} records none"
    if seen is not None and _same(total, magnitude, terms, seen):
        return None
    return f"cost.{field} is {'null' if seen is None else repr(seen)}, but {source} gives {total!r}"


def _same(total: Any, magnitude: Any, terms: int, seen: Any) -> bool:
    if not is_number(seen):
        return False
    if isinstance(total, int) and isinstance(seen, int):
        return seen == total
    bound = 2 * terms * _HALF_ULP * float(magnitude)
    return abs(float(seen) - float(total)) <= bound
