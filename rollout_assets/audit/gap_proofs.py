"""The gap check's verdict (`gaps_warranted_verdict`): every gap line's reason holds in the
inputs, established by the audit's own reading of them, and every proposer line joined to a
transcript names a file of its worktree that qualifies for its shot.

The other checks prove that each invocation has its line, with the gap the inputs allow; they
cannot tell a true gap from a transcript the join lost ("no readable message parts" is allowed
for any session, "no transcript matched" for any shot with transcript files). Here each claim
is held against what it says is (not) there:

    supervisor brain transcript not persisted   a supervisor line: brain.jsonl is stats only
    ...; result.json missing / lists no cwds    the audit's own reading of the cell's result.json
    opencode store unavailable [(<cause>)]      the audit cannot read the store either, and not
                                                only because it was busy; with a cause, the store
                                                is there (a file) and the audit cannot read it
    no opencode session found for worker cwd    the store the audit reads has no session of it
    opencode session S has no readable ...      one grouped count of S's message and part rows
    no claude transcript matched worktree W     no file of W's project folders qualifies
    claude transcript T matched ... no ...      T qualifies and holds no conversation message
    claude transcripts of W cannot be read      the audit cannot read that folder or file either
    (a joined proposer line)                    its transcript qualifies (shot_proofs.py)
    (a joined worker line)                      it holds as many messages as its session's
                                                rows make, by the audit's own count
                                                (session_counts.py)

A claim about an invocation the inputs do not name is judged as the line states it. The
sessions said to be empty and those of the joined worker lines are counted in one grouped count.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from rollout_assets.audit.inputs import InputsRecount
from rollout_assets.audit.ledger import LedgerRecount, SeenLine
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult
from rollout_assets.audit.shot_proofs import ShotProofs
from rollout_assets.audit.stores import session_rows
from rollout_assets.audit.wording import (
    SUPERVISOR_GAP,
    SUPERVISOR_GAP_LIST_MISSING,
    empty_session_gap,
    gap_kind,
    no_session_gap,
    store_unavailable_cause,
)

# The role whose lines may carry each kind of gap.
_ROLE_OF_KIND = {
    "supervisor_transcript_not_persisted": "supervisor",
    "supervisor_worker_list_missing": "supervisor",
    "opencode_store_unavailable": "worker",
    "no_opencode_session": "worker",
    "opencode_session_empty": "worker",
    "no_claude_transcript": "proposer",
    "claude_transcript_empty": "proposer",
    "claude_transcripts_unreadable": "proposer",
}
JOINED = "joined_proposer"  # not a gap: a proposer line holding its transcript
JOINED_WORKER = "joined_worker"  # not a gap: a worker line holding its session's messages


class _Claims:
    """The claims of one ledger held against the inputs."""

    def __init__(self, inputs: InputsRecount, ledger: LedgerRecount):
        assert inputs.expected is not None and inputs.out_dir is not None
        self.inputs = inputs
        self.expected = {line.rollout_id: line for line in inputs.expected}
        self.subjects = {lineno: (cwd, ref) for lineno, cwd, ref in ledger.claim_subjects}
        self.held = {lineno: count for lineno, _, _, count in ledger.worker_message_counts}
        self.subjects.update((lineno, (cwd, ref)) for lineno, cwd, ref, _ in ledger.worker_message_counts)
        self.shots = ShotProofs(inputs.out_dir)
        self.rows: dict[str, tuple[int, int, int]] | str = {}

    def worker(self, seen: SeenLine) -> tuple[Any, Any]:
        """(cwd, session) of a worker line: its invocation's when the inputs name it, else as
        the line states them (the session "-" when it names none)."""
        line = self.expected.get(seen.rollout_id)
        if line is not None and line.parts[0] == "worker":
            return line.parts[1], line.parts[2]
        cwd, ref = self.subjects.get(seen.lineno, (None, None))
        session = (
            ref.removeprefix("opencode:") if isinstance(ref, str) and ref.startswith("opencode:") else "-"
        )
        return cwd, session

    def count_claimed_sessions(self, claims: list[tuple[SeenLine, str]]) -> None:
        """The rows of every session a line says is empty, and the messages the rows of every
        joined worker line's session make, in one grouped count."""
        claimed = {
            self.worker(seen)[1] for seen, kind in claims if kind in ("opencode_session_empty", JOINED_WORKER)
        }
        claimed.discard("-")
        if claimed and self.inputs.store.readable:
            self.rows = session_rows(self.inputs.store, claimed)

    def problem(self, seen: SeenLine, kind: str) -> str | None:
        """What the inputs hold against the line's claim; None when they warrant it."""
        if kind == JOINED_WORKER:
            return self.joined_worker_problem(seen)
        if kind == JOINED:
            shot = self.inputs.shots.get(seen.rollout_id)
            if shot is None:
                return "no shot receipt of the inputs has this rollout_id"
            return self.shots.joined_problem(shot, self.subjects.get(seen.lineno, (None, None))[1])
        role = _ROLE_OF_KIND.get(kind)
        if role is None:
            return f"gap {seen.gap!r} is no reason of the line format: no input can warrant it"
        if seen.role != role:
            return f"a {seen.role} line cannot carry a {role}'s gap {seen.gap!r}"
        if role == "supervisor":
            return self.supervisor_problem(seen)
        if role == "worker":
            return self.worker_problem(seen, kind)
        shot = self.inputs.shots.get(seen.rollout_id)
        if shot is None:
            return "no shot receipt of the inputs has this rollout_id"
        assert seen.gap is not None
        if kind == "no_claude_transcript":
            return self.shots.no_transcript_problem(shot, seen.gap)
        if kind == "claude_transcript_empty":
            return self.shots.empty_transcript_problem(shot, seen.gap)
        return self.shots.unreadable_problem(shot, seen.gap)

    def supervisor_problem(self, seen: SeenLine) -> str | None:
        """docs/input-formats.md §1: brain.jsonl carries per-request stats, no message content,
        so every supervisor's transcript is not persisted. A suffix saying the cell's workers
        cannot be listed must be the one the audit's own reading of its result.json gives."""
        if seen.gap == SUPERVISOR_GAP:
            return None
        line = self.expected.get(seen.rollout_id)
        if line is None or line.parts[0] != "supervisor":
            return "no cell of the inputs has this rollout_id: its result.json cannot be looked at"
        if seen.gap == line.gap:
            return None
        run_dir, listed = self.inputs.supervisor_cells[seen.rollout_id]
        if run_dir is None:
            return f"{line.what}: the cell records no runDir, so it has no result.json to miss"
        result_json = f"{run_dir}/result.json"
        if line.gap == SUPERVISOR_GAP:
            lists = f"lists {listed} worker cwd(s)" if listed else "reports no spawned worker"
            return f"{line.what}: the audit reads {result_json}, which {lists}"
        if line.gap == SUPERVISOR_GAP_LIST_MISSING:
            return f"{line.what}: the audit cannot read {result_json}: it is missing, not listing no cwd"
        return f"{line.what}: the audit reads {result_json}, which reports spawned workers but lists no cwd"

    def worker_problem(self, seen: SeenLine, kind: str) -> str | None:
        """The store as the audit read it for the inputs' recount (`read_store`); the rows of a
        session said to be empty by one grouped count (`count_claimed_sessions`)."""
        cwd, session = self.worker(seen)
        store, db = self.inputs.store, self.inputs.opencode_db
        sessions = store.sessions.get(cwd, []) if isinstance(cwd, str) else []
        if kind == "opencode_store_unavailable":
            named, cause = store_unavailable_cause(seen.gap, str(cwd))
            if not named:
                return f"the gap does not name the line's worker cwd {cwd}"
            if store.readable:
                held = f"{len(sessions)} session(s)" if sessions else "no session"
                return f"worker cwd {cwd}: the audit reads the opencode store {db}, which holds {held} of it"
            if store.busy:
                return f"the opencode store {db} is there but was busy ({store.why}): a busy store is no unavailable one"
            if cause is not None and not (db is not None and os.path.isfile(db)):
                # A cause says the store is there but cannot be read: the audit found no file.
                return f"the gap says the store is there but cannot be read ({cause}); the audit finds no file at {db}"
            return None
        if not store.readable:
            return f"worker cwd {cwd}: the audit cannot read the opencode store {db} ({store.why}), so it proves nothing of it"
        if kind == "no_opencode_session":
            if seen.gap != no_session_gap(str(cwd)):
                return f"the gap does not name the line's worker cwd {cwd}"
            if sessions:
                return f"worker cwd {cwd}: the opencode store holds its session(s) {', '.join(sessions[:3])}"
            return None
        if seen.gap != empty_session_gap(str(session)):
            return f"the gap does not name the line's opencode session {session}"
        if session not in sessions:
            return f"opencode session {session}: the store holds no such session of worker cwd {cwd}"
        if isinstance(self.rows, str):
            return f"opencode session {session}: the audit cannot count its rows ({self.rows})"
        messages, parts, _ = self.rows.get(session, (0, 0, 0))
        if messages and parts:
            return (
                f"opencode session {session}: the store holds {messages} message row(s) of it,"
                f" with {parts} part row(s) that make a message"
            )
        return None


    def joined_worker_problem(self, seen: SeenLine) -> str | None:
        """A worker line holding messages holds as many as its session's rows make."""
        cwd, session = self.worker(seen)
        store, db = self.inputs.store, self.inputs.opencode_db
        if not store.readable:
            return f"worker cwd {cwd}: the audit cannot read the opencode store {db} ({store.why}), so it proves nothing of it"
        if isinstance(self.rows, str):
            return f"opencode session {session}: the audit cannot count its rows ({self.rows})"
        held = self.held.get(seen.lineno, 0)
        made = self.rows.get(session, (0, 0, 0))[2]
        if held != made:
            return f"opencode session {session}: the line holds {held} message(s), the store's rows make {made}"
        return None


def _claims(ledger: LedgerRecount) -> list[tuple[SeenLine, str]]:
    """Every line with a gap (by the kind of its gap), every proposer line with a transcript and
    every worker line with messages."""
    claims = []
    for seen in ledger.sequence:
        if seen.gap is not None:
            claims.append((seen, gap_kind(seen.gap)))
        elif seen.role == "proposer" and seen.has_messages:
            claims.append((seen, JOINED))
        elif seen.role == "worker" and seen.has_messages:
            claims.append((seen, JOINED_WORKER))
    return claims


def gaps_warranted_verdict(inputs: InputsRecount, ledger: LedgerRecount) -> AuditResult:
    """Every gap line's reason holds in the inputs, every joined proposer line's transcript
    qualifies for its shot, and every joined worker line holds as many messages as its
    session's rows make; a failure names the line (file:line and rollout_id), the session or
    transcript, and what the inputs hold instead. Reads beyond the shared recounts only what
    the claims name: the rows of the sessions said to be empty or joined (one grouped count), the
    receipts and transcript files of the proposer lines."""
    if inputs.expected is None or inputs.claude_projects is None:
        raise ValueError("the inputs were recounted without the opencode store or the Claude projects folder")
    checker = _Claims(inputs, ledger)
    claims = _claims(ledger)
    checker.count_claimed_sessions(claims)
    unwarranted: Counter[str] = Counter()
    problems = []
    for seen, kind in claims:
        problem = checker.problem(seen, kind)
        if problem is not None:
            unwarranted[kind] += 1
            if len(problems) < SAMPLE_SIZE:
                problems.append(f"{ledger.path}:{seen.lineno}: rollout_id {seen.rollout_id}: {problem}")
    kinds = Counter(kind for _, kind in claims)
    return AuditResult(
        passed=not unwarranted,
        expected=len(claims),
        seen=len(claims) - sum(unwarranted.values()),
        missing=sum(unwarranted.values()),
        sample=problems,
        details={
            "gap_lines": len(claims) - kinds[JOINED] - kinds[JOINED_WORKER],
            "joined_proposer_lines": kinds[JOINED],
            "joined_worker_lines": kinds[JOINED_WORKER],
            **{
                f"unwarranted_{kind}": unwarranted[kind]
                for kind in (*_ROLE_OF_KIND, "other", JOINED, JOINED_WORKER)
            },
        },
    )
