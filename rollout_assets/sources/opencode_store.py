"""The live opencode store, read without touching it: one private, consistent snapshot a round.

Owns: copying the store (with what is still only in its WAL) into a private temporary folder
as one consistent state, waiting for a writer's lock within a bound, and saying why a store
cannot be read. Does not own what is read from the snapshot (sources/opencode.py).

Why a copy. opencode keeps its store in WAL mode. A read-only SQLite connection to a WAL
database still creates `-shm`/`-wal` beside it when they are not there (opencode closed
cleanly): in a folder the process may not write the open fails, elsewhere the files are left
behind although inputs are read-only. And a round is read by several processes: reading the
live store, each would see the store as it was when it read it. So the store is copied once
per round and every process reads the copy (immutable: no lock, no file beside it):

- a WAL store whose `-wal` and `-shm` are there, as while opencode runs: through SQLite, one
  read transaction and the backup API, so the copy is one committed state whatever a writer
  does meanwhile;
- otherwise (a rollback-journal store, or a WAL store without its `-wal`/`-shm` or whose index
  this process cannot use): by copying the database file and its `-journal` or `-wal` under
  SQLite's own shared lock on the database file (the byte-range lock every SQLite reader
  takes, which keeps a rollback-journal writer from writing the file), checking that nothing
  changed while copying, and opening the copy, which rolls back a journal a crashed writer
  left or replays the WAL.

A writer that holds the store locked (its write lock in rollback-journal mode, or a connection
in exclusive locking mode) is waited for up to `wait_seconds()`; a store still locked then
fails the round (`OpencodeStoreBusy`), naming the lock and its holder: a busy store is never
a store without sessions.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import multiprocessing
import os
import sqlite3
import stat
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from rollout_assets.errors import RoundError
from rollout_assets.file_copy import CopyTargetError, copy_range
from rollout_assets.owned_temp import LOCK_NAME, OwnedFolder

# How long a locked store is waited for, in seconds (a float); read at every snapshot.
WAIT_ENV = "ROLLOUT_ASSETS_OPENCODE_WAIT_S"
DEFAULT_WAIT_S = 60.0
_RETRY_S = 0.05

# The snapshots' folders in the temporary folder: `SNAPSHOT_PREFIX` and a random suffix.
SNAPSHOT_PREFIX = "rollout-assets-opencode-"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_FORMAT = 2  # header bytes 18-19 (write and read format versions) of a WAL-mode database

# SQLite's unix locking protocol: byte-range locks on the database file itself.
_PENDING_BYTE = 0x40000000
_SHARED_FIRST = _PENDING_BYTE + 2
_SHARED_SIZE = 510
# Open-file-description locks (Linux) conflict with SQLite's POSIX locks like any other, but
# closing this module's descriptor cannot drop a lock SQLite holds in the same process.
_SETLK = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
_GETLK = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)
_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid


class OpencodeStoreError(RoundError, RuntimeError):
    """The opencode store could be read but not turned into one state for the whole round."""


class OpencodeStoreBusy(OpencodeStoreError):
    """Another process kept the store locked longer than the round waits for it."""

    # Not a property of the round: the sensor may try it again (rollout_assets.defs.failures).
    may_pass = True


class StoreUnavailable(Exception):
    """The store cannot be read at all; the message says why (one clause, naming the file)."""


class StoreMissing(StoreUnavailable):
    """There is no store at the path: the plainest reason, which the callers' warnings give."""


@dataclass(frozen=True)
class Snapshot:
    """A private copy of one store, as one committed state, and the process that made it."""

    store: str
    path: Path
    creator: int
    # The folder it is in, locked while in use: the next snapshot removes it if its maker was
    # killed (rollout_assets/owned_temp.py).
    folder: OwnedFolder = field(compare=False, repr=False)


def wait_seconds() -> float:
    raw = os.environ.get(WAIT_ENV, "").strip()
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_WAIT_S
    except ValueError:
        return DEFAULT_WAIT_S


# ---------------------------------------------------------------------------
# One snapshot a round
# ---------------------------------------------------------------------------

_LOCK = threading.Lock()
# The latest snapshot of each store (by absolute path) this process took or was forked with.
_SNAPSHOTS: dict[str, Snapshot] = {}
# Why the latest attempt of this process (or of the process that forked it) to read a store failed.
_LAST_PROBLEM: list[str | None] = [None]


def round_snapshot(store: str | os.PathLike[str]) -> Snapshot:
    """The snapshot this process reads `store` from.

    A worker process forked by the process that took the round's snapshot reads that one, so
    every process of a round reads the same state. Any other call takes a new snapshot (the
    previous one of this process is removed): a new round reads the store as it is now.
    Raises StoreUnavailable, OpencodeStoreBusy or OpencodeStoreError.
    """
    key = os.path.abspath(store)
    with _LOCK:
        latest = _SNAPSHOTS.get(key)
        parent = multiprocessing.parent_process()
        if (
            latest is not None
            and parent is not None
            and latest.creator == parent.pid
            and latest.path.is_file()
        ):
            return latest
        try:
            snapshot = take_snapshot(key)
        except StoreUnavailable as why:
            # A store that is not there needs no reason in every gap line: the command line and
            # the Dagster resource already warn that the file does not exist.
            _LAST_PROBLEM[0] = None if isinstance(why, StoreMissing) else str(why)
            raise
        _LAST_PROBLEM[0] = None
        if latest is not None and latest.creator == os.getpid():
            _remove(latest)  # a connection still reading it keeps its open file
        _SNAPSHOTS[key] = snapshot
        return snapshot


def last_problem() -> str | None:
    """Why the latest store this process (or its parent, before forking it) tried to read
    could not be read; None when it could. The worker lines of a round without a store say so."""
    return _LAST_PROBLEM[0]


def record_problem(problem: str | None) -> None:
    """Set what `last_problem` says (a snapshot that is no opencode store, say)."""
    _LAST_PROBLEM[0] = problem


def _remove(snapshot: Snapshot) -> None:
    snapshot.folder.remove()


def release_snapshot(store: str | os.PathLike[str]) -> None:
    """Remove this process's snapshot of `store` once its round has been read (the join's
    processes are done with it). Left until exit, it kept a file the size of the store in the
    temporary folder for the rest of a Dagster run, with pages not yet written to disk that
    the run's next large copy (the audit's copy of the store) then waited on
    (docs/performance.md); removed, those pages are dropped unwritten. The next
    `round_snapshot` takes a new one."""
    key = os.path.abspath(store)
    with _LOCK:
        snapshot = _SNAPSHOTS.get(key)
        if snapshot is not None and snapshot.creator == os.getpid():
            _remove(snapshot)
            del _SNAPSHOTS[key]


@atexit.register
def remove_snapshots() -> None:
    """Remove the snapshots this process took: at exit (forked workers leave through os._exit
    and never get here), or before a process gives up the user that took them."""
    for key in list(_SNAPSHOTS):
        release_snapshot(key)


# ---------------------------------------------------------------------------
# Taking a snapshot
# ---------------------------------------------------------------------------


class _Busy(Exception):
    """The store is locked now (the message names the lock); worth waiting for."""


def take_snapshot(store: str | os.PathLike[str], *, wait_s: float | None = None) -> Snapshot:
    """Copy `store` into a new private folder as one committed state (see the module)."""
    store = os.path.abspath(store)
    _header(store)  # a store that cannot be read at all is not waited for
    wait_s = wait_seconds() if wait_s is None else wait_s
    owned = _private_folder(store)
    folder = owned.path
    copy = Path(folder) / "opencode.db"
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                _copy(store, _header(store), copy)
                break
            except _Busy as busy:
                _clear(folder)
                if time.monotonic() >= deadline:
                    raise OpencodeStoreBusy(
                        f"{store}: the opencode store is locked by another process ({busy}) and stayed so for "
                        f"{wait_s:g} s (the wait is set by {WAIT_ENV}); run again once it is released"
                    ) from None
                time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
    except BaseException:
        owned.remove()
        raise
    return Snapshot(store=store, path=copy, creator=os.getpid(), folder=owned)


def _private_folder(store: str) -> OwnedFolder:
    try:
        return OwnedFolder(SNAPSHOT_PREFIX)
    except OSError as error:
        raise OpencodeStoreError(
            f"{store}: no temporary folder for a snapshot of the opencode store "
            f"({tempfile.gettempdir()}: {error.strerror or error})"
        ) from error


def _clear(folder: str) -> None:
    """Empty the snapshot's folder for another try (its lock stays)."""
    for name in os.listdir(folder):
        if name != LOCK_NAME:
            os.unlink(os.path.join(folder, name))


def _header(store: str) -> bytes:
    """The store's first 100 bytes, once it is known to be a readable SQLite file with no
    journal, WAL or index beside it that is not a regular file (SQLite would block on a FIFO)."""
    for path in (store, f"{store}-journal", f"{store}-wal", f"{store}-shm"):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            if path == store:
                raise StoreMissing(f"{store}: no such file") from None
            continue
        except OSError as error:
            raise StoreUnavailable(f"{path}: {error.strerror or error}") from None
        if not stat.S_ISREG(mode):
            raise StoreUnavailable(f"{path}: not a regular file")
    try:
        with open(store, "rb") as handle:
            header = handle.read(100)
    except OSError as error:
        raise StoreUnavailable(f"{store}: {error.strerror or error}") from None
    if header and (len(header) < 100 or not header.startswith(_SQLITE_MAGIC)):
        raise StoreUnavailable(f"{store}: not an SQLite database")
    return header


def _copy(store: str, header: bytes, copy: Path) -> None:
    wal_mode = len(header) == 100 and _WAL_FORMAT in (header[18], header[19])
    index_there = os.path.isfile(f"{store}-wal") and os.path.isfile(f"{store}-shm")
    if wal_mode and index_there:
        try:
            _copy_through_sqlite(store, copy)
            return
        except sqlite3.Error as error:
            if _is_busy(error):
                raise _Busy(_lock_holder(store) or _sqlite_reason(error)) from None
            # A WAL index this process cannot use (another user's -shm): copy the files instead.
            _clear(str(copy.parent))
    # A rollback-journal store, or a WAL store without its index: a byte copy under the shared
    # lock, a fifth of the time of the backup API, which rewrites the store page by page
    # (0.26 s against 1.3 s for 738 MB from the page cache).
    _copy_files(store, copy, f"{store}-wal" if wal_mode else f"{store}-journal")


def _copy_through_sqlite(store: str, copy: Path) -> None:
    """One read transaction on the store and SQLite's backup of it: one committed state."""
    uri = sqlite_uri(store, mode="ro")
    # No busy handler: a lock is waited for by take_snapshot, which can say what it waits for.
    source = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
    try:
        source.execute("BEGIN")
        source.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the read lock
        target = _target(store, copy)
        try:
            source.backup(target)
            # The copy of a WAL store says WAL in its header; as a plain file it needs no index.
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
    finally:
        source.close()


def _target(store: str, copy: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(copy, isolation_level=None)
    except sqlite3.Error as error:
        raise OpencodeStoreError(f"{store}: cannot write its snapshot {copy}: {error}") from error


def _copy_files(store: str, copy: Path, sibling: str) -> None:
    """Copy the database file and its `sibling` (the -wal of a WAL store, the -journal of a
    rollback-journal one) under SQLite's shared lock, then open the copy, which replays the WAL
    or rolls back a journal a crashed writer left. Under the shared lock a rollback-journal
    writer cannot write the database file; a WAL writer can still append and checkpoint, so the
    files' state before and after the copy must agree."""
    try:
        descriptor = os.open(store, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise StoreUnavailable(f"{store}: {error.strerror or error}") from None
    try:
        if not _shared_lock(descriptor):
            raise _Busy(_lock_holder(store) or "a write lock on the database file")
        before = _state(descriptor, sibling)
        _copy_bytes(store, descriptor, copy)
        if os.path.lexists(sibling):
            try:
                sibling_descriptor = os.open(sibling, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                pass  # gone since: the state check below sees it
            except OSError as error:
                raise StoreUnavailable(f"{sibling}: {error.strerror or error}") from None
            else:
                try:
                    _copy_bytes(sibling, sibling_descriptor, Path(f"{copy}{sibling[len(store):]}"))
                finally:
                    os.close(sibling_descriptor)
        if _state(descriptor, sibling) != before:
            raise _Busy("a writer kept changing it while it was copied")
    finally:
        os.close(descriptor)  # releases the shared lock
    try:
        connection = sqlite3.connect(copy, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=DELETE")  # replays a WAL into the copy
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # rolls back a journal
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise StoreUnavailable(f"{store}: {_sqlite_reason(error)}") from None


def _copy_bytes(source: str, descriptor: int, target: Path) -> None:
    """The whole file open as `descriptor` (`source`), copied by the kernel into a new `target`."""

    def cannot_write(error: OSError) -> OpencodeStoreError:
        return OpencodeStoreError(f"{source}: cannot write its snapshot {target}: {error.strerror}")

    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise cannot_write(error) from error
    try:
        copy_range(descriptor, out)
    except CopyTargetError as error:
        raise cannot_write(error) from error
    except OSError as error:
        raise StoreUnavailable(f"{source}: {error.strerror or error}") from None
    finally:
        os.close(out)


def _state(descriptor: int, sibling: str) -> tuple[object, ...]:
    """What changes when a writer touches the store: the database file's identity, size and
    modification time, and its -wal's or -journal's (with its header: a WAL's salts change when
    it restarts)."""
    database = os.fstat(descriptor)
    try:
        with open(sibling, "rb") as handle:
            sibling_stat = os.fstat(handle.fileno())
            sibling_state: tuple[object, ...] = (
                sibling_stat.st_ino,
                sibling_stat.st_size,
                sibling_stat.st_mtime_ns,
                handle.read(32),
            )
    except FileNotFoundError:
        sibling_state = ()
    except OSError as error:
        raise StoreUnavailable(f"{sibling}: {error.strerror or error}") from None
    return (database.st_ino, database.st_size, database.st_mtime_ns, sibling_state)


def _shared_lock(descriptor: int) -> bool:
    """Take SQLite's SHARED lock as SQLite does (through its PENDING byte, so a writer waiting
    to commit goes first); False when a writer holds or awaits the store."""
    try:
        _lock(descriptor, fcntl.F_RDLCK, _PENDING_BYTE, 1)
        try:
            _lock(descriptor, fcntl.F_RDLCK, _SHARED_FIRST, _SHARED_SIZE)
        finally:
            _lock(descriptor, fcntl.F_UNLCK, _PENDING_BYTE, 1)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def _lock(descriptor: int, kind: int, start: int, length: int) -> None:
    fcntl.fcntl(descriptor, _SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, start, length, 0))


def _lock_holder(store: str) -> str | None:
    """The write lock another process holds on the store's file, as a clause; None when none is
    held on it now (the store may be busy in its WAL index instead)."""
    try:
        descriptor = os.open(store, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for start, length, name in (
            (_SHARED_FIRST, _SHARED_SIZE, "SQLite's exclusive lock"),
            (_PENDING_BYTE, 1, "SQLite's pending write lock"),
        ):
            query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
            kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(descriptor, _GETLK, query))
            if kind == fcntl.F_WRLCK:
                return f"{name}, held by process {pid}" if pid > 0 else name
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return None


def _is_busy(error: sqlite3.Error) -> bool:
    name = getattr(error, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in str(error)


def _sqlite_reason(error: sqlite3.Error) -> str:
    name = getattr(error, "sqlite_errorname", None)
    return f"{error} ({name})" if name else str(error)


def sqlite_uri(path: str | os.PathLike[str], **parameters: str) -> str:
    """A `file:` URI for `path` (bytes quoted, so a name that is not UTF-8 reaches SQLite as is)."""
    query = "&".join(f"{key}={value}" for key, value in parameters.items())
    return f"file:{quote(os.fsencode(os.path.abspath(path)))}" + (f"?{query}" if query else "")
