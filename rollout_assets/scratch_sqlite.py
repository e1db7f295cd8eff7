"""A SQLite file a process writes and then reads back itself, in a temporary folder: the
audit's spilled rows (audit/spill.py, audit/worker_cwds.py) and the training export's line
keys (training/keys.py) keep per-line state there rather than in memory."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path


def scratch_connection(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection to a temporary file written by one process and then read back: no journal
    to keep, nothing to sync."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    connection.execute("PRAGMA journal_mode=OFF")
    connection.execute("PRAGMA synchronous=OFF")
    return connection


def close_scratch(connection: sqlite3.Connection, folder: str | Path | None) -> None:
    """Close the connection, then remove its temporary folder (None: the file is not ours)."""
    connection.close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
