"""Code run as an unprivileged user. Root searches and lists any folder, so a test of a folder
the process may not enter runs the code under test as `nobody`, in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Pasted into a child's script after its imports (the interpreter may live under a folder
# only root can read): from here on the child is `nobody` when it started as root.
DROP_TO_NOBODY = textwrap.dedent(
    """
    import os as _os, pwd as _pwd, sys as _sys
    if _os.geteuid() == 0:
        _nobody = _pwd.getpwnam("nobody")
        try:
            _os.setgroups([])
            _os.setgid(_nobody.pw_gid)
            _os.setuid(_nobody.pw_uid)
        except PermissionError:
            _sys.exit(77)
    """
)
_CANNOT_DROP = 77


def run_unprivileged(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `script` (which pastes DROP_TO_NOBODY after its imports) in a child process."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    if result.returncode == _CANNOT_DROP:
        pytest.fail(
            "could not drop root privileges to `nobody` (no CAP_SETUID?): a closed folder cannot be tested"
        )
    return result
