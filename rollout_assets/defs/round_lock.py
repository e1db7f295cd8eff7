"""One run per round: the lock a run takes on its round's output folder before it writes
anything there, held until the run ends.

The run queue already holds back a second queued run of a round (the per-round limit in
deploy/*/dagster.yaml), but runs launched directly do not pass through it: `dagster asset
materialize`, `rollout-assets materialize`, `materialize()` in a process of its own. The
lock is what every one of them meets. It is an OS lock (`flock`) on `<round>/.run.lock`
under the ledger root: the kernel drops it when its process ends, however it ends, so a
run that crashed never blocks the round. The file names its holder for the refusal's
sentence and is removed again on release.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.errors import RoundError

LOCK_FILE_NAME = ".run.lock"


class RoundBusyError(RoundError, RuntimeError):
    """Another run is materializing the same round right now; this one writes nothing."""

    # Nothing is wrong with the round: the same run started later may pass (see
    # rollout_assets.defs.failures.may_pass).
    may_pass = True


@dataclass(frozen=True)
class RoundLock:
    """A held lock: released by `release_round_lock`, or by the process ending."""

    path: Path
    descriptor: int


def _holder_of(descriptor: int) -> str:
    """Who holds the lock, as its holder wrote it ("run …, process …"); empty when unknown
    (a holder that took the lock an instant ago has not written it yet)."""
    try:
        return os.pread(descriptor, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def acquire_round_lock(folder: Path, round_key: str, holder: str) -> RoundLock:
    """The exclusive lock of the round whose outputs are in `folder`, for `holder` (say
    "run <id>, process <pid>"); RoundBusyError naming the other holder when one has it.

    The file is removed on release. A run that opened it just before that removal would lock
    a file no longer in the folder, so after locking, the descriptor must still be the file at
    the lock path; otherwise try again with the new one.
    """
    path = folder / LOCK_FILE_NAME
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _holder_of(descriptor) or "another run"
            os.close(descriptor)
            raise RoundBusyError(
                f"round {round_key} is being materialized by {other} right now (lock {path}); "
                "this run writes nothing to it"
            ) from None
        try:
            same_file = os.stat(path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, holder.encode("utf-8"), 0)
            return RoundLock(path, descriptor)
        os.close(descriptor)


def release_round_lock(lock: RoundLock) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock.path)
    os.close(lock.descriptor)  # closing the descriptor releases the lock
