"""How the audit lists the round's folders: a folder that is not there holds nothing, one that
is there but cannot be looked into stops the audit (`UnreadableRound`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class UnreadableRound(RuntimeError):
    """A folder of the round the audit cannot look into: what it holds is unknown, so nothing
    can be proved about it (the round's readers stop on it too)."""


def absent(error: OSError) -> bool:
    """An error that means "nothing there": no such entry, not a folder, or a symlink loop."""
    return isinstance(error, (FileNotFoundError, NotADirectoryError)) or error.errno == errno.ELOOP


def listdir(folder: Path) -> list[str]:
    """The sorted names in `folder`; none when there is no such folder. A folder that exists but
    cannot be listed (permission, I/O) is refused: its cells or receipts would go unseen."""
    try:
        return sorted(os.listdir(folder))
    except OSError as error:
        if absent(error):
            return []
        raise UnreadableRound(f"{folder}: cannot list the folder ({error.strerror or error})") from error
