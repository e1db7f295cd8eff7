"""A folder of outputs replaced whole: built beside its place, swapped in under a lock.

The training files of an export and the files of a release belong together (rows, accounting,
report; data files, manifest, card). Each is written into a fresh folder beside the target,
`.<name>.build-<8 hex digits>`, and only a complete build replaces the target: the earlier
folder is renamed aside (`.<name>.old-<8 hex digits>`), the new one renamed in, the old one
removed. A failure or Ctrl-C before that leaves the earlier folder as it was, never new files
beside old ones. Two runs on one target never overlap: each holds the writers' lock of the
target (`.<name>.lock` beside it) from start to swap, and a second one fails at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.ledger.io import write_lock
from rollout_assets.paths import is_inside

_SHOWN = 3  # names of foreign entries a refusal lists

# Signals that would end the process between the two renames of a swap (leaving no folder at
# the target): held back until the swap is done, then delivered.
_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass(frozen=True)
class OutputFolder:
    """What a refusal to replace a folder says: what is written into it (`the training files`),
    what to choose instead (`OUT_DIR`), what its foreign files are not (`no export writes`) and
    which earlier folder may be replaced (`one an earlier export wrote`)."""

    outputs: str
    another: str
    foreign: str
    earlier: str
    refused: type[Exception]


def refuse_unless_replaceable(folder: Path, ledger: Path, kind: OutputFolder, is_own: Callable[[str], bool]) -> None:
    """`kind.refused` unless `folder` may be replaced by the outputs of `ledger`: the ledger is
    not inside it (symlinks followed), and it is missing, or a folder holding only names
    `is_own` accepts."""
    if is_inside(ledger, folder):
        raise kind.refused(
            f"refusing to write {kind.outputs} into {folder}: it holds the ledger {ledger} they are read from, "
            f"and the folder is replaced whole; choose another {kind.another}"
        )
    if not os.path.lexists(folder):
        return
    if not os.path.isdir(folder):
        raise kind.refused(f"refusing to replace {folder}: it is not a folder; choose another {kind.another}")
    foreign = sorted(name for name in os.listdir(folder) if not is_own(name))
    if foreign:
        shown = ", ".join(foreign[:_SHOWN]) + (f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else "")
        raise kind.refused(
            f"refusing to replace {folder}: it holds files {kind.foreign} ({shown}), and the folder is replaced "
            f"whole; give a new or empty folder, or {kind.earlier}"
        )


def _leftover_names(target: Path) -> re.Pattern[str]:
    """The build and old folders of `target`, and of no other target (`.<name>.1.build-…` is not
    one of `<name>`'s)."""
    return re.compile(re.escape(f".{target.name}.") + r"(?:build|old)-[0-9a-f]{8}")


def _remove_leftovers(target: Path) -> None:
    """Build and old folders a killed run of `target` left (only called under its lock)."""
    own = _leftover_names(target)
    for name in os.listdir(target.parent):
        if own.fullmatch(name):
            shutil.rmtree(target.parent / name, ignore_errors=True)


@contextlib.contextmanager
def built_in_place(target: Path, refuse: Callable[[Path], None]) -> Iterator[Path]:
    """Yield a fresh, empty folder beside `target`; once the block ends without an error, the
    folder replaces `target` whole. `refuse(target)` raises when whatever is at `target` may not
    be replaced; it is asked before the build and again just before the swap."""
    refuse(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with write_lock(target):
        _remove_leftovers(target)
        built = target.with_name(f".{target.name}.build-{secrets.token_hex(4)}")
        built.mkdir()
        try:
            yield built
            refuse(target)
            _swap_in(built, target)
        except BaseException:
            shutil.rmtree(built, ignore_errors=True)
            raise


def _swap_in(built: Path, target: Path) -> None:
    """Put `built` at `target`, removing what was there, with the interrupting signals held."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        old = None
        if os.path.lexists(target):
            old = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
            os.rename(target, old)
        try:
            os.rename(built, target)
        except BaseException:
            if old is not None:
                os.rename(old, target)
            raise
        _sync_folder(target.parent)
        if old is not None:
            shutil.rmtree(old)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _sync_folder(folder: Path) -> None:
    """The renames are durable only once the folder's entries are on disk."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
