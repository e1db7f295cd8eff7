"""The verdicts of the counting checks, the integrity check and the stats check: each a
comparison of the inputs' recount with the ledger's (the order check, which names every line,
is in inputs_match.py)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from rollout_assets.audit.exact_sums import exact_value
from rollout_assets.audit.inputs import InputsRecount
from rollout_assets.audit.ledger import LedgerRecount, MalformedLedgerLine
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult, compare, compare_counts, sample
from rollout_assets.audit.strict_json import is_number


def unreadable(error: MalformedLedgerLine) -> AuditResult:
    """A ledger that cannot be read proves nothing: the audit fails and says where."""
    return AuditResult(
        passed=False, expected=0, seen=0, missing=0, sample=[str(error)], details={"unreadable_lines": 1}
    )


def supervisors_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every campaign cell has exactly one supervisor line."""
    if "supervisors" in ledger.unreadable:
        return unreadable(ledger.unreadable["supervisors"])
    return _compare_tallies(inputs, "cells", ledger, "supervisors")


def workers_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every distinct worker cwd of any result.json has a worker line; every session of them appears once per cell listing its cwd."""
    if "workers" in ledger.unreadable:
        return unreadable(ledger.unreadable["workers"])
    cwd_result = _compare_tallies(inputs, "worker_cwds", ledger, "worker_cwds", at_least_once=True)
    session_result = _compare_tallies(inputs, "session_ids", ledger, "worker_sessions")
    return AuditResult(
        passed=cwd_result.passed and session_result.passed,
        expected=cwd_result.expected + session_result.expected,
        seen=cwd_result.seen + session_result.seen,
        missing=cwd_result.missing + session_result.missing,
        sample=sample(
            [f"cwd: {s}" for s in cwd_result.sample] + [f"session: {s}" for s in session_result.sample]
        ),
        details={
            "expected_cwds": cwd_result.expected,
            "missing_cwds": cwd_result.missing,
            "expected_sessions": session_result.expected,
            "missing_sessions": session_result.missing,
            "duplicated_sessions": int(session_result.details["duplicated"]),
            "unexpected_sessions": int(session_result.details["unexpected"]),
            "opencode_store_readable": inputs.store_readable,
        },
    )


def _compare_tallies(
    inputs: InputsRecount, name: str, ledger: LedgerRecount, ledger_name: str, *, at_least_once: bool = False
) -> AuditResult:
    """`compare` of an inputs' tally with the ledger's, grouped on disk: a Counter of each
    held 192,000 sessions at 96,000 cells (about 30 MiB a side)."""
    counts = inputs.keys.tally_counts(name, ledger.keys, ledger_name)
    return compare_counts(counts, at_least_once=at_least_once)


def proposers_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every shot receipt has exactly one proposer line."""
    if "proposers" in ledger.unreadable:
        return unreadable(ledger.unreadable["proposers"])
    return compare(inputs.receipts, ledger.tally("proposers"))


def integrity_verdict(ledger: LedgerRecount) -> AuditResult:
    """Every line validates, every empty transcript carries a gap, ids are unique, parents exist
    (a worker's is a supervisor line, a sub-agent's a proposer line), and no transcript file is
    joined to two proposer lines (the join is one-to-one)."""
    duplicated = ledger.duplicated_ids()
    orphans = ledger.orphans()
    agent_orphans = ledger.agent_orphans()
    joined_twice = sorted(ref for ref, n in ledger.joined_transcripts.items() if n > 1)
    problems = list(ledger.line_problems)
    problems += [f"duplicated rollout_id {rollout_id}" for rollout_id in duplicated[:SAMPLE_SIZE]]
    problems += [
        f"{ledger.path}:{lineno}: parent {parent} is no supervisor line"
        for lineno, parent in orphans[:SAMPLE_SIZE]
    ]
    problems += [
        f"{ledger.path}:{lineno}: the sub-agent line's parent {parent} is no proposer line"
        for lineno, parent in agent_orphans[:SAMPLE_SIZE]
    ]
    problems += [
        f"transcript {ref} is joined to {ledger.joined_transcripts[ref]} proposer lines; a transcript joins one shot"
        for ref in joined_twice[:SAMPLE_SIZE]
    ]
    orphans += agent_orphans
    return AuditResult(
        passed=not (ledger.invalid_lines or ledger.unlabeled_gaps or duplicated or orphans or joined_twice),
        expected=ledger.lines,
        seen=ledger.lines - ledger.invalid_lines,
        missing=ledger.invalid_lines + ledger.unlabeled_gaps,
        sample=sample(problems),
        details={
            "invalid_lines": ledger.invalid_lines,
            "unlabeled_gaps": ledger.unlabeled_gaps,
            "duplicated_ids": len(duplicated),
            "orphan_parents": len(orphans),
            "transcripts_joined_twice": len(joined_twice),
        },
    )


def _join_counters(ledger: LedgerRecount) -> dict[str, int]:
    """The stats' join counters, from the ledger's gap kinds and roles: a worker cwd without a
    session (none found, or the store unavailable), a session without readable messages, a
    worker transcript joined; a shot without a transcript (none matched, or unreadable), every
    other shot joined, some to an empty transcript; a cell whose workers cannot be listed."""
    kinds = ledger.gap_kinds
    shots_missed = kinds["no_claude_transcript"] + kinds["claude_transcripts_unreadable"]
    return {
        "workerSessionsJoined": ledger.worker_full_transcripts,
        "workerCwdsMissed": kinds["no_opencode_session"] + kinds["opencode_store_unavailable"],
        "workerSessionsEmpty": kinds["opencode_session_empty"],
        "proposerShotsJoined": ledger.by_role["proposer"] - shots_missed,
        "proposerShotsMissed": shots_missed,
        "proposerTranscriptsEmpty": kinds["claude_transcript_empty"],
        "cellsWithoutWorkerList": kinds["supervisor_worker_list_missing"],
    }


def _as_double(value: Fraction) -> float | None:
    try:
        return float(value)
    except OverflowError:  # a sum no double holds: the stats write null
        return None


def _within_rounding(exact: float, stated: float, decimals: int) -> bool:
    """`stated` is `exact` rounded to `decimals` decimals, as a double."""
    try:
        ulps = 4 * math.ulp(max(abs(exact), abs(stated)))
        return abs(exact - stated) <= 0.5 * 10.0**-decimals + ulps
    except OverflowError:  # an integer written beyond any double: no rounding of the ledger's sum
        return False


def _sums_problems(
    key: str, stated: Any, recounted: dict[str, list[Any]], count_key: str, value_key: str, *, mean: bool
) -> list[str]:
    """Per role, the stats' count and sum (or mean) of rewards or costs against the ledger's.
    Stated values are rounded (means to 12 decimals, costs to 6): compared within half a unit
    of that last decimal, plus the few units in the last place of a double that the writer's
    division and rounding may add."""
    expected = {}
    for role, (count, total_units) in recounted.items():
        total = exact_value(total_units)
        value = _as_double(total / count if mean else total)
        expected[role] = (count, value)
    seen = {}
    for role, entry in (stated or {}).items() if isinstance(stated, dict) else ():
        seen[role] = (entry.get(count_key), entry.get(value_key)) if isinstance(entry, dict) else (None, None)
    problems = []
    for role in sorted(set(expected) | set(seen), key=str):
        (count, value), (stated_count, stated_value) = expected.get(role, (0, None)), seen.get(role, (0, None))
        close = value is None and stated_value is None or (
            is_number(value) and is_number(stated_value) and _within_rounding(value, stated_value, 12 if mean else 6)
        )
        if count != stated_count or not close:
            problems.append(
                f"{key}.{role}: stats say {count_key} {stated_count}, {value_key} {stated_value}; "
                f"ledger holds {count}, {value}"
            )
    return problems


def _store_problems(available: Any, ledger: LedgerRecount) -> list[str]:
    """The store was read, or it was not: its availability shows in the worker lines."""
    store_unavailable = ledger.gap_kinds["opencode_store_unavailable"]
    sessions_read = ledger.worker_full_transcripts + ledger.gap_kinds["opencode_session_empty"]
    if available is True and store_unavailable:
        return [
            f"opencodeDbAvailable: stats say true, yet {store_unavailable} worker line(s) say the store was unavailable"
        ]
    if available is False and sessions_read:
        return [
            f"opencodeDbAvailable: stats say false, yet {sessions_read} worker line(s) hold a session read from it"
        ]
    if not isinstance(available, bool):
        return [f"opencodeDbAvailable: stats say {available!r}, not true or false"]
    return []


def stats_verdict(ledger: LedgerRecount, stats_path: Path) -> AuditResult:
    """The stored counters reconcile with the ledger and with each other."""
    stats = json.loads(stats_path.read_bytes())
    if "stats" in ledger.unreadable:
        return unreadable(ledger.unreadable["stats"])
    problems = []
    recount = {
        "lines": ledger.lines,
        "fullTranscripts": ledger.full_transcripts,
        "gapLines": ledger.gap_lines,
        "rewardLabeled": ledger.reward_labeled,
    }
    for key, value in recount.items():
        if stats.get(key) != value:
            problems.append(f"{key}: stats say {stats.get(key)}, ledger holds {value}")
    if stats.get("byRole") != dict(ledger.by_role):
        problems.append(f"byRole: stats say {stats.get('byRole')}, ledger holds {dict(ledger.by_role)}")
    # Gap lines by reason, each gap classified by the audit's reading of its wording.
    by_gap = dict(sorted(ledger.gap_kinds.items()))
    if stats.get("byGapReason") != by_gap:
        problems.append(f"byGapReason: stats say {stats.get('byGapReason')}, ledger holds {by_gap}")
    problems += _sums_problems(
        "rewardByRole", stats.get("rewardByRole"), ledger.rewards_by_role, "labeled", "mean", mean=True
    )
    problems += _sums_problems(
        "costUsdByRole", stats.get("costUsdByRole"), ledger.costs_by_role, "linesWithCost", "usd", mean=False
    )
    for key, held in _join_counters(ledger).items():
        if stats.get(key) != held:
            problems.append(f"{key}: stats say {stats.get(key)}, ledger holds {held}")
    problems += _store_problems(stats.get("opencodeDbAvailable"), ledger)
    if sum((stats.get("byRole") or {}).values()) != stats.get("lines"):
        problems.append("stats: Σ byRole != lines")
    if stats.get("fullTranscripts", 0) + stats.get("gapLines", 0) != stats.get("lines"):
        problems.append("stats: fullTranscripts + gapLines != lines")
    return AuditResult(
        passed=not problems,
        expected=ledger.lines,
        seen=stats.get("lines") if isinstance(stats.get("lines"), int) else -1,
        missing=len(problems),
        sample=sample(problems),
        details={
            "reward_labeled": ledger.reward_labeled,
            "gap_lines": ledger.gap_lines,
            "full_transcripts": ledger.full_transcripts,
        },
    )
