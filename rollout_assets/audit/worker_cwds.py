"""The round's worker cwds and the opencode sessions of each, as the audit recounts them, in a
SQLite file of a temporary folder rather than a set and a dict: at 96,000 cells the 192,000
cwds and their sessions held about 70 MiB of Python objects, and the run's process kept much of
it after they were freed.

The cwds are added as the cells are read, cell after cell (`add`); `read_sessions` then joins
them to the session table of the audit's copy of the store in SQL, so no session row becomes a
Python object until a reader walks the cells again beside their sessions (`listed_sessions`, one
query in the cells' order) or asks for the sessions of one cwd (`sessions_of`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

from rollout_assets.audit.spill import scratch_connection

_BATCH = 2_000

# `name`: the cwd as result.json gave it (UTF-8, a lone surrogate kept as its surrogate escape);
# `text`: the same as TEXT for the join, NULL for a cwd with a lone surrogate, which has no
# UTF-8 form and so equals no directory of the store. `listing`: every cwd as the cells list it,
# in order (a cwd two cells list, twice). A session's `n` keeps the store's order.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cwd (name BLOB PRIMARY KEY, text TEXT) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS cwd_text ON cwd (text);
CREATE TABLE IF NOT EXISTS listing (n INTEGER PRIMARY KEY, cwd BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS session (n INTEGER PRIMARY KEY, cwd BLOB NOT NULL, id TEXT NOT NULL);
"""


def _name(cwd: str) -> bytes:
    return cwd.encode("utf-8", "surrogatepass")


def _text(cwd: str) -> str | None:
    try:
        cwd.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return cwd


def _decoded(value: bytes) -> str:
    # As the join decodes a session id (docs/input-formats.md §4).
    return value.decode("utf-8", "replace")


class WorkerCwds:
    """A set of worker cwds, each with the ids of its sessions in the store (oldest first) once
    `read_sessions` has run; on disk, removed when dropped."""

    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="rollout-audit-cwds-")
        self.path = Path(self._folder, "cwds.sqlite")
        self._pending: list[tuple[bytes, str | None]] = []  # the cwds added since the last write
        # The file is made at the first full batch or the first query: a small round's cwds are
        # counted without touching the disk unless the store is read.
        self._connection: sqlite3.Connection | None = None
        self._opened: list[sqlite3.Connection] = []  # closed with the folder's removal
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _close, self._opened, self._folder, self._pid)

    @classmethod
    def of(cls, cwds: Iterable[str]) -> WorkerCwds:
        made = cls()
        made.add(cwds)
        return made

    def _connect(self) -> sqlite3.Connection:
        connection = scratch_connection(self.path, check_same_thread=False)
        connection.execute("PRAGMA cache_size=-1024")
        connection.text_factory = bytes
        return connection

    def _ready(self) -> sqlite3.Connection:
        """The connection, with what is pending written; a forked process opens its own (an
        SQLite connection must not cross a fork)."""
        if os.getpid() != self._pid:
            self._connection, self._pid, self._pending = None, os.getpid(), []
        if self._connection is None:
            self._connection = self._connect()
            self._opened.append(self._connection)
            self._connection.executescript(_SCHEMA)
        if self._pending:
            self._connection.execute("BEGIN")
            self._connection.executemany("INSERT OR IGNORE INTO cwd (name, text) VALUES (?, ?)", self._pending)
            self._connection.executemany("INSERT INTO listing (cwd) VALUES (?)", (row[:1] for row in self._pending))
            self._connection.execute("COMMIT")
            self._pending.clear()
        return self._connection

    def add(self, cwds: Iterable[str]) -> None:
        """The cwds the next cell lists, in its order."""
        for cwd in cwds:
            self._pending.append((_name(cwd), _text(cwd)))
        if len(self._pending) >= _BATCH:
            self._ready()

    def __len__(self) -> int:
        if self._connection is None:
            return len(self._unwritten())
        return self._ready().execute("SELECT count(*) FROM cwd").fetchone()[0]

    def __iter__(self) -> Iterator[str]:
        """Each cwd once (in no particular order)."""
        if self._connection is None:
            yield from self._unwritten()
            return
        for (name,) in self._ready().execute("SELECT name FROM cwd"):
            yield name.decode("utf-8", "surrogatepass")

    def _unwritten(self) -> list[str]:
        """The distinct cwds, while none is on disk yet."""
        return [name.decode("utf-8", "surrogatepass") for name in dict.fromkeys(row[0] for row in self._pending)]

    def read_sessions(self, store: sqlite3.Connection, *, by_time: bool) -> None:
        """Join the cwds to the `session` table of `store` (the audit's own copy), oldest first
        (`by_time`: by `time_created`, then id; otherwise by id): a session belongs to a cwd when
        its TEXT `directory` has the cwd's UTF-8 bytes. The store is scanned once; the cwds are
        found through their index."""
        order = "session.time_created, session.id" if by_time else "session.id"
        self._ready()
        store.execute("ATTACH DATABASE ? AS cwds", (str(self.path),))
        try:
            store.execute("DELETE FROM cwds.session")
            # Rows inserted from an ordered SELECT take their rowids in that order.
            store.execute(
                "INSERT INTO cwds.session (cwd, id) SELECT cwd.name, session.id"
                " FROM main.session AS session JOIN cwds.cwd AS cwd ON cwd.text = session.directory"
                " WHERE typeof(session.id) = 'text' AND typeof(session.directory) = 'text'"
                f" ORDER BY {order}"
            )
            store.commit()
        finally:
            store.execute("DETACH DATABASE cwds")
        self._connection.execute("CREATE INDEX IF NOT EXISTS session_cwd ON session (cwd, n)")

    def listed_sessions(self) -> Iterator[list[str]]:
        """The sessions of each cwd in the order `add` was given them (a cwd two cells list,
        twice), oldest first: one query, each cwd's sessions found through their index."""
        rows = self._ready().execute(
            "SELECT listing.n, session.id FROM listing LEFT JOIN session ON session.cwd = listing.cwd"
            " ORDER BY listing.n, session.n"
        )
        for _, group in itertools.groupby(rows, key=lambda row: row[0]):
            yield [_decoded(session) for _, session in group if session is not None]

    def sessions_of(self, cwd: str) -> list[str]:
        """The ids of the sessions of `cwd`, oldest first (none before `read_sessions`)."""
        rows = self._ready().execute("SELECT id FROM session WHERE cwd = ? ORDER BY n", (_name(cwd),))
        return [_decoded(session) for (session,) in rows]

    def sessions(self) -> dict[str, list[str]]:
        """Every cwd with a session, and its sessions: for a small store (tests, one-off reads)."""
        found: dict[str, list[str]] = {}
        for name, session in self._ready().execute("SELECT cwd, id FROM session ORDER BY n"):
            found.setdefault(name.decode("utf-8", "surrogatepass"), []).append(_decoded(session))
        return found

    def close(self) -> None:
        self._finalizer()


def _close(connections: list[sqlite3.Connection], folder: str, owner: int) -> None:
    for connection in connections:
        connection.close()
    if os.getpid() == owner:  # never from a forked process, while its parent reads the file
        shutil.rmtree(folder, ignore_errors=True)
