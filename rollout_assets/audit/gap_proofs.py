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
sessions of the worker lines are counted in one grouped count (line_sessions.py), which the
usage proofs read too.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

from rollout_assets.audit.inputs import ExpectedLine, InputsRecount
from rollout_assets.audit.inputs_match import ExpectedLookup
from rollout_assets.audit.ledger import LedgerRecount, SeenLine
from rollout_assets.audit.line_sessions import ByLine, LineSessions, worker_invocation
from rollout_assets.audit.result import SAMPLE_SIZE, AuditResult
from rollout_assets.audit.shot_proofs import ShotProofs
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


class _Claim(NamedTuple):
    """One line's claim, with what the recounts hold of its line."""

    seen: SeenLine
    kind: str  # the kind of its gap, JOINED or JOINED_WORKER
    line: ExpectedLine | None  # what the inputs say of its invocation, when they name it
    subject: tuple[Any, Any]  # (cwd, transcript_ref) as the line states them
    held: int  # the messages a joined worker line holds


def _kind(seen: SeenLine) -> str | None:
    """The claim a line makes: the kind of its gap, a joined proposer or worker line, or none."""
    if seen.gap is not None:
        return gap_kind(seen.gap)
    if seen.role == "proposer" and seen.has_messages:
        return JOINED
    if seen.role == "worker" and seen.has_messages:
        return JOINED_WORKER
    return None


class _Claims:
    """The claims of one ledger held against the inputs. Nothing per line is kept: each walk
    reads the ledger's lines, the expected lines and the lines' subjects from the recounts'
    files side by side (a ledger out of order looks its expected lines up by id)."""

    def __init__(self, inputs: InputsRecount, ledger: LedgerRecount, sessions: LineSessions):
        assert inputs.expected is not None and inputs.out_dir is not None
        self.inputs, self.ledger, self.expected = inputs, ledger, inputs.expected
        self.shots = ShotProofs(inputs.out_dir)
        self.uncounted = sessions.uncounted  # why the sessions' rows could not be counted
        self.counts = sessions.by_line()  # each worker line's session counts, in line order

    def walk(self) -> Iterator[_Claim]:
        """Every line with a gap, every proposer line with a transcript and every worker line
        with messages, in ledger order."""
        lookup = ExpectedLookup(self.expected)
        wanted_lines = self.expected.stream()
        subjects = ByLine(self.ledger.claim_subjects.stream())
        counts = ByLine(self.ledger.worker_message_counts.stream())
        for seen in self.ledger.sequence.stream():
            wanted = next(wanted_lines, None)
            kind = _kind(seen)
            if kind is None:
                continue
            counted = counts.get(seen.lineno)
            stated = subjects.get(seen.lineno)
            if counted is not None:
                subject, held = (counted[1], counted[2]), counted[3]
            else:
                subject, held = ((stated[1], stated[2]) if stated is not None else (None, None)), 0
            yield _Claim(seen, kind, lookup.get(seen, wanted), subject, held)

    @staticmethod
    def worker(claim: _Claim) -> tuple[Any, Any]:
        """(cwd, session) of a worker line: its invocation's when the inputs name it, else as
        the line states them (the session "-" when it names none)."""
        return worker_invocation(claim.line, claim.subject)

    def session_counts(self, claim: _Claim) -> tuple[int, int, int]:
        """(message rows, part rows that make a message, chat messages) of the line's session;
        the lines are asked in ledger order."""
        found = self.counts.get(claim.seen.lineno)
        return (0, 0, 0) if found is None else found[1:4]

    def problem(self, claim: _Claim) -> str | None:
        """What the inputs hold against the line's claim; None when they warrant it."""
        seen, kind = claim.seen, claim.kind
        if kind == JOINED_WORKER:
            return self.joined_worker_problem(claim)
        if kind == JOINED:
            shot = self.inputs.shots.get(seen.rollout_id)
            if shot is None:
                return "no shot receipt of the inputs has this rollout_id"
            return self.shots.joined_problem(shot, claim.subject[1])
        role = _ROLE_OF_KIND.get(kind)
        if role is None:
            return f"gap {seen.gap!r} is no reason of the line format: no input can warrant it"
        if seen.role != role:
            return f"a {seen.role} line cannot carry a {role}'s gap {seen.gap!r}"
        if role == "supervisor":
            return self.supervisor_problem(claim)
        if role == "worker":
            return self.worker_problem(claim)
        shot = self.inputs.shots.get(seen.rollout_id)
        if shot is None:
            return "no shot receipt of the inputs has this rollout_id"
        assert seen.gap is not None
        if kind == "no_claude_transcript":
            return self.shots.no_transcript_problem(shot, seen.gap)
        if kind == "claude_transcript_empty":
            return self.shots.empty_transcript_problem(shot, seen.gap)
        return self.shots.unreadable_problem(shot, seen.gap)

    def supervisor_problem(self, claim: _Claim) -> str | None:
        """docs/input-formats.md §1: brain.jsonl carries per-request stats, no message content,
        so every supervisor's transcript is not persisted. A suffix saying the cell's workers
        cannot be listed must be the one the audit's own reading of its result.json gives."""
        seen, line = claim.seen, claim.line
        if seen.gap == SUPERVISOR_GAP:
            return None
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

    def worker_problem(self, claim: _Claim) -> str | None:
        """The store as the audit read it for the inputs' recount (`read_store`); the rows of a
        session said to be empty by one grouped count (line_sessions.py)."""
        seen, kind = claim.seen, claim.kind
        cwd, session = self.worker(claim)
        store, db = self.inputs.store, self.inputs.opencode_db
        sessions = self.inputs.sessions_of(cwd) if isinstance(cwd, str) else []
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
        if self.uncounted is not None:
            return f"opencode session {session}: the audit cannot count its rows ({self.uncounted})"
        messages, parts, _ = self.session_counts(claim)
        if messages and parts:
            return (
                f"opencode session {session}: the store holds {messages} message row(s) of it,"
                f" with {parts} part row(s) that make a message"
            )
        return None

    def joined_worker_problem(self, claim: _Claim) -> str | None:
        """A worker line holding messages holds as many as its session's rows make."""
        cwd, session = self.worker(claim)
        store, db = self.inputs.store, self.inputs.opencode_db
        if not store.readable:
            return f"worker cwd {cwd}: the audit cannot read the opencode store {db} ({store.why}), so it proves nothing of it"
        if self.uncounted is not None:
            return f"opencode session {session}: the audit cannot count its rows ({self.uncounted})"
        held = claim.held
        made = self.session_counts(claim)[2]
        if held != made:
            return (
                f"opencode session {session}: the line holds {held} message(s), the store's rows make {made}"
            )
        return None


def gaps_warranted_verdict(
    inputs: InputsRecount, ledger: LedgerRecount, sessions: LineSessions | None = None
) -> AuditResult:
    """Every gap line's reason holds in the inputs, every joined proposer line's transcript
    qualifies for its shot, and every joined worker line holds as many messages as its
    session's rows make; a failure names the line (file:line and rollout_id), the session or
    transcript, and what the inputs hold instead. Reads beyond the shared recounts only what
    the claims name: the rows of the worker lines' sessions (`sessions`, one grouped count, made
    here when not given), the receipts and transcript files of the proposer lines."""
    if inputs.expected is None or inputs.claude_projects is None:
        raise ValueError("the inputs were recounted without the opencode store or the Claude projects folder")
    counted = sessions if sessions is not None else LineSessions(inputs, ledger)
    checker = _Claims(inputs, ledger, counted)
    kinds: Counter[str] = Counter()
    unwarranted: Counter[str] = Counter()
    problems = []
    try:
        for claim in checker.walk():
            kinds[claim.kind] += 1
            problem = checker.problem(claim)
            if problem is not None:
                unwarranted[claim.kind] += 1
                if len(problems) < SAMPLE_SIZE:
                    problems.append(
                        f"{ledger.path}:{claim.seen.lineno}: rollout_id {claim.seen.rollout_id}: {problem}"
                    )
    finally:
        if sessions is None:
            counted.close()
    claims = sum(kinds.values())
    return AuditResult(
        passed=not unwarranted,
        expected=claims,
        seen=claims - sum(unwarranted.values()),
        missing=sum(unwarranted.values()),
        sample=problems,
        details={
            "gap_lines": claims - kinds[JOINED] - kinds[JOINED_WORKER],
            "joined_proposer_lines": kinds[JOINED],
            "joined_worker_lines": kinds[JOINED_WORKER],
            **{
                f"unwarranted_{kind}": unwarranted[kind]
                for kind in (*_ROLE_OF_KIND, "other", JOINED, JOINED_WORKER)
            },
        },
    )
