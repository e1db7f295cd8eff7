"""The opencode session each worker line of a ledger is about, and the one grouped count of
those sessions' rows (store_counts.py) that two verdicts read in line order: the gap proofs
(the messages a joined session's rows make, the rows of a session said to be empty) and the
usage proofs (the spend its row and its messages record). Counted once per ledger and inputs
(`LineSessions`), however many verdicts read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rollout_assets.audit.inputs import ExpectedLine, InputsRecount
from rollout_assets.audit.inputs_match import ExpectedLookup
from rollout_assets.audit.ledger import LedgerRecount
from rollout_assets.audit.store_counts import ClaimedSessions


class ByLine:
    """Rows whose first field is a line number, in ascending order, looked up by ascending line
    numbers: one walk beside the ledger instead of a dict of every line."""

    def __init__(self, rows: Iterator[tuple[Any, ...]]):
        self._rows = rows
        self._head = next(rows, None)

    def get(self, lineno: int) -> tuple[Any, ...] | None:
        while self._head is not None and self._head[0] < lineno:
            self._head = next(self._rows, None)
        return self._head if self._head is not None and self._head[0] == lineno else None


def worker_invocation(line: ExpectedLine | None, subject: tuple[Any, Any]) -> tuple[Any, Any]:
    """(cwd, session) of a worker line: its invocation's when the inputs name it (`line`), else
    as the line states them (`subject`: its worker_cwd and transcript_ref; the session "-" when
    it names none)."""
    if line is not None and line.parts[0] == "worker":
        return line.parts[1], line.parts[2]
    cwd, ref = subject
    session = ref.removeprefix("opencode:") if isinstance(ref, str) and ref.startswith("opencode:") else "-"
    return cwd, session


class LineSessions:
    """The session of every worker line that names one (by the inputs, else as the line states
    it), with its rows counted in the audit's copy of the store (`by_line`). Its files are
    removed by `close`, or when it is dropped."""

    def __init__(self, inputs: InputsRecount, ledger: LedgerRecount):
        assert inputs.expected is not None
        self.rows = ClaimedSessions()
        self.readable = inputs.store.readable
        self.uncounted: str | None = None  # why the sessions' rows could not be counted
        self.rows.claim_lines(self._claims(inputs, ledger))
        if self.readable:
            self.uncounted = self.rows.count(inputs.store)

    @staticmethod
    def _claims(inputs: InputsRecount, ledger: LedgerRecount) -> Iterator[tuple[int, str]]:
        assert inputs.expected is not None
        lookup = ExpectedLookup(inputs.expected)
        wanted_lines = inputs.expected.stream()
        # A worker line states its cwd and session in one of the two: with messages, or without.
        with_messages = ByLine(ledger.worker_message_counts.stream())
        without = ByLine(ledger.claim_subjects.stream())
        for seen in ledger.sequence.stream():
            wanted = next(wanted_lines, None)
            if seen.role != "worker":
                continue
            stated = with_messages.get(seen.lineno) or without.get(seen.lineno)
            subject = (stated[1], stated[2]) if stated is not None else (None, None)
            _, session = worker_invocation(lookup.get(seen, wanted), subject)
            if session != "-":
                yield seen.lineno, session

    def by_line(self) -> ByLine:
        """Each claiming line's counts and spend (store_counts.py, `by_line`), asked in line order."""
        return ByLine(iter(self.rows.by_line()))

    def close(self) -> None:
        self.rows.close()
