"""The opencode store, read by the audit's own SQL (docs/input-formats.md §4): whether it is
readable and, when not, why; the sessions of each worker cwd; and, for the sessions a ledger
says hold nothing readable, one grouped count of their message and part rows."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

# How long a read waits for a writer's lock before the store counts as busy.
_BUSY_TIMEOUT_S = 5.0
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


@dataclass
class StoreReading:
    """What the audit could read of the store: its sessions by cwd, or why it could not."""

    readable: bool
    sessions: dict[str, list[str]] = field(default_factory=dict)  # cwd -> its session ids, oldest first
    why: str | None = None  # why it is not readable
    busy: bool = False  # not readable only because another connection held it locked


def opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, dict[str, list[str]]]:
    """(store readable, the session ids of each of `directories`, oldest first): `read_store`."""
    reading = read_store(opencode_db, directories)
    return reading.readable, reading.sessions


def _connect(opencode_db: Path) -> sqlite3.Connection:
    """Read-only, as bytes. Refused before SQLite opens a journal, WAL or shared-memory file
    beside the store that is no regular file: a FIFO there would block the open for ever."""
    for suffix in ("-journal", "-wal", "-shm"):
        sibling = f"{os.fsdecode(opencode_db)}{suffix}"
        if os.path.lexists(sibling) and not os.path.isfile(sibling):
            raise sqlite3.OperationalError(f"{sibling} is there but is no regular file")
    # Bytes: a path holding a byte that is not UTF-8 (surrogate-escaped) reaches SQLite as is.
    uri = f"file:{quote(os.fsencode(opencode_db.resolve()))}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    connection.text_factory = bytes
    return connection


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def read_store(opencode_db: Path, directories: set[str]) -> StoreReading:
    """The store by this module's own SQL. Readable as docs/input-formats.md §4 has it: the file
    opens as a database with a `session` table (`id`, `directory`), a `message` and a `part`
    table, and its first read, the whole session table, succeeds. Not readable, it says why,
    and whether only a lock held by another connection kept it out (a busy store is not an
    unavailable one).

    A session belongs to a cwd when its `directory` equals the cwd as SQLite compares the
    join's bound text: TEXT whose bytes are the cwd's UTF-8 bytes. Stored bytes that are not
    UTF-8 equal no cwd, even one whose replacement characters they would decode to; a cwd with
    a lone surrogate (an escape in result.json) has no UTF-8 form and equals no directory; a
    BLOB directory or id is no TEXT. The ids are decoded as the join decodes them.
    """
    if not opencode_db.is_file():
        return StoreReading(False, why=f"{opencode_db} is no file")
    if not directories:
        return StoreReading(True)
    try:
        connection = _connect(opencode_db)
    except sqlite3.Error as error:
        return StoreReading(False, why=str(error), busy=_is_busy(error))
    try:
        columns = {
            row[1].decode("utf-8", "replace") for row in connection.execute("PRAGMA table_info(session)")
        }
        if not {"id", "directory"} <= columns:
            return StoreReading(False, why="no session table with an id and a directory column")
        connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
        return StoreReading(True, _sessions_by_directory(connection, columns, directories))
    except sqlite3.Error as error:
        return StoreReading(False, why=str(error), busy=_is_busy(error))
    finally:
        connection.close()


def _sessions_by_directory(
    connection: sqlite3.Connection, columns: set[str], directories: set[str]
) -> dict[str, list[str]]:
    # One pass over the table: `directory` has no index, so a query per batch of directories
    # would scan it once per batch, a cost growing with the square of the round.
    order = "time_created, id" if "time_created" in columns else "id"
    wanted = {}
    for directory in directories:
        try:
            wanted[directory.encode("utf-8")] = directory
        except UnicodeEncodeError:
            continue
    sessions: dict[str, list[str]] = {}
    for session_id, directory in connection.execute(
        f"SELECT id, directory FROM session WHERE typeof(id) = 'text' AND typeof(directory) = 'text' ORDER BY {order}"
    ):
        cwd = wanted.get(directory)
        if cwd is not None:
            sessions.setdefault(cwd, []).append(session_id.decode("utf-8", "replace"))
    return sessions


# A message row makes a chat message (docs/input-formats.md §4) only when its data is a JSON
# object whose role is user or assistant; a part row only when its data is a JSON object that
# carries something: a non-empty text (not marked ignored), or in an assistant message a
# non-empty reasoning text or a tool call with a call id. A narrow rule on purpose: a part it
# counts makes a message under any reading of the docs, so a session it finds such a part in
# cannot be one "with no readable message parts".
_MESSAGE = "CAST(m.data AS TEXT)"
_PART = "CAST(p.data AS TEXT)"
_ROLE = f"json_extract({_MESSAGE}, '$.role')"
_NON_EMPTY_TEXT = f"json_type({_PART}, '$.text') = 'text' AND json_extract({_PART}, '$.text') <> ''"
_COUNT_QUERY = f"""
SELECT m.session_id, count(DISTINCT m.id), count(DISTINCT CASE WHEN
    json_valid({_MESSAGE}) AND json_type({_MESSAGE}) = 'object' AND {_ROLE} IN ('user', 'assistant')
    AND json_valid({_PART}) AND json_type({_PART}) = 'object' AND (
        (json_extract({_PART}, '$.type') = 'text' AND {_NON_EMPTY_TEXT}
            AND json_type({_PART}, '$.ignored') IS NOT 'true')
        OR ({_ROLE} = 'assistant' AND json_extract({_PART}, '$.type') = 'reasoning' AND {_NON_EMPTY_TEXT})
        OR ({_ROLE} = 'assistant' AND json_extract({_PART}, '$.type') = 'tool'
            AND json_type({_PART}, '$.callID') = 'text')
    ) THEN p.id END)
FROM message AS m LEFT JOIN part AS p ON p.message_id = m.id
WHERE m.session_id IN (SELECT value FROM json_each(?))
GROUP BY m.session_id
"""


def session_rows(opencode_db: Path, session_ids: set[str]) -> dict[str, tuple[int, int]] | str:
    """For each of `session_ids` that has message rows: (its message rows, its part rows that make
    a message); by one grouped query, whatever the number of sessions. A string saying why
    when the store cannot be read."""
    # A lone surrogate has no UTF-8 form: no stored id equals it.
    wanted = []
    for session_id in sorted(session_ids):
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:
            continue
        wanted.append(session_id)
    if not wanted:
        return {}
    try:
        connection = _connect(opencode_db)
    except sqlite3.Error as error:
        return str(error)
    try:
        rows = connection.execute(_COUNT_QUERY, (json.dumps(wanted, ensure_ascii=False),)).fetchall()
    except sqlite3.Error as error:
        return str(error)
    finally:
        connection.close()
    return {
        session_id.decode("utf-8", "replace"): (messages, parts)
        for session_id, messages, parts in rows
        if isinstance(session_id, bytes)
    }
