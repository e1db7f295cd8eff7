"""The gap proofs' one grouped count of the store's rows (`ClaimedSessions`): the sessions the
ledger's lines make claims about, and what their message and part rows make, kept in a SQLite
file of a temporary folder rather than in memory, since both grow with the round.

The claiming lines and their sessions are written there first; each process of the count
(session_counts.py) reads the claimed ids from that file, attached to its connection to the
audit's copy of the store, and writes its tallies, a few thousand sessions at a time, to a file
of its own; the parent then adds the files up. The lines' counts are read back in line order,
by one join.
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
_COUNTED = (
    "CREATE TABLE IF NOT EXISTS counted"
    " (session_id PRIMARY KEY, rows INTEGER, system INTEGER, narrow INTEGER, made INTEGER) WITHOUT ROWID"
)
# A session's tallies from several flushes or processes add up (session_counts.py).
_ADD_UP = (
    " ON CONFLICT (session_id) DO UPDATE SET rows = rows + excluded.rows,"
    " system = max(system, excluded.system), narrow = narrow + excluded.narrow, made = made + excluded.made"
)

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
            "INSERT INTO counted VALUES (?, ?, ?, ?, ?)" + _ADD_UP,
            # The keys are the ids' UTF-8 (the copy's text_factory), the claimed TEXT they equal.
            (
                (key.decode("utf-8"), t[ROWS], int(t[SYSTEM]), t[NARROW], t[MADE])
                for key, t in tallies.items()
            ),
        )
        self.connection.execute("COMMIT")


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
            self._count(reading.copy.path)
        except sqlite3.Error as error:
            return str(error)
        return None

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

    def by_line(self) -> Iterator[tuple[int, int, int, int]]:
        """(line number, then its session's counts as `get` gives them) of every line of
        `claim_lines`, in line order: one query, not one a line."""
        return self._connection.execute(
            "SELECT lineno, coalesce(rows, 0), coalesce(narrow, 0), coalesce(made + (made > 0 AND system), 0)"
            " FROM lines LEFT JOIN counted USING (session_id) ORDER BY lineno"
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
