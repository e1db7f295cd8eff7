"""The opencode store, read by the audit's own SQL (docs/input-formats.md §4): whether it is
readable and, when not, why, and the sessions of each worker cwd; the copy it reads is kept for
the gap proofs' grouped count of the claimed sessions' rows (store_counts.py).

The audit reads its own private copy of the store, never the store itself: an SQLite open of
a WAL store, even read-only, creates `-shm`/`-wal` beside it (inputs are never written) or
fails in a folder the audit may not write. The copy (`StoreCopy`) is the database file with
its `-wal` and `-journal`, copied under SQLite's own shared lock on the database file (so a
writer in rollback-journal mode cannot change it meanwhile) and copied again when any of them
changed during the copy; SQLite then replays the WAL or rolls back the hot journal in the
copy, which gives the last committed state. The copy is removed when its reading is dropped.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
import struct
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rollout_assets.audit.worker_cwds import WorkerCwds
from rollout_assets.file_copy import CopyTargetError, copy_range
from rollout_assets.owned_temp import OwnedFolder


# How long the copy waits for a writer's lock, or for the files to stop changing, before the
# store counts as busy.
_BUSY_TIMEOUT_S = 5.0
_RETRY_S = 0.02
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_LOCKED = "database is locked"

# SQLite's unix locks (os_unix.c): byte ranges of the database file. A reader holds a read
# lock on the shared range; a writer about to write the file holds the pending byte, and
# while writing it a write lock on the shared range.
_PENDING_BYTE = 0x40000000
_SHARED_FIRST = _PENDING_BYTE + 2
_SHARED_SIZE = 510
# Open-file-description locks conflict with SQLite's POSIX locks even in this process, and
# closing this descriptor drops no lock an SQLite connection of this process holds.
_SETLK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
_SIBLINGS = ("-wal", "-journal")
# The audit's copies' folders in the temporary folder: `COPY_PREFIX` and a random suffix.
COPY_PREFIX = "rollout-audit-store-"


class _Busy(Exception):
    """A writer kept the store locked, or kept changing it, for longer than the copy waits."""


class _CannotCopy(Exception):
    """The store cannot be copied; the message says why, naming the file."""


@dataclass
class StoreReading:
    """What the audit could read of the store: the sessions of each cwd, or why it could not."""

    readable: bool
    why: str | None = None  # why it is not readable
    busy: bool = False  # not readable only because another process held it locked or kept writing
    # The private copy read, kept for the gap proofs' counts; no part of what was read.
    copy: StoreCopy | None = field(default=None, compare=False, repr=False)
    # The cwds looked up, with the sessions the store holds of each (on disk); None when the
    # store was not read.
    cwds: WorkerCwds | None = field(default=None, compare=False, repr=False)

    def sessions_of(self, cwd: str) -> list[str]:
        """The ids of the sessions of `cwd` the store holds, oldest first."""
        return self.cwds.sessions_of(cwd) if self.readable and self.cwds is not None else []


class StoreCopy:
    """A private copy of the store in a temporary folder, removed when dropped (or at exit)."""

    def __init__(self, opencode_db: Path):
        # Locked while in use: the next copy removes it if this process is killed (owned_temp.py).
        owned = OwnedFolder(COPY_PREFIX)
        self.folder = owned.path
        self._cleanup = weakref.finalize(self, owned.remove)
        self.path = Path(self.folder) / "opencode.db"
        try:
            _copy_store(os.fsdecode(opencode_db), os.fsdecode(self.path))
        except BaseException:
            self.remove()
            raise

    def connect(self) -> sqlite3.Connection:
        """The copy, as bytes; writable, so SQLite may replay its WAL or roll back its journal."""
        return connect_copy(self.path)

    def remove(self) -> None:
        self._cleanup()


def _state(path: str) -> tuple[int, int, int, int] | None:
    """What tells a changed file: None when it is not there."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _CannotCopy(f"{path}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        # A FIFO there would block the copy, and SQLite's open, for ever.
        raise _CannotCopy(f"{path} is there but is no regular file")
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _lock(descriptor: int, kind: int, start: int, length: int) -> bool:
    try:
        fcntl.fcntl(descriptor, _SETLK, struct.pack("hhqqi4x", kind, os.SEEK_SET, start, length, 0))
    except OSError as error:
        if error.errno in (11, 13):  # EAGAIN, EACCES: another process holds a conflicting lock
            return False
        raise
    return True


def _shared_lock(descriptor: int) -> bool:
    """SQLite's SHARED lock, taken as SQLite takes it (through the pending byte)."""
    if not _lock(descriptor, fcntl.F_RDLCK, _PENDING_BYTE, 1):
        return False
    try:
        return _lock(descriptor, fcntl.F_RDLCK, _SHARED_FIRST, _SHARED_SIZE)
    finally:
        _lock(descriptor, fcntl.F_UNLCK, _PENDING_BYTE, 1)


def _copy_file(source: str, target: str) -> None:
    try:
        descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # a journal or WAL gone since it was looked at: the next state check sees it
    except OSError as error:
        raise _CannotCopy(f"{source}: {error.strerror or error}") from None
    try:
        try:
            writing = open(target, "wb")
        except OSError as error:  # the audit's folder, not the store
            raise _CannotCopy(f"{target}: {error.strerror or error}") from None
        with writing:
            copy_range(descriptor, writing.fileno())
    except CopyTargetError as error:  # the audit's folder, not the store
        raise _CannotCopy(f"{target}: {error.strerror or error}") from None
    except OSError as error:
        raise _CannotCopy(f"{source}: {error.strerror or error}") from None
    finally:
        os.close(descriptor)


def _copy_store(store: str, copy: str) -> None:
    """The database file and its -wal / -journal, as one state: copied again while a writer's
    lock keeps the shared lock out or any file changed during the copy, up to the bound."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    why = _LOCKED
    while True:
        try:
            descriptor = os.open(store, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as error:
            raise _CannotCopy(f"{store}: {error.strerror or error}") from None
        try:
            if _state(store) is None:
                raise _CannotCopy(f"{store}: no such file")
            if _shared_lock(descriptor):
                names = (store, *(store + suffix for suffix in _SIBLINGS))
                before = [_state(name) for name in names]
                for name, suffix in zip(names, ("", *_SIBLINGS)):
                    if before[names.index(name)] is not None:
                        _copy_file(name, copy + suffix)
                if [_state(name) for name in names] == before:
                    return
                why = "a writer kept changing it while the audit copied it"
                for suffix in _SIBLINGS:
                    if os.path.lexists(copy + suffix):
                        os.unlink(copy + suffix)
            else:
                why = _LOCKED
        finally:
            os.close(descriptor)  # drops the shared lock (an open-file-description lock)
        if time.monotonic() >= deadline:
            raise _Busy(why)
        time.sleep(_RETRY_S)


def opencode_sessions(opencode_db: Path, directories: set[str]) -> tuple[bool, dict[str, list[str]]]:
    """(store readable, the session ids of each of `directories` that has one, oldest first),
    as `read_store` reads them: for a few directories."""
    cwds = WorkerCwds.of(directories)
    reading = read_store(opencode_db, cwds)
    return reading.readable, cwds.sessions() if reading.readable else {}


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def read_store(opencode_db: Path, directories: WorkerCwds) -> StoreReading:
    """The store by this module's own SQL, on the audit's private copy of it. Readable as
    docs/input-formats.md §4 has it: the file opens as a database with a `session` table (`id`,
    `directory`), a `message` and a `part` table, and its first read, the whole session table,
    succeeds. Not readable, it says why, and whether only a writer that kept the store locked
    or kept changing it kept the audit out (a busy store is not an unavailable one).

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
        copy = StoreCopy(opencode_db)
    except _Busy as why:
        return StoreReading(False, why=str(why), busy=True)
    except _CannotCopy as why:
        return StoreReading(False, why=f"cannot copy it: {why}")
    except OSError as error:  # the private folder
        return StoreReading(False, why=f"cannot copy it: {error}")
    try:
        connection = copy.connect()
    except sqlite3.Error as error:
        copy.remove()
        return StoreReading(False, why=str(error), busy=_is_busy(error))
    try:
        columns = {
            row[1].decode("utf-8", "replace") for row in connection.execute("PRAGMA table_info(session)")
        }
        if not {"id", "directory"} <= columns:
            copy.remove()
            return StoreReading(False, why="no session table with an id and a directory column")
        connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
        connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
        # One pass over the table: `directory` has no index, so a query per batch of directories
        # would scan it once per batch, a cost growing with the square of the round.
        directories.read_sessions(connection, by_time="time_created" in columns)
        return StoreReading(True, copy=copy, cwds=directories)
    except sqlite3.Error as error:
        copy.remove()
        return StoreReading(False, why=str(error), busy=_is_busy(error))
    finally:
        connection.close()


def connect_copy(path: Any) -> sqlite3.Connection:
    connection = sqlite3.connect(f"file:{quote(os.fsencode(path))}", uri=True, timeout=_BUSY_TIMEOUT_S)
    connection.text_factory = bytes
    return connection
