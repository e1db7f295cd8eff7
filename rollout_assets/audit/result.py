"""An audit's verdict (`AuditResult`), and the multiset comparison most audits end in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# How many of the things wrong an audit shows; the count of them all is beside it.
SAMPLE_SIZE = 10


@dataclass
class AuditResult:
    """One audit's verdict: counts as numbers, plus a sample of what is wrong."""

    passed: bool
    expected: int
    seen: int
    missing: int
    sample: list[str] = field(default_factory=list)
    details: dict[str, int | bool | str] = field(default_factory=dict)


def sample(items: Iterable[Any]) -> list[str]:
    return [str(item) for item in list(items)[:SAMPLE_SIZE]]


def compare(expected: Counter[Any], seen: Counter[Any], *, at_least_once: bool = False) -> AuditResult:
    """Multiset comparison: missing, duplicated (unless at_least_once) and unexpected keys."""
    # Each key once, as the expected side holds it where it does (1 and 1.0 are one key).
    keys = [*expected, *(key for key in seen if key not in expected)]
    return compare_counts(((key, expected[key], seen[key]) for key in keys), at_least_once=at_least_once)


def compare_counts(counts: Iterable[tuple[Any, int, int]], *, at_least_once: bool = False) -> AuditResult:
    """`compare`, from each key with how often it is expected and seen (each key once): what a
    comparison made on disk (`SpilledRows.tally_counts`) streams."""
    missing: list[Any] = []
    duplicated: list[Any] = []  # more often than expected (a session of a cwd two cells list is expected twice)
    unexpected: list[Any] = []
    expected_total = seen_total = 0
    for key, n_expected, n_seen in counts:
        if n_expected == 0:
            if n_seen:
                unexpected.append(key)
        elif at_least_once:
            expected_total += 1
            seen_total += n_seen > 0
            if not n_seen:
                missing.append(key)
        else:
            if n_seen < n_expected:
                missing += [key] * (n_expected - n_seen)
            elif n_seen > n_expected:
                duplicated.append(key)
        if not at_least_once:
            expected_total += n_expected
            seen_total += n_seen
    missing.sort()
    duplicated.sort()
    unexpected.sort()
    return AuditResult(
        passed=not missing and not duplicated and not unexpected,
        expected=expected_total,
        seen=seen_total,
        missing=len(missing),
        sample=sample(
            [f"missing {key}" for key in missing]
            + [f"duplicated {key}" for key in duplicated]
            + [f"unexpected {key}" for key in unexpected]
        ),
        details={"duplicated": len(duplicated), "unexpected": len(unexpected)},
    )
