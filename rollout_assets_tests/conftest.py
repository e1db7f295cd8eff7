"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rollout_assets.sources.opencode_store import SNAPSHOT_PREFIX


@pytest.fixture(autouse=True, scope="session")
def ctrl_c_delivered() -> Iterator[None]:
    """The tests of Ctrl-C need SIGINT delivered, to this process and to the commands it starts
    (which inherit an ignored signal). A suite started as a background job of a shell without
    job control (`cmd &` in a script, as CI runners may start it) begins with SIGINT ignored."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(autouse=True, scope="session")
def run_dirs_in_the_temp_folder() -> Iterator[None]:
    """Many tests build a cell's run folder beside its round, in the temp folder: name that as
    a root run folders may live in (ROLLOUT_RUN_DIR_ROOTS), for the whole session (module
    fixtures build rounds too). Tests of the containment itself set or remove the variable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROLLOUT_RUN_DIR_ROOTS", tempfile.gettempdir())
        yield


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A folder on another filesystem than tmp_path (tmpfs under /dev/shm), where the kernel
    refuses to copy between the two (`copy_file_range`: EXDEV); removed after the test."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test folder")
    folder = shm / f"rollout-assets-test-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 24 KiB filesystem (a real full disk, ENOSPC): room for a round's first stage files, not
    for a ledger. Skipped where no tmpfs can be mounted (not root, no mount command)."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(folder)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command to make a small filesystem with")
    if mounted.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own temporary folder, for this process (`tempfile`) and the children it
    starts (`TMPDIR`): what the code under test leaves there is this test's alone."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@pytest.fixture
def snapshot_folders(private_temp: Path) -> Callable[[], list[str]]:
    """The names of the opencode store's snapshot folders in `private_temp`, as they are when called."""
    return lambda: sorted(p.name for p in private_temp.iterdir() if p.name.startswith(SNAPSHOT_PREFIX))
