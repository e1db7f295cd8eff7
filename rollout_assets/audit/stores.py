"""The opencode store, read by the audit's own SQL: whether it is readable, and the sessions of
each worker cwd (docs/input-formats.md §4). No message or part is read here."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote


def opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, dict[str, list[str]]]:
    """(store readable, the session ids of each of `directories`, oldest first), by this
    module's own SQL. Readable as docs/input-formats.md §4 has it: the file opens as a database
    with a `session` table (`id`, `directory`), a `message` and a `part` table, and its first
    read, the whole session table, succeeds.

    A session belongs to a cwd when its `directory` equals the cwd as SQLite compares the
    join's bound text: TEXT whose bytes are the cwd's UTF-8 bytes. Stored bytes that are not
    UTF-8 equal no cwd, even one whose replacement characters they would decode to; a cwd with
    a lone surrogate (an escape in result.json) has no UTF-8 form and equals no directory; a
    BLOB directory or id is no TEXT. The ids are decoded as the join decodes them.
    """
    if not opencode_db.is_file() or not directories:
        return opencode_db.is_file(), {}
    try:
        # Bytes: a path holding a byte that is not UTF-8 (surrogate-escaped) reaches SQLite as is.
        uri = f"file:{quote(os.fsencode(opencode_db.resolve()))}?mode=ro"
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error:
        return False, {}
    connection.text_factory = bytes
    try:
        columns = {
            row[1].decode("utf-8", "replace") for row in connection.execute("PRAGMA table_info(session)")
        }
        if not {"id", "directory"} <= columns:
            return False, {}
        connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
        return True, _sessions_by_directory(connection, columns, directories)
    except sqlite3.Error:
        return False, {}
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
