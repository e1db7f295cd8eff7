"""Tallies merged by their dataclass fields (`merge_counters`): a field added to a tally is
merged with no merge code touched, each by its type or the policy its metadata declares.

A hand-written merge that lists its fields would leave a field added later at the first part's
value; these tests add fields only by subclassing and expect them merged all the same."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.audit import SAMPLE_SIZE, LedgerRecount
from rollout_assets.backfill.stats import BackfillStats
from rollout_assets.counters import FIRST, KEEP, merge_counters, sample
from rollout_assets_tests.ledger_samples import sample_line


@dataclass
class Tally:
    """One field of every kind and every policy."""

    name: str = field(default="", metadata=KEEP)
    count: int = 0
    seconds: float = 0.0
    exact: Fraction = Fraction(0)
    by_kind: Counter[str] = field(default_factory=Counter)
    seen: set[str] = field(default_factory=set)
    order: list[int] = field(default_factory=list)
    by_role: dict[str, Any] = field(default_factory=dict)
    first_error: dict[str, str] = field(default_factory=dict, metadata=FIRST)
    examples: list[str] = field(default_factory=list, metadata=sample(3))
    cache: dict[str, str] = field(default_factory=dict, metadata=KEEP)
    optional: int | None = None


def test_every_field_merges_by_its_type_or_policy() -> None:
    first = Tally(
        name="part 1",
        count=2,
        seconds=0.5,
        exact=Fraction(1, 3),
        by_kind=Counter(a=1),
        seen={"x"},
        order=[1, 2],
        by_role={"worker": 1, "sums": [1, Fraction(1, 2)], "nested": {"n": 1}, "label": "first"},
        first_error={"read": "e1"},
        examples=["a", "b"],
        cache={"k": "first"},
    )
    later = Tally(
        name="part 2",
        count=3,
        seconds=0.25,
        exact=Fraction(1, 6),
        by_kind=Counter(a=2, b=1),
        seen={"y"},
        order=[3],
        by_role={"worker": 2, "sums": [2, Fraction(1, 4)], "nested": {"n": 2, "m": 1}, "label": "later", "new": [7]},
        first_error={"read": "e2", "parse": "e3"},
        examples=["c", "d", "e"],
        cache={"k": "later"},
        optional=4,
    )

    merge_counters(first, later)

    assert first == Tally(
        name="part 1",
        count=5,
        seconds=0.75,
        exact=Fraction(1, 2),
        by_kind=Counter(a=3, b=1),
        seen={"x", "y"},
        order=[1, 2, 3],
        by_role={
            "worker": 3,
            "sums": [3, Fraction(3, 4)],
            "nested": {"n": 3, "m": 1},
            "label": "first",
            "new": [7],
        },
        first_error={"read": "e1", "parse": "e3"},
        examples=["a", "b", "c"],
        cache={"k": "first"},
        optional=4,
    )
    # What came from the later part is copied, not shared: merging into it again leaves it be.
    merge_counters(first, later)
    assert later.by_role["new"] == [7]


def test_a_full_sample_takes_nothing_more() -> None:
    first, later = Tally(examples=["a", "b", "c"]), Tally(examples=["d"])

    merge_counters(first, later)

    assert first.examples == ["a", "b", "c"]


@dataclass
class FlagTally:
    done: bool = False


@dataclass
class OddTally:
    when: object = field(default_factory=object)


@dataclass
class UnknownPolicyTally:
    count: int = field(default=0, metadata={"merge": "average"})


@pytest.mark.parametrize(
    ("tally", "error"),
    [(FlagTally, TypeError), (OddTally, TypeError), (UnknownPolicyTally, ValueError)],
    ids=["a flag without a policy", "a value that is no count", "an unknown policy"],
)
def test_a_field_that_cannot_be_summed_is_refused(tally: type, error: type[Exception]) -> None:
    with pytest.raises(error):
        merge_counters(tally(), tally())


@dataclass
class ExtendedTally(Tally):
    added_later: int = 0
    added_samples: list[str] = field(default_factory=list, metadata=sample(1))


def test_a_narrower_tally_merges_what_it_has_and_fields_of_limits_the_merge() -> None:
    wide = ExtendedTally(count=1, added_later=1, added_samples=["a"])

    merge_counters(wide, Tally(count=2))
    assert (wide.count, wide.added_later) == (3, 1)

    merge_counters(wide, ExtendedTally(count=1, added_later=5, added_samples=["b"]), fields_of=Tally)
    assert (wide.count, wide.added_later, wide.added_samples) == (4, 1, ["a"])

    merge_counters(wide, ExtendedTally(count=1, added_later=5, added_samples=["b"]))
    assert (wide.count, wide.added_later, wide.added_samples) == (5, 6, ["a"])


@dataclass
class StatsWithMore(BackfillStats):
    """Counters with fields BackfillStats does not know, and no merge code of their own."""

    retries: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    first_refusal: dict[str, str] = field(default_factory=dict, metadata=FIRST)


def test_a_field_added_to_the_backfill_counters_is_merged_without_merge_code() -> None:
    total, part = StatsWithMore(opencode_db_available=True), StatsWithMore()
    for tally, retries, tool, why in ((total, 1, "bash", "first"), (part, 2, "edit", "second")):
        tally.observe(sample_line(role="worker"))
        tally.retries += retries
        tally.by_tool[tool] = retries
        tally.first_refusal["worker"] = why

    total.merge(part)

    assert (total.lines, total.by_role, total.retries) == (2, {"worker": 2}, 3)
    assert total.by_tool == {"bash": 1, "edit": 2}
    assert total.first_refusal == {"worker": "first"}
    assert total.opencode_db_available is True  # the round's, not a count: kept


@dataclass
class RecountWithMore(LedgerRecount):
    bytes_read: int = 0


def test_a_field_added_to_the_ledger_recount_is_merged_and_its_samples_stay_capped() -> None:
    first, later = RecountWithMore(Path("a"), bytes_read=10), RecountWithMore(Path("b"), bytes_read=5)
    for recount, start in ((first, 0), (later, 100)):
        for lineno in range(start + 1, start + SAMPLE_SIZE):
            recount.observe(b"{not json\n", lineno)
    first.unreadable.clear()
    first_problems = list(first.line_problems)

    merge_counters(first, later)

    assert first.path == Path("a")
    assert first.bytes_read == 15
    assert first.lines == first.invalid_lines == 2 * (SAMPLE_SIZE - 1)
    # As many of the later part's problems as the sample has room for, in line order.
    assert first.line_problems == first_problems + later.line_problems[:1]
    assert first.unreadable == later.unreadable
