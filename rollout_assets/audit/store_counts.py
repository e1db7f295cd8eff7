"""The gap proofs' one grouped count of the store's rows (`ClaimedSessions`): the sessions the
ledger's lines make claims about, and what their message and part rows make, kept in a SQLite
file of a temporary folder rather than in memory, since both grow with the round.

The claiming lines and their sessions are written there first; each process of the count
(session_counts.py) reads the claimed ids from that file, attached to its connection to the
audit's copy of the store, and writes its tallies, a few thousand sessions at a time, to a file
of its own; the parent then adds the files up, and copies the spend columns of the claimed
sessions' rows of the session table beside them. The lines' counts are read back in line
order, by one join.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rollout_assets.audit.session_counts import (
    MADE,
    NARROW,
    ROWS,
    SPEND,
    SPENT,
    SYSTEM,
    Sessions,
    Span,
    Tally,
    session_counts,
)
from rollout_assets.audit.spill import close_scratch, scratch_connection
from rollout_assets.audit.stores import StoreReading, connect_copy

# The ids without a declared type (no affinity): they compare with the store's session ids as
# the values are, TEXT with TEXT only, as a bound parameter would.
_CLAIMED = "CREATE TABLE IF NOT EXISTS claimed (session_id PRIMARY KEY) WITHOUT ROWID"
# The ledger lines that claim something of a session, by line number.
_LINES = "CREATE TABLE IF NOT EXISTS lines (lineno INTEGER PRIMARY KEY, session_id)"
# Each spend field of the messages: its sum (NULL: no message records it) and its absolute sum.
_SPEND_SUMS = [column for name in SPEND for column in (f"{name}_sum", f"{name}_abs")]
_COUNTED = (
    "CREATE TABLE IF NOT EXISTS counted (session_id PRIMARY KEY, rows INTEGER, system INTEGER,"
    f" narrow INTEGER, made INTEGER, {', '.join(_SPEND_SUMS)}) WITHOUT ROWID"
)
# A session's tallies from several flushes or processes add up (session_counts.py).
_ADD_UP = (
    " ON CONFLICT (session_id) DO UPDATE SET rows = rows + excluded.rows,"
    " system = max(system, excluded.system), narrow = narrow + excluded.narrow, made = made + excluded.made, "
    + ", ".join(
        f"{name}_sum = coalesce({name}_sum + excluded.{name}_sum, {name}_sum, excluded.{name}_sum),"
        f" {name}_abs = {name}_abs + excluded.{name}_abs"
        for name in SPEND
    )
)
# The session row's spend columns (docs/input-formats.md §4), as the join reads them: a column
# the store lacks, or a value that is no number, is NULL (Infinity is left to the reader).
_SESSION_SPEND = (
    "cost", "tokens_input", "tokens_output", "tokens_reasoning", "tokens_cache_read", "tokens_cache_write"
)
_SPEND_ROWS = f"CREATE TABLE IF NOT EXISTS spend (session_id PRIMARY KEY, {', '.join(SPEND)}) WITHOUT ROWID"
# The claimed sessions whose row records no spend (no row, or every column null or 0): only
# theirs is summed from their messages (session_counts.py).
_UNMEASURED = "CREATE TABLE IF NOT EXISTS unmeasured (session_id PRIMARY KEY) WITHOUT ROWID"
_DOUBLE_MAX = "1.7976931348623157e308"

# Below this many sessions a second process costs more than it saves.
_PARALLEL_MIN_SESSIONS = 2_000


def _uri(path: Path, mode: str) -> str:
    return f"file:{quote(os.fsencode(path))}?mode={mode}"


class _TallyFile:
    """One process's tallies, added up on disk as `session_counts` flushes them."""

    def __init__(self, path: Path):
        self.connection = scratch_connection(path)
        self.connection.execute(_COUNTED)

    def add(self, tallies: dict[Any, Tally]) -> None:
        self.connection.execute("BEGIN")
        self.connection.executemany(
            f"INSERT INTO counted VALUES (?, ?, ?, ?, ?{', ?' * len(_SPEND_SUMS)})" + _ADD_UP,
            # The keys are the ids' UTF-8 (the copy's text_factory), the claimed TEXT they equal.
            (
                (
                    key.decode("utf-8"),
                    t[ROWS],
                    int(t[SYSTEM]),
                    t[NARROW],
                    t[MADE],
                    *(_sqlite_number(value) for value in t[SPENT:]),
                )
                for key, t in tallies.items()
            ),
        )
        self.connection.execute("COMMIT")


def _sqlite_number(value: Any) -> Any:
    """A sum as SQLite holds it: an integer beyond 64 bits as a double (its adding does the same)."""
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)
    return value


def _count_part(copy_path: Path, claims: Path, out: Path, span: Span, sessions: Sessions) -> None:
    """session_counts over one process's work, on connections of its own (in a forked worker too)."""
    connection = connect_copy(copy_path)
    tallies = _TallyFile(out)
    try:
        connection.execute("ATTACH DATABASE ? AS claims", (_uri(claims, "ro"),))
        session_counts(connection, tallies.add, span, sessions)
    finally:
        connection.close()
        tallies.connection.close()


class ClaimedSessions:
    """The sessions claimed by ledger lines (`claim_lines`), then counted in the copy of the
    store (`count`), then read back (`by_line`, `items`). The folder is removed when this is
    dropped."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rollout-audit-counts-"))
        self.path = self.folder / "claims.sqlite"
        self._connection = scratch_connection(self.path)
        self._connection.execute(_CLAIMED)
        self._connection.execute(_COUNTED)
        self._connection.execute(_LINES)
        self._connection.execute(_SPEND_ROWS)
        self._connection.execute(_UNMEASURED)
        self._finalizer = weakref.finalize(self, close_scratch, self._connection, self.folder)

    def claim_lines(self, lines: Iterable[tuple[int, str]]) -> None:
        """Add the sessions of ledger lines, (line number, session id), for `by_line`."""
        self._connection.execute("BEGIN")
        self._connection.executemany(
            "INSERT INTO lines VALUES (?, ?)", ((n, s) for n, s in lines if _encodable(s))
        )
        self._connection.execute("INSERT OR IGNORE INTO claimed SELECT session_id FROM lines")
        self._connection.execute("COMMIT")

    def __len__(self) -> int:
        return self._connection.execute("SELECT count(*) FROM claimed").fetchone()[0]

    def count(self, reading: StoreReading) -> str | None:
        """Count the claimed sessions' rows in the copy `read_store` read, whatever their number;
        None, or a string saying why the copy cannot be read."""
        if len(self) == 0:
            return None
        if reading.copy is None:
            return reading.why or "the audit kept no copy of the store"
        try:
            self._copy_spend(reading.copy.path)
            self._count(reading.copy.path)
        except sqlite3.Error as error:
            return str(error)
        return None

    def _copy_spend(self, copy_path: Path) -> None:
        """The spend columns of the claimed sessions' rows of the session table, found by its
        primary key, each a finite number or NULL; then the sessions whose row records none."""
        self._connection.execute("ATTACH DATABASE ? AS store", (os.fsdecode(copy_path),))
        try:
            present = {row[1] for row in self._connection.execute("PRAGMA store.table_info(session)")}
            values = ", ".join(
                f"CASE WHEN typeof({name}) IN ('integer', 'real') AND abs({name}) <= {_DOUBLE_MAX}"
                f" THEN {name} END"
                if name in present
                else "NULL"
                for name in _SESSION_SPEND
            )
            self._connection.execute(
                f"INSERT OR IGNORE INTO spend SELECT id, {values} FROM store.session"
                " WHERE id IN (SELECT session_id FROM claimed)"
            )
            measured = " OR ".join(f"{name} != 0" for name in SPEND)
            self._connection.execute(
                "INSERT INTO unmeasured SELECT session_id FROM claimed"
                f" EXCEPT SELECT session_id FROM spend WHERE {measured}"
            )
        finally:
            self._connection.execute("DETACH DATABASE store")

    def _count(self, copy_path: Path) -> None:
        """The work spread over the cores (the parts give the same tallies as one pass:
        sessions, and messages, are counted apart), each part's tallies in a file of its own."""
        work = self._work(copy_path)
        outs = [self.folder / f"part-{n}.sqlite" for n in range(len(work))]
        if len(work) == 1:
            _count_part(copy_path, self.path, outs[0], *work[0])
        else:
            # Forked workers share the parent's pages instead of copying them as the collector walks.
            gc.freeze()
            try:
                with ProcessPoolExecutor(
                    max_workers=len(work) - 1, mp_context=multiprocessing.get_context("fork")
                ) as pool:
                    later = [
                        pool.submit(_count_part, copy_path, self.path, out, *part)
                        for out, part in zip(outs[1:], work[1:])
                    ]
                    _count_part(copy_path, self.path, outs[0], *work[0])
                    for future in later:
                        future.result()
            finally:
                gc.unfreeze()
        for out in outs:
            self._add_file(out)

    def _work(self, copy_path: Path) -> list[tuple[Span, Sessions]]:
        """Each process's (span, run of claimed sessions): runs of the claimed sessions, found
        by the session index, when they are a small share of the store; otherwise all of them,
        each process reading its own run of message ids (session_counts.py, the two plans)."""
        claimed = len(self)
        workers = len(os.sched_getaffinity(0))
        if workers <= 1 or claimed < _PARALLEL_MIN_SESSIONS:
            workers = 1
        connection = connect_copy(copy_path)
        try:
            (stored,) = connection.execute("SELECT count(*) FROM session").fetchone()
            if claimed * 2 < stored:
                nth = "SELECT session_id FROM claimed ORDER BY session_id LIMIT 1 OFFSET ?"
                bounds = [
                    None,
                    *(
                        self._connection.execute(nth, (claimed * n // workers,)).fetchone()[0]
                        for n in range(1, workers)
                    ),
                    None,
                ]
                return [(None, (first, after)) for first, after in zip(bounds, bounds[1:])]
            (ids,) = connection.execute("SELECT count(id) FROM message").fetchone()
        finally:
            connection.close()
        spans = [None, *(ids * n // workers for n in range(1, workers)), None]
        return [((lower, upper), (None, None)) for lower, upper in zip(spans, spans[1:])]

    def _add_file(self, out: Path) -> None:
        self._connection.execute("ATTACH DATABASE ? AS part", (os.fsdecode(out),))
        try:
            self._connection.execute("INSERT INTO counted SELECT * FROM part.counted WHERE true" + _ADD_UP)
        finally:
            self._connection.execute("DETACH DATABASE part")
        out.unlink()

    def by_line(self) -> Iterator[tuple[Any, ...]]:
        """Of every line of `claim_lines`, in line order (one query, not one a line): its line
        number, its session's counts as `items` gives them, then its session's id and spend:
        whether the session table holds the session (0 or 1), the row's spend columns (SPEND
        order; NULL for a column the store lacks), and the sums of its messages' spend and of
        their absolute values (in pairs, SPEND order)."""
        columns = ", ".join(f"spend.{name}" for name in SPEND)
        sums = ", ".join(f"{name}_sum, coalesce({name}_abs, 0)" for name in SPEND)
        return self._connection.execute(
            "SELECT lineno, coalesce(rows, 0), coalesce(narrow, 0),"
            " coalesce(made + (made > 0 AND system), 0),"
            f" lines.session_id, spend.session_id IS NOT NULL, {columns}, {sums}"
            " FROM lines LEFT JOIN counted ON counted.session_id = lines.session_id"
            " LEFT JOIN spend ON spend.session_id = lines.session_id ORDER BY lineno"
        )

    def items(self) -> dict[str, tuple[int, int, int]]:
        """Every counted session's counts."""
        return {
            key: (rows, narrow, made)
            for key, rows, narrow, made in self._connection.execute(
                "SELECT session_id, rows, narrow, made + (made > 0 AND system)"
                " FROM counted ORDER BY session_id"
            )
        }

    def close(self) -> None:
        self._finalizer()


def _encodable(session_id: str) -> bool:
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
