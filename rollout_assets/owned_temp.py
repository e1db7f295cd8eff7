"""Temporary folders that the next one removes when the process that made them was killed.

The round's snapshot of the opencode store and the audit's own copy of it are each the size of
the store (5.5 GB for the x8 bench round). A process removes its own when it is done or exits;
one killed by SIGKILL, the kernel's out-of-memory killer or a lost machine cannot, and its copy
would stay in the temporary folder for good. So each such folder holds a lock file its maker
keeps locked (`flock`) for as long as the folder is in use, and making a folder of a kind
first removes the folders of that kind whose lock nobody holds: the kernel drops a lock when
the last descriptor of its holder closes, however the process ended, and it works across
process namespaces, where a process id would not.

Only the folders of this user are looked at, only after they have not changed for a minute
(the moment between a folder's creation and its lock being taken is not mistaken for an
abandoned folder), and a folder is removed while its lock is held, so no one takes it over
meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time

LOCK_NAME = ".owner.lock"
# A folder younger than this is never taken for abandoned: its maker may not hold its lock yet.
ABANDONED_AFTER_S = 60.0


class OwnedFolder:
    """A new private folder in the temporary folder, locked by this process until `remove`
    (forked children share the lock: it is theirs too while they run)."""

    def __init__(self, prefix: str):
        remove_abandoned(prefix)
        self.path = tempfile.mkdtemp(prefix=prefix)
        try:
            self._lock: int | None = os.open(
                os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def remove(self) -> None:
        """Remove the folder, then let go of its lock (nothing left to take over)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def remove_abandoned(prefix: str) -> list[str]:
    """Remove the folders named `prefix*` in the temporary folder that this user made, that
    have not changed for ABANDONED_AFTER_S and whose lock no process holds; returns their paths."""
    removed: list[str] = []
    folder = tempfile.gettempdir()
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.startswith(prefix)]
    except OSError:
        return removed
    for entry in entries:
        with contextlib.suppress(OSError):
            if _abandoned_removed(entry.path):
                removed.append(entry.path)
    return removed


def _abandoned_removed(path: str) -> bool:
    status = os.lstat(path)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
        return False
    if time.time() - status.st_mtime < ABANDONED_AFTER_S:
        return False
    try:
        lock = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # not a folder of this module's (or made before it locked folders)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its maker, or a child of it, still runs
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(lock)
