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
    missing = sorted((expected - seen).elements()) if not at_least_once else sorted(set(expected) - set(seen))
    # More often than expected (a session of a cwd two cells list is expected twice).
    duplicated = (
        [] if at_least_once else sorted(key for key, count in seen.items() if 0 < expected[key] < count)
    )
    unexpected = sorted(set(seen) - set(expected))
    return AuditResult(
        passed=not missing and not duplicated and not unexpected,
        expected=sum(expected.values()) if not at_least_once else len(expected),
        seen=sum(seen.values()) if not at_least_once else len(set(seen) & set(expected)),
        missing=len(missing),
        sample=sample(
            [f"missing {key}" for key in missing]
            + [f"duplicated {key}" for key in duplicated]
            + [f"unexpected {key}" for key in unexpected]
        ),
        details={"duplicated": len(duplicated), "unexpected": len(unexpected)},
    )
