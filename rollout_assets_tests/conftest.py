"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    """A temp folder `nobody` can enter (pytest's own are private to their owner), for tests
    that run code as `nobody` (rollout_assets_tests/unprivileged.py)."""
    folder = Path(tempfile.mkdtemp(prefix="rollout-assets-tests-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for base, dirs, _ in os.walk(folder):
            for name in dirs:
                os.chmod(os.path.join(base, name), 0o755)
        shutil.rmtree(folder, ignore_errors=True)
