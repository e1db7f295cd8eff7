"""Independent recounts that prove a ledger dropped nothing (the asset checks' logic).

Each audit recounts what the round SHOULD produce straight from the inputs, by its own small
code path (its own directory walk, its own SQL, plain `json`), and compares it with what the
ledger holds. None of it calls the readers or the join it verifies: a check that reuses the
code it checks cannot fail, and is worth nothing. No Dagster here either.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from pydantic import ValidationError

from rollout_assets.ledger.schema import RolloutLine
from rollout_assets.sources.jsonfiles import MAX_NESTING  # the rule, not the reader

SAMPLE_SIZE = 10

# ASCII digits and a true end of name (`$` would also match before a trailing newline), as the
# loop writes them: a folder the join does not read as a campaign must not be expected here either.
_GEN = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CAND = re.compile(r"^candidate-(\d+)\Z", re.ASCII)
_RECEIPT = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)


@dataclass
class AuditResult:
    """One audit's verdict: counts as numbers, plus a sample of what is wrong."""

    passed: bool
    expected: int
    seen: int
    missing: int
    sample: list[str] = field(default_factory=list)
    details: dict[str, int | bool | str] = field(default_factory=dict)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(raw: bytes) -> Any:
    """Strict JSON (NaN/Infinity refused); orjson for speed, the standard module for what only
    it accepts (invalid UTF-8, decoded with replacement as the seed does; lone surrogates)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8", errors="replace"), parse_constant=_reject_constant)


def _input_json(raw: bytes) -> Any:
    """Input files are read as the seed reads them: UTF-8 with replacement, NaN/Infinity refused;
    and, as the readers do, a document nested deeper than MAX_NESTING levels is unreadable."""
    try:
        value = _loads(raw)
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    depths = [(value, 1)] if isinstance(value, (dict, list)) else []
    while depths:
        item, depth = depths.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"nested deeper than {MAX_NESTING} levels")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                depths.append((child, depth + 1))
    return value


class MalformedLedgerLine(ValueError):
    """A ledger line the audits cannot read: not JSON, or a field missing or mistyped."""


class _Line:
    """One parsed ledger line whose fields are read by path, failing with `file:line` and the field."""

    def __init__(self, value: Any, where: str):
        self.value, self.where = value, where

    def get(self, *path: str) -> Any:
        value = self.value
        for key in path:
            if not isinstance(value, dict) or key not in value:
                raise MalformedLedgerLine(f"{self.where}: no field {'.'.join(path)}")
            value = value[key]
        return value


def _ledger_lines(ledger_path: Path) -> Iterator[_Line]:
    with open(ledger_path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            where = f"{ledger_path}:{lineno}"
            try:
                yield _Line(_loads(raw), where)
            except ValueError as error:
                raise MalformedLedgerLine(f"{where}: not JSON ({error})") from error


def _unreadable(error: MalformedLedgerLine) -> AuditResult:
    """A ledger that cannot be read proves nothing: the audit fails and says where."""
    return AuditResult(passed=False, expected=0, seen=0, missing=0, sample=[str(error)], details={"unreadable_lines": 1})


def _sample(items: Iterable[Any]) -> list[str]:
    return [str(item) for item in list(items)[:SAMPLE_SIZE]]


def _compare(expected: Counter[Any], seen: Counter[Any], *, at_least_once: bool = False) -> AuditResult:
    """Multiset comparison: missing, duplicated (unless at_least_once) and unexpected keys."""
    missing = sorted((expected - seen).elements()) if not at_least_once else sorted(set(expected) - set(seen))
    duplicated = [] if at_least_once else sorted(key for key, count in seen.items() if count > 1)
    unexpected = sorted(set(seen) - set(expected))
    return AuditResult(
        passed=not missing and not duplicated and not unexpected,
        expected=sum(expected.values()) if not at_least_once else len(expected),
        seen=sum(seen.values()) if not at_least_once else len(set(seen) & set(expected)),
        missing=len(missing),
        sample=_sample([f"missing {key}" for key in missing] + [f"duplicated {key}" for key in duplicated]
                       + [f"unexpected {key}" for key in unexpected]),
        details={"duplicated": len(duplicated), "unexpected": len(unexpected)},
    )


# ---------------------------------------------------------------------------
# The round's cells, walked independently of sources/round.py
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cell:
    candidate_id: str
    scenario_id: str
    rep: int
    run_dir: str | None


def _listdir(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _campaign_dirs(out_dir: Path) -> Iterator[tuple[str, Path]]:
    improve = out_dir / "improve-run"
    yield "baseline", improve / "baseline"
    for generation in _listdir(improve):
        g = _GEN.match(generation)
        if g is None:
            continue
        for candidate in _listdir(improve / generation):
            c = _CAND.match(candidate)
            if c is not None:
                yield f"gen{int(g[1])}-cand{int(c[1])}", improve / generation / candidate


def walk_cells(out_dir: Path) -> Iterator[_Cell]:
    for candidate_id, campaign in _campaign_dirs(out_dir):
        if not campaign.is_dir():
            continue
        for name in _listdir(campaign):
            cache = campaign / name / "cached-result.json"
            if not cache.is_file():
                continue
            record = _input_json(cache.read_bytes())
            artifact = record.get("artifact")
            run_dir = artifact.get("runDir") if isinstance(artifact, dict) else None
            rep = record["rep"]
            yield _Cell(candidate_id, record["scenarioId"], int(rep), run_dir if isinstance(run_dir, str) else None)


def _result_json(run_dir: str | None) -> dict[str, Any] | None:
    if run_dir is None:
        return None
    try:
        result = _input_json(Path(run_dir, "result.json").read_bytes())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


# ---------------------------------------------------------------------------
# The audits
# ---------------------------------------------------------------------------


def audit_supervisors(out_dir: Path, ledger_path: Path) -> AuditResult:
    """Every campaign cell has exactly one supervisor line."""
    expected = Counter((c.candidate_id, c.scenario_id, c.rep) for c in walk_cells(out_dir))
    try:
        seen = Counter(
            (line.get("candidate_id"), line.get("task", "instance_id"), line.get("task", "rep"))
            for line in _ledger_lines(ledger_path)
            if line.get("role") == "supervisor"
        )
    except MalformedLedgerLine as error:
        return _unreadable(error)
    return _compare(expected, seen)


def _opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, list[str]]:
    """(store readable, ids of the sessions of `directories`), by this module's own SQL."""
    if not opencode_db.is_file() or not directories:
        return opencode_db.is_file(), []
    try:
        connection = sqlite3.connect(f"file:{quote(str(opencode_db.resolve()))}?mode=ro", uri=True)
    except sqlite3.Error:
        return False, []
    try:
        wanted = sorted(directories)
        ids: list[str] = []
        for start in range(0, len(wanted), 500):
            batch = wanted[start : start + 500]
            marks = ",".join("?" * len(batch))
            ids += [row[0] for row in connection.execute(f"SELECT id FROM session WHERE directory IN ({marks})", batch)]
        return True, ids
    except sqlite3.Error:
        return False, []
    finally:
        connection.close()


def audit_workers(out_dir: Path, ledger_path: Path, opencode_db: Path) -> AuditResult:
    """Every distinct worker cwd of any result.json has a worker line; every session of them appears once."""
    cwds: set[str] = set()
    for cell in walk_cells(out_dir):
        result = _result_json(cell.run_dir)
        recovered = result.get("recoveredSpend") if result is not None else None
        listed = recovered.get("workerCwds") if isinstance(recovered, dict) else None
        if isinstance(listed, list):
            cwds.update(cwd for cwd in listed if isinstance(cwd, str))
    store_readable, session_ids = _opencode_sessions(opencode_db, cwds)
    seen_cwds: set[str] = set()
    seen_sessions: Counter[str] = Counter()
    try:
        for line in _ledger_lines(ledger_path):
            if line.get("role") != "worker":
                continue
            seen_cwds.add(line.get("outcome", "metrics", "worker_cwd"))
            ref = line.get("artifacts", "transcript_ref")
            if isinstance(ref, str) and ref.startswith("opencode:"):
                seen_sessions[ref.removeprefix("opencode:")] += 1
    except MalformedLedgerLine as error:
        return _unreadable(error)
    cwd_result = _compare(Counter(cwds), Counter(seen_cwds), at_least_once=True)
    session_result = _compare(Counter(session_ids), seen_sessions)
    return AuditResult(
        passed=cwd_result.passed and session_result.passed,
        expected=cwd_result.expected + session_result.expected,
        seen=cwd_result.seen + session_result.seen,
        missing=cwd_result.missing + session_result.missing,
        sample=_sample([f"cwd: {s}" for s in cwd_result.sample] + [f"session: {s}" for s in session_result.sample]),
        details={
            "expected_cwds": cwd_result.expected,
            "missing_cwds": cwd_result.missing,
            "expected_sessions": session_result.expected,
            "missing_sessions": session_result.missing,
            "duplicated_sessions": int(session_result.details["duplicated"]),
            "unexpected_sessions": int(session_result.details["unexpected"]),
            "opencode_store_readable": store_readable,
        },
    )


def _receipt_keys(out_dir: Path) -> Iterator[tuple[str, int]]:
    shots = out_dir / "proposer-shots"
    for name in _listdir(shots):
        path = shots / name
        if path.is_dir() and not path.is_symlink():
            for inner in _listdir(path):
                match = _RECEIPT.match(inner)
                if match:
                    yield f"gen{int(match[1])}-cand{int(match[2])}-{name}", int(match[3])
        else:
            match = _RECEIPT.match(name)
            if match:
                yield f"gen{int(match[1])}-cand{int(match[2])}", int(match[3])


def audit_proposers(out_dir: Path, ledger_path: Path) -> AuditResult:
    """Every shot receipt has exactly one proposer line."""
    expected = Counter(_receipt_keys(out_dir))
    try:
        seen = Counter(
            (line.get("task", "instance_id"), line.get("task", "rep"))
            for line in _ledger_lines(ledger_path)
            if line.get("role") == "proposer"
        )
    except MalformedLedgerLine as error:
        return _unreadable(error)
    return _compare(expected, seen)


def _why_invalid(error: ValueError) -> str:
    """What is wrong with a line: the first field error (pydantic's first line only counts them)."""
    if isinstance(error, ValidationError):
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error).splitlines()[0]


def audit_integrity(ledger_path: Path) -> AuditResult:
    """Every line validates, every empty transcript carries a gap, ids are unique, parents exist."""
    problems: list[str] = []
    counts = Counter[str]()
    ids: Counter[str] = Counter()
    supervisors: set[str] = set()
    parents: list[tuple[int, str]] = []
    lines = 0
    with open(ledger_path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            lines += 1
            try:
                line = _loads(raw)
                RolloutLine.model_validate(line)
            except (ValueError, ValidationError) as error:
                counts["invalid"] += 1
                problems.append(f"{ledger_path}:{lineno}: {_why_invalid(error)}")
                continue
            if not line["messages"] and not line["provenance"].get("gap"):
                counts["unlabeled_gaps"] += 1
                problems.append(f"{ledger_path}:{lineno}: empty transcript without a gap reason")
            ids[line["rollout_id"]] += 1
            if line["role"] == "supervisor":
                supervisors.add(line["rollout_id"])
            if line["parent_rollout_id"] is not None:
                parents.append((lineno, line["parent_rollout_id"]))
    duplicated = [rollout_id for rollout_id, n in ids.items() if n > 1]
    orphans = [(lineno, parent) for lineno, parent in parents if parent not in supervisors]
    problems += [f"duplicated rollout_id {rollout_id}" for rollout_id in duplicated]
    problems += [f"{ledger_path}:{lineno}: parent {parent} is no supervisor line" for lineno, parent in orphans]
    return AuditResult(
        passed=not problems,
        expected=lines,
        seen=lines - counts["invalid"],
        missing=counts["invalid"] + counts["unlabeled_gaps"],
        sample=_sample(problems),
        details={
            "invalid_lines": counts["invalid"],
            "unlabeled_gaps": counts["unlabeled_gaps"],
            "duplicated_ids": len(duplicated),
            "orphan_parents": len(orphans),
        },
    )


def audit_stats(ledger_path: Path, stats_path: Path) -> AuditResult:
    """The stored counters reconcile with the ledger and with each other."""
    stats = json.loads(stats_path.read_bytes())
    lines = full = gap = rewarded = 0
    by_role: Counter[str] = Counter()
    try:
        for line in _ledger_lines(ledger_path):
            lines += 1
            by_role[line.get("role")] += 1
            if line.get("messages"):
                full += 1
            else:
                gap += 1
            rewarded += line.get("outcome", "reward") is not None
    except MalformedLedgerLine as error:
        return _unreadable(error)
    problems = []
    recount = {"lines": lines, "fullTranscripts": full, "gapLines": gap, "rewardLabeled": rewarded}
    for key, value in recount.items():
        if stats.get(key) != value:
            problems.append(f"{key}: stats say {stats.get(key)}, ledger holds {value}")
    if stats.get("byRole") != dict(by_role):
        problems.append(f"byRole: stats say {stats.get('byRole')}, ledger holds {dict(by_role)}")
    if sum((stats.get("byRole") or {}).values()) != stats.get("lines"):
        problems.append("stats: Σ byRole != lines")
    if stats.get("fullTranscripts", 0) + stats.get("gapLines", 0) != stats.get("lines"):
        problems.append("stats: fullTranscripts + gapLines != lines")
    return AuditResult(
        passed=not problems,
        expected=lines,
        seen=stats.get("lines") if isinstance(stats.get("lines"), int) else -1,
        missing=len(problems),
        sample=_sample(problems),
        details={"reward_labeled": rewarded, "gap_lines": gap, "full_transcripts": full},
    )


def cells_without_worker_list(out_dir: Path) -> list[str]:
    """Cells whose arm ran (runDir known) but whose result.json is missing or unreadable."""
    return [
        f"{cell.candidate_id}/{cell.scenario_id}/rep{cell.rep}"
        for cell in walk_cells(out_dir)
        if cell.run_dir is not None and _result_json(cell.run_dir) is None
    ]
