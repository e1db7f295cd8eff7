"""The store's copies a killed process leaves in the temporary folder are removed by the next
copy of the same kind, and only those: never a copy whose maker still runs, nor a new one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_assets.audit.stores import COPY_PREFIX, StoreCopy
from rollout_assets.owned_temp import ABANDONED_AFTER_S, OwnedFolder, remove_abandoned
from rollout_assets.sources.opencode_store import SNAPSHOT_PREFIX, take_snapshot
from rollout_assets_tests.builders import write_opencode_db

# A child that makes a copy of the store (argv[1]: "snapshot" or "audit"), prints its folder,
# then is killed (argv[2]: "kill") or waits until its stdin closes ("hold").
MAKE_A_COPY = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    kind, then, store = sys.argv[1:4]
    if kind == "snapshot":
        from rollout_assets.sources.opencode_store import take_snapshot
        copy = take_snapshot(store, wait_s=0)
        folder = copy.path.parent
    else:
        from rollout_assets.audit.stores import StoreCopy
        copy = StoreCopy(Path(store))
        folder = copy.folder
    print(folder, flush=True)
    if then == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.read()
    """
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_opencode_db(tmp_path / "opencode.db")


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def copy_in_a_child(kind: str, then: str, store: Path, holders: list[subprocess.Popen[str]]) -> Path:
    process = subprocess.Popen(
        [sys.executable, "-c", MAKE_A_COPY, kind, then, str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    holders.append(process)
    assert process.stdout is not None
    folder = Path(process.stdout.readline().strip())
    if then == "kill":
        assert process.wait(timeout=30) < 0
    assert folder.is_dir()
    return folder


def aged(folder: Path) -> Path:
    """The folder as it is a while after its maker last changed it."""
    then = time.time() - ABANDONED_AFTER_S - 10
    os.utime(folder, (then, then))
    return folder


@pytest.mark.parametrize("kind", ["snapshot", "audit"])
def test_a_killed_process_s_copy_is_removed_by_the_next_one_and_a_live_one_is_kept(
    kind: str, private_temp: Path, store: Path, holders: list[subprocess.Popen[str]]
) -> None:
    killed = aged(copy_in_a_child(kind, "kill", store, holders))
    held = aged(copy_in_a_child(kind, "hold", store, holders))

    if kind == "snapshot":
        new = take_snapshot(store, wait_s=0).folder
        new_path = Path(new.path)
    else:
        new_copy = StoreCopy(store)
        new_path = Path(new_copy.folder)

    assert not killed.exists()
    assert held.is_dir() and (held / "opencode.db").is_file()
    assert new_path.is_dir()
    prefix = SNAPSHOT_PREFIX if kind == "snapshot" else COPY_PREFIX
    assert sorted(p.name for p in private_temp.iterdir()) == sorted([held.name, new_path.name])
    assert all(name.startswith(prefix) for name in (held.name, new_path.name))


def test_a_killed_process_s_copy_younger_than_a_minute_is_kept(
    private_temp: Path, store: Path, holders: list[subprocess.Popen[str]]
) -> None:
    # Its maker may be between creating it and locking it.
    killed = copy_in_a_child("snapshot", "kill", store, holders)

    take_snapshot(store, wait_s=0)

    assert killed.is_dir()
    assert remove_abandoned(SNAPSHOT_PREFIX) == []
    assert remove_abandoned(SNAPSHOT_PREFIX) == [] and killed.is_dir()
    aged(killed)
    assert remove_abandoned(SNAPSHOT_PREFIX) == [str(killed)]


def test_only_folders_of_the_kind_with_a_lock_file_are_removed(private_temp: Path) -> None:
    mine = OwnedFolder("rollout-something-else-")
    other_kind = aged(Path(mine.path))
    no_lock = private_temp / f"{SNAPSHOT_PREFIX}made-by-hand"
    no_lock.mkdir()
    (no_lock / "opencode.db").write_bytes(b"kept")
    aged(no_lock)
    a_file = private_temp / f"{SNAPSHOT_PREFIX}a-file"
    a_file.write_bytes(b"kept")

    assert remove_abandoned(SNAPSHOT_PREFIX) == []
    # This process holds the other kind's lock: removed only once it lets go.
    assert remove_abandoned("rollout-something-else-") == []
    assert other_kind.is_dir() and no_lock.is_dir() and a_file.is_file()
    mine.remove()
    assert not other_kind.exists()
