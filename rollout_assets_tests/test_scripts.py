"""scripts/setup.sh on a copy of the project whose .venv already exists (the real interpreter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project_with_venv(tmp_path: Path) -> Path:
    """scripts/setup.sh beside a .venv made with this interpreter (no pyproject: pip would fail
    if the script went as far as installing)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(PROJECT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    return tmp_path


def _setup(project: Path, python: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(project / "scripts" / "setup.sh")],
        env={**os.environ, "PYTHON": python}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_setup_refuses_a_python_other_than_the_one_of_the_existing_venv(project_with_venv: Path) -> None:
    other = project_with_venv / "python3.99"
    other.write_text("#!/bin/sh\necho 3.99\n")
    other.chmod(0o755)
    made_with = "%d.%d" % sys.version_info[:2]

    completed = _setup(project_with_venv, str(other))

    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        f"setup.sh: .venv was made with Python {made_with}, not PYTHON={other} (Python 3.99); "
        f"remove .venv to make it again with {other}"
    ]


def test_setup_refuses_a_python_that_does_not_run(project_with_venv: Path) -> None:
    completed = _setup(project_with_venv, "no-such-python3")

    assert completed.returncode == 1
    assert completed.stderr.splitlines() == ["setup.sh: PYTHON=no-such-python3 does not run"]
