"""The usage check's verdict (`usage_verdict`): every line's token counts, and a worker's spend,
are what its records hold, summed by the audit's own reading of them (docs/line-format.md,
the `cost` of each role), never taken from the join:

    supervisor   no token count: brain.jsonl keeps per-request stats only
    worker       the spend columns of its session's row, or, when all are null or 0 while its
                 assistant messages record their spend, their sums over those messages (the
                 one grouped count of the sessions' rows, line_sessions.py); without a
                 session, nothing
    proposer     the final usage of each API message of the main chain of the transcript the
                 audit's one-to-one join gives the shot, summed (subagents.py); a line whose
                 gap says it has no transcript, nothing; no reasoning tokens
    agent        the same sums over its sub-agent conversation; no cost in dollars and no
                 reasoning tokens (the receipt's cost is the shot's, on the proposer line)

A count no record holds must be null in the line, never 0. The dollar costs of supervisors and
proposers (the cell's `costUsd`, the receipt's) and every `wall_s` are copied from one field of
the inputs and are not recounted here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from rollout_assets.audit.inputs import ExpectedLine, InputsRecount
from rollout_assets.audit.ledger import LedgerRecount, SeenLine
from rollout_assets.audit.line_sessions import LineSessions
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult
from rollout_assets.audit.usage import CLAUDE_COST_FIELDS, COST_FIELDS, NO_SUM, Sum, sum_problem, worker_spend
from rollout_assets.audit.wording import gap_kind

ROLES = ("supervisor", "worker", "proposer", "agent")
# Proposer gaps that say the shot has no transcript: nothing was read, so nothing counted.
_WITHOUT_TRANSCRIPT = ("no_claude_transcript", "claude_transcripts_unreadable")
_CLAUDE_TOKENS = ("tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write")

# What each field is held against: {field: (its sum, a phrase naming what was read)}, or a
# sentence saying why the line's usage cannot be recounted.
Expected = dict[str, tuple[Sum, str]] | str


def _none(fields: tuple[str, ...], source: str) -> dict[str, tuple[Sum, str]]:
    return {field: (NO_SUM, source) for field in fields}


_SUPERVISOR = _none(_CLAUDE_TOKENS, "a supervisor's brain.jsonl (per-request stats only)")
_NO_SESSION = _none(COST_FIELDS, "a worker line without an opencode session")
_NO_TRANSCRIPT = _none(_CLAUDE_TOKENS, "a shot without a transcript")
_AT = {field: n for n, field in enumerate(COST_FIELDS)}  # a field's place in SeenLine.cost


class _UsageProofs:
    """The expected cost fields of each line, from the recounts' files read beside the ledger:
    a worker's from its session's counts (by line), a proposer's or sub-agent's from its
    expected line (by id: a few per worktree, so the expected lines are not walked)."""

    def __init__(self, inputs: InputsRecount, ledger: LedgerRecount, sessions: LineSessions):
        self.inputs, self.ledger, self.sessions = inputs, ledger, sessions
        self.rows = sessions.by_line()

    def walk(self) -> Iterator[tuple[SeenLine, Expected]]:
        """Every valid line, in ledger order, with what its cost fields must be."""
        expected = self.inputs.expected
        assert expected is not None
        for seen in self.ledger.sequence.stream():
            # As a dict of the expected lines by id would give it: the last of a doubled id.
            line = expected.last_with_key(seen.rollout_id) if seen.role in ("proposer", "agent") else None
            yield seen, self.expected(seen, line)

    def expected(self, seen: SeenLine, line: ExpectedLine | None) -> Expected:
        if seen.role == "supervisor":
            return _SUPERVISOR
        if seen.role == "worker":
            return self.worker(self.rows.get(seen.lineno))
        if seen.role == "proposer":
            return self.proposer(seen, line)
        if seen.role == "agent":
            return self.agent(line)
        return f"role {seen.role!r} has no usage the audit can recount"

    def worker(self, row: tuple[Any, ...] | None) -> Expected:
        """The session's row and messages (docs/input-formats.md §4); nothing without a session."""
        if row is None:
            return _NO_SESSION
        session = row[4]
        if not self.sessions.readable:
            return f"opencode session {session}: the audit cannot read the opencode store, so it proves nothing"
        if self.sessions.uncounted is not None:
            return f"opencode session {session}: the audit cannot count its rows ({self.sessions.uncounted})"
        rows, present, columns, sums = row[1], row[5], row[6:12], row[12:]
        if not present:
            return f"opencode session {session}: the store's session table holds no row of it"
        messages = tuple((sums[2 * n], sums[2 * n + 1], rows) for n in range(len(COST_FIELDS)))
        spend, from_messages = worker_spend(tuple(columns), messages)
        source = (
            f"the assistant messages of opencode session {session}, summed,"
            if from_messages
            else f"the session row of opencode session {session}"
        )
        return {field: (total, source) for field, total in zip(COST_FIELDS, spend, strict=True)}

    def proposer(self, seen: SeenLine, line: ExpectedLine | None) -> Expected:
        if seen.gap is not None and gap_kind(seen.gap) in _WITHOUT_TRANSCRIPT:
            return _NO_TRANSCRIPT
        if line is None or line.parts[0] != "proposer":
            return "no shot receipt of the inputs has this rollout_id"
        if isinstance(line.usage, str):
            return f"its usage cannot be recounted: {line.usage}"
        transcript, sums = line.usage
        if transcript is None:
            return _none(_CLAUDE_TOKENS, "the audit's one-to-one join, which gives the shot no transcript,")
        return _claude(sums, f"the main chain of {transcript}")

    def agent(self, line: ExpectedLine | None) -> Expected:
        if line is None or line.parts[0] != "agent":
            return "no sub-agent conversation of the inputs has this rollout_id"
        transcript, sums = line.usage
        expected = _claude(sums, f"sub-agent conversation {line.parts[3]} of {transcript}")
        expected["usd"] = (NO_SUM, "a sub-agent conversation (the receipt's cost is its proposer line's)")
        return expected


def _claude(sums: tuple[Sum, ...], thread: str) -> dict[str, tuple[Sum, str]]:
    """A Claude thread's token fields: its four sums, and no reasoning tokens."""
    source = f"the final usage of each API message of {thread}, summed,"
    expected = {field: (total, source) for field, total in zip(CLAUDE_COST_FIELDS, sums, strict=True)}
    expected["tokens_reasoning"] = (NO_SUM, "a Claude transcript")
    return expected


def _problem(seen: SeenLine, expected: Expected) -> str | None:
    """What is wrong with the line's cost fields, every field at fault; None when they hold."""
    if isinstance(expected, str):
        return expected
    cost = seen.cost
    found = [sum_problem(field, total, cost[_AT[field]], source) for field, (total, source) in expected.items()]
    wrong = [problem for problem in found if problem is not None]
    return "; ".join(wrong) if wrong else None


def usage_verdict(
    inputs: InputsRecount, ledger: LedgerRecount, sessions: LineSessions | None = None
) -> AuditResult:
    """Every valid line's token counts (and a worker's spend) equal the audit's own sums of its
    records: a proposer's and each sub-agent's over its transcript file, a worker's over its
    session's rows (`sessions`, the grouped count the gap proofs read, made here when not
    given). A failure names the line (file:line and rollout_id), the field, what the line holds
    and what the records give."""
    if inputs.expected is None or inputs.claude_projects is None:
        raise ValueError("the inputs were recounted without the opencode store or the Claude projects folder")
    counted = sessions if sessions is not None else LineSessions(inputs, ledger)
    lines: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    problems: list[str] = []
    try:
        for seen, expected in _UsageProofs(inputs, ledger, counted).walk():
            lines[seen.role] += 1
            problem = _problem(seen, expected)
            if problem is not None:
                wrong[seen.role] += 1
                if len(problems) < SAMPLE_SIZE:
                    problems.append(f"{ledger.path}:{seen.lineno}: rollout_id {seen.rollout_id}: {problem}")
    finally:
        if sessions is None:
            counted.close()
    judged, failed = sum(lines.values()), sum(wrong.values())
    return AuditResult(
        passed=failed == 0,
        expected=judged,
        seen=judged - failed,
        missing=failed,
        sample=problems,
        details={
            **{f"{role}_lines": lines[role] for role in ROLES},
            **{f"wrong_usage_{role}": wrong[role] for role in ROLES},
        },
    )
