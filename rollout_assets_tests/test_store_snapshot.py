"""The live opencode store read as one snapshot a round: WAL stores in folders the backfill may
not write, stores another process keeps locked (before and during a run, in rollback-journal and
WAL mode), and a store changed while a round is read.

Everything runs on real SQLite files of a generated round, with real lock holders in other
processes and, where a folder must be closed to the backfill, the real command line as `nobody`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.audit.stores import _CannotCopy, _copy_file
from rollout_assets.backfill import parallel
from rollout_assets.backfill.parallel import StorePerProcess, backfill_to_file
from rollout_assets.demo import DemoLayout, RoundSpec, write_demo
from rollout_assets.errors import RoundError
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets.sources.opencode import OpencodeStore
from rollout_assets.sources.opencode_store import WAIT_ENV, OpencodeStoreBusy, take_snapshot
from rollout_assets_tests.ledger_processes import file_size_limit
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged

SPEC = RoundSpec(
    name="snapshot-round",
    instances=2,
    reps=1,
    generations=1,
    candidates_per_generation=1,
    workers_per_cell=2,
    steps_per_session=1,
    shots_per_candidate=1,
    edge_cases=False,
    seed=5,
)
WORKERS = 8  # 2 instances x (baseline + 1 candidate) x 2 workers
CAPTURED_AT = "2026-12-01T12:00:00.000Z"


@pytest.fixture
def demo(world_readable_tmp: Path) -> DemoLayout:
    return write_demo(world_readable_tmp / "demo", rounds=[SPEC])


def backfill(
    demo: DemoLayout, ledger: Path, db: Path | None = None, workers: int = 2
) -> list[dict[str, Any]]:
    backfill_to_file(
        demo.rounds[0],
        ledger,
        opencode_db=db or demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
        captured_at=CAPTURED_AT,
        workers=workers,
    )
    return list(read_ledger_dicts(ledger))


def workers_of(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["role"] == "worker"]


def to_wal(db: Path) -> None:
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    connection.close()  # the last connection: checkpoints and removes -wal and -shm


def folder_state(folder: Path) -> dict[str, str]:
    """Every file of `folder` with its sha256: a new, removed or changed file shows."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


# Leaves committed rows only in the WAL (no checkpoint): as a store looks while opencode runs.
WAL_WITH_FRAMES = textwrap.dedent(
    """
    import os, sqlite3, sys
    connection = sqlite3.connect(sys.argv[1])
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    connection.execute("PRAGMA wal_autocheckpoint=0")
    connection.execute("UPDATE session SET agent = 'agent-in-the-wal'")
    connection.commit()
    os._exit(0)  # no close: no checkpoint
    """
)

# The command line's backfill as `nobody` (its imports warmed first, by a run as root).
BACKFILL_AS_NOBODY = (
    textwrap.dedent(
        """
        import contextlib, io, sys
        import rollout_assets.cli as cli
        scratch = sys.argv.pop(1)
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["backfill", *sys.argv[1:2], scratch, *sys.argv[3:]]) == 0
        from rollout_assets.sources.opencode_store import remove_snapshots
        remove_snapshots()  # root's: `nobody` could not remove them at exit
        """
    )
    + DROP_TO_NOBODY
    + 'sys.exit(cli.main(["backfill", *sys.argv[1:]]))\n'
)


def backfill_as_nobody(demo: DemoLayout, db: Path, out: Path) -> subprocess.CompletedProcess[str]:
    out.parent.mkdir(mode=0o777, exist_ok=True)
    out.parent.chmod(0o777)
    scratch = out.parent / "scratch.jsonl"
    args = [
        str(demo.rounds[0]),
        str(out),
        "--opencode-db",
        str(db),
        "--claude-projects",
        str(demo.claude_projects_dir),
    ]
    return run_unprivileged(BACKFILL_AS_NOBODY, str(scratch), *args)


# ---------------------------------------------------------------------------
# WAL stores, read without writing beside them
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wal", ["checkpointed", "rows only in its WAL", "rows only in its WAL, an index it may not read"]
)
def test_a_wal_store_in_a_folder_the_backfill_may_not_write_is_read_whole_leaving_no_file(
    demo: DemoLayout, world_readable_tmp: Path, wal: str
) -> None:
    """A read-only SQLite open of a WAL store needs -shm/-wal beside it: in a folder `nobody`
    may not write it fails, and every worker used to become a "store unavailable" gap."""
    store = world_readable_tmp / "store"
    store.mkdir()
    db = Path(shutil.copy(demo.opencode_db, store / "opencode.db"))
    to_wal(db)
    if wal != "checkpointed":
        subprocess.run([sys.executable, "-c", WAL_WITH_FRAMES, str(db)], check=True, timeout=60)
        assert Path(f"{db}-wal").stat().st_size > 0
    for path in store.iterdir():
        path.chmod(0o600 if path.name.endswith("-shm") and "index" in wal else 0o644)
    store.chmod(0o755)  # root's: `nobody` may read in it, not create a file
    before = folder_state(store)

    result = backfill_as_nobody(demo, db, world_readable_tmp / "out" / "ledger.jsonl")

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no "could not be read" warning
    lines = list(read_ledger_dicts(world_readable_tmp / "out" / "ledger.jsonl"))
    assert len(workers_of(lines)) == WORKERS
    assert all(line["messages"] and "gap" not in line["provenance"] for line in workers_of(lines))
    if wal != "checkpointed":
        assert {line["outcome"]["metrics"]["session_agent"] for line in workers_of(lines)} == {
            "agent-in-the-wal"
        }
    # No -shm, -wal or journal appeared, and the database and its WAL are as they were. (An
    # existing -shm is SQLite's shared lock table: a reader takes its read lock there.)
    after = folder_state(store)
    assert sorted(after) == sorted(before)
    assert {name: after[name] for name in after if not name.endswith("-shm")} == {
        name: before[name] for name in before if not name.endswith("-shm")
    }


# The audit's checks of a ledger, as `nobody`: prints each check's verdict as JSON.
AUDIT_AS_NOBODY = (
    textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from rollout_assets import audit
        """
    )
    + DROP_TO_NOBODY
    + textwrap.dedent(
        """
        out_dir, db, claude, ledger_path = map(Path, sys.argv[1:5])
        inputs = audit.recount_inputs(out_dir, db, claude_projects=claude)
        ledger = audit.recount_ledger(ledger_path)
        verdicts = {
            "workers": audit.workers_verdict(inputs, ledger),
            "inputs_match": audit.inputs_match_verdict(inputs, ledger),
            "gaps": audit.gaps_warranted_verdict(inputs, ledger),
        }
        print(json.dumps({
            "readable": inputs.store.readable,
            "why": inputs.store.why,
            **{name: [result.passed, result.sample] for name, result in verdicts.items()},
        }))
        """
    )
)


@pytest.mark.parametrize("wal", ["checkpointed", "rows only in its WAL"])
def test_the_audit_reads_a_wal_store_in_a_folder_it_may_not_write_leaving_no_file(
    demo: DemoLayout, world_readable_tmp: Path, wal: str
) -> None:
    """The audit opened the live store read-only: on a WAL store in a folder `nobody` may not
    write, that fails (every check of the store's lines then proves nothing) or, where it may,
    leaves -shm/-wal beside the store. It reads its own copy instead."""
    store = world_readable_tmp / "store"
    store.mkdir()
    db = Path(shutil.copy(demo.opencode_db, store / "opencode.db"))
    to_wal(db)
    if wal != "checkpointed":
        subprocess.run([sys.executable, "-c", WAL_WITH_FRAMES, str(db)], check=True, timeout=60)
    for path in store.iterdir():
        path.chmod(0o644)
    store.chmod(0o755)
    ledger = world_readable_tmp / "out" / "ledger.jsonl"
    assert backfill_as_nobody(demo, db, ledger).returncode == 0
    before = folder_state(store)

    result = run_unprivileged(
        AUDIT_AS_NOBODY, str(demo.rounds[0]), str(db), str(demo.claude_projects_dir), str(ledger)
    )

    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)
    assert verdicts == {
        "readable": True,
        "why": None,
        "workers": [True, []],
        "inputs_match": [True, []],
        "gaps": [True, []],
    }
    assert folder_state(store) == before


def test_the_audit_passes_the_gaps_of_a_store_nobody_may_read(
    demo: DemoLayout, world_readable_tmp: Path
) -> None:
    """A store that is there but cannot be read: the join's gaps say why, and the audit, which
    cannot read it either, finds them warranted."""
    store = world_readable_tmp / "store"
    store.mkdir(mode=0o755)
    db = Path(shutil.copy(demo.opencode_db, store / "opencode.db"))
    db.chmod(0o600)
    ledger = world_readable_tmp / "out" / "ledger.jsonl"
    assert backfill_as_nobody(demo, db, ledger).returncode == 0

    result = run_unprivileged(
        AUDIT_AS_NOBODY, str(demo.rounds[0]), str(db), str(demo.claude_projects_dir), str(ledger)
    )

    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)
    assert verdicts["readable"] is False
    assert verdicts["why"] == f"cannot copy it: {db}: Permission denied"
    assert verdicts["gaps"] == [True, []]
    assert verdicts["inputs_match"] == [True, []]


def test_a_checkpointed_wal_store_read_by_root_gets_no_file_beside_it(
    demo: DemoLayout, tmp_path: Path
) -> None:
    db = Path(shutil.copy(demo.opencode_db, tmp_path / "opencode.db"))
    to_wal(db)
    before = folder_state(tmp_path)

    lines = backfill(demo, tmp_path.parent / f"{tmp_path.name}-ledger.jsonl", db)

    assert all(line["messages"] for line in workers_of(lines))
    assert folder_state(tmp_path) == before


def test_a_store_the_backfill_may_not_read_gives_gaps_naming_why(
    demo: DemoLayout, world_readable_tmp: Path
) -> None:
    store = world_readable_tmp / "store"
    store.mkdir(mode=0o755)
    db = Path(shutil.copy(demo.opencode_db, store / "opencode.db"))
    db.chmod(0o600)

    result = backfill_as_nobody(demo, db, world_readable_tmp / "out" / "ledger.jsonl")

    assert result.returncode == 0, result.stderr
    lines = workers_of(list(read_ledger_dicts(world_readable_tmp / "out" / "ledger.jsonl")))
    assert [line["provenance"]["gap"] for line in lines] == [
        f"opencode store unavailable; worker cwd {line['outcome']['metrics']['worker_cwd']} unrecoverable "
        f"({db}: Permission denied)"
        for line in lines
    ]


# ---------------------------------------------------------------------------
# A store another process keeps locked
# ---------------------------------------------------------------------------

# Holds the store locked until its standard input closes: rollback-journal mode, a writer in
# the middle of committing (SQLite's EXCLUSIVE lock); WAL mode, a connection in exclusive
# locking mode (no shared index: it keeps the database file locked).
HOLD_LOCK = textwrap.dedent(
    """
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    if sys.argv[2] == "wal":
        connection.execute("PRAGMA locking_mode=EXCLUSIVE")
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("UPDATE session SET agent = agent")
        connection.execute("COMMIT")
    else:
        connection.execute("BEGIN EXCLUSIVE")
        connection.execute("UPDATE session SET agent = agent")
    print("held", flush=True)
    sys.stdin.read()
    """
)


class LockHolder:
    def __init__(self, db: Path, mode: str):
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(db), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdout.readline() == "held\n", self.stderr()

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr else ""

    def release(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=30)

    def release_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.release).start()


@pytest.fixture
def holders() -> Iterator[list[LockHolder]]:
    started: list[LockHolder] = []
    yield started
    for holder in started:
        holder.process.kill()
        holder.process.wait(timeout=30)


def store_in_mode(demo: DemoLayout, folder: Path, mode: str) -> Path:
    folder.mkdir()
    db = Path(shutil.copy(demo.opencode_db, folder / "opencode.db"))
    if mode == "wal":
        to_wal(db)
    return db


JOURNAL_MODES = pytest.mark.parametrize("mode", ["rollback", "wal"])
SQLITE_BUSY_TIMEOUT_S = 5.0  # Python's sqlite3.connect default


@JOURNAL_MODES
def test_a_lock_held_when_the_round_starts_is_waited_for(
    demo: DemoLayout, tmp_path: Path, mode: str, holders: list[LockHolder], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = store_in_mode(demo, tmp_path / "store", mode)
    reference = backfill(demo, tmp_path / "reference.jsonl", db)
    monkeypatch.setenv(WAIT_ENV, "60")
    holder = LockHolder(db, mode)
    holders.append(holder)
    holder.release_after(SQLITE_BUSY_TIMEOUT_S + 0.5)  # longer than SQLite's own busy wait

    started = time.monotonic()
    lines = backfill(demo, tmp_path / "ledger.jsonl", db)

    assert time.monotonic() - started >= SQLITE_BUSY_TIMEOUT_S  # it waited for the lock, not around it
    assert all(line["messages"] for line in workers_of(lines))
    assert [strip(line) for line in lines] == [strip(line) for line in reference]


@JOURNAL_MODES
def test_a_lock_held_longer_than_the_wait_fails_the_round_naming_it(
    demo: DemoLayout, tmp_path: Path, mode: str, holders: list[LockHolder], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = store_in_mode(demo, tmp_path / "store", mode)
    monkeypatch.setenv(WAIT_ENV, "0.5")
    holder = LockHolder(db, mode)
    holders.append(holder)
    ledger = tmp_path / "ledger.jsonl"

    with pytest.raises(OpencodeStoreBusy) as raised:
        backfill(demo, ledger, db)

    assert isinstance(raised.value, RoundError)
    assert str(raised.value) == (
        f"{db}: the opencode store is locked by another process (SQLite's exclusive lock, held by process "
        f"{holder.process.pid}) and stayed so for 0.5 s (the wait is set by {WAIT_ENV}); run again once it is released"
    )
    assert not ledger.exists()


def test_the_command_line_fails_on_a_store_locked_too_long_and_writes_no_ledger(
    demo: DemoLayout, tmp_path: Path, holders: list[LockHolder]
) -> None:
    db = store_in_mode(demo, tmp_path / "store", "rollback")
    holders.append(LockHolder(db, "rollback"))
    ledger = tmp_path / "ledger.jsonl"

    result = subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", "backfill", str(demo.rounds[0]), str(ledger)]
        + ["--opencode-db", str(db), "--claude-projects", str(demo.claude_projects_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, WAIT_ENV: "0.5"},
        check=False,
    )

    assert result.returncode == 1
    assert "the opencode store is locked by another process (SQLite's exclusive lock" in result.stderr
    assert not ledger.exists()


@JOURNAL_MODES
def test_a_lock_taken_during_the_round_changes_nothing(
    demo: DemoLayout, tmp_path: Path, mode: str, holders: list[LockHolder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is taken once the round has started (right after it found the store), before
    its worker processes read a session: they read the round's snapshot, not the store."""
    db = store_in_mode(demo, tmp_path / "store", mode)
    reference = backfill(demo, tmp_path / "reference.jsonl", db)
    monkeypatch.setenv(WAIT_ENV, "0.5")
    monkeypatch.setattr(parallel, "CELLS_PER_UNIT", 1)  # a unit per cell: every worker process reads
    after_probe(monkeypatch, lambda: holders.append(LockHolder(db, mode)))

    lines = backfill(demo, tmp_path / "ledger.jsonl", db)

    assert holders and holders[0].process.poll() is None  # locked all through the round
    assert [strip(line) for line in lines] == [strip(line) for line in reference]


def test_the_round_reads_one_state_of_a_store_changed_while_it_runs(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = store_in_mode(demo, tmp_path / "store", "wal")
    reference = backfill(demo, tmp_path / "reference.jsonl", db)
    monkeypatch.setattr(parallel, "CELLS_PER_UNIT", 1)

    def change_every_session() -> None:
        with sqlite3.connect(db) as connection:
            connection.execute("UPDATE session SET agent = 'changed-during-the-round'")
        connection.close()

    after_probe(monkeypatch, change_every_session)

    lines = backfill(demo, tmp_path / "ledger.jsonl", db)

    assert [strip(line) for line in lines] == [strip(line) for line in reference]


# A writer in the middle of a transaction in rollback-journal mode: its changes are in its own
# page cache and its -journal, none committed (SQLite's RESERVED lock; readers may still read).
WRITE_UNCOMMITTED = textwrap.dedent(
    """
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("PRAGMA cache_size=-1")  # a small cache: the change reaches the -journal
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("UPDATE session SET agent = 'uncommitted'")
    print("held", flush=True)
    sys.stdin.read()
    """
)


# A writer that died in the middle of committing: part of its change is in the database file,
# the pages it replaced in a hot -journal that the next reader must roll back.
CRASH_MID_COMMIT = textwrap.dedent(
    """
    import os, sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("PRAGMA cache_size=1")  # a change larger than the cache spills to the file
    connection.execute("BEGIN EXCLUSIVE")
    connection.execute("UPDATE part SET data = json_set(data, '$.uncommitted', hex(zeroblob(2000)))")
    connection.execute("UPDATE session SET agent = 'uncommitted'")
    os._exit(0)
    """
)


@pytest.mark.parametrize("writer", ["none", "an uncommitted transaction", "a crash mid-commit"])
def test_a_rollback_journal_store_is_copied_as_its_last_committed_state(
    demo: DemoLayout, tmp_path: Path, writer: str, holders: list[LockHolder]
) -> None:
    """The database file and its -journal are copied under the shared lock: without waiting
    for a writer that has not begun to commit, and what is not committed is not read, even when
    a crashed writer left it in the database file (the copy rolls its hot journal back; the
    store itself is not touched)."""
    db = store_in_mode(demo, tmp_path / "store", "rollback")
    if writer == "a crash mid-commit":
        subprocess.run([sys.executable, "-c", CRASH_MID_COMMIT, str(db)], check=True, timeout=60)
        assert (tmp_path / "store" / "opencode.db-journal").stat().st_size > 0
        with open(db, "rb") as changed, open(demo.opencode_db, "rb") as original:
            assert changed.read() != original.read()  # the half-made change is in the file
    elif writer != "none":
        holder = LockHolder.__new__(LockHolder)
        holder.process = subprocess.Popen(
            [sys.executable, "-c", WRITE_UNCOMMITTED, str(db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        holders.append(holder)
        assert holder.process.stdout is not None and holder.process.stdout.readline() == "held\n", holder.stderr()
        assert (tmp_path / "store" / "opencode.db-journal").exists()
    before = folder_state(tmp_path / "store")

    started = time.monotonic()
    snapshot = take_snapshot(db, wait_s=0)

    assert time.monotonic() - started < SQLITE_BUSY_TIMEOUT_S
    copy = sqlite3.connect(f"file:{snapshot.path}?immutable=1", uri=True)
    agents = {row[0] for row in copy.execute("SELECT agent FROM session")}
    copy.close()
    assert "uncommitted" not in agents and agents
    with sqlite3.connect(f"file:{demo.opencode_db}?immutable=1", uri=True) as original:
        assert agents == {row[0] for row in original.execute("SELECT agent FROM session")}
    assert folder_state(tmp_path / "store") == before
    shutil.rmtree(snapshot.path.parent)


def after_probe(monkeypatch: pytest.MonkeyPatch, action: Any) -> None:
    """Run `action` as soon as the round has found its store (StorePerProcess.probe)."""
    probe = StorePerProcess.probe.__func__  # type: ignore[attr-defined]

    def probe_then_act(cls: type[StorePerProcess], path: Any) -> StorePerProcess:
        found = probe(cls, path)
        action()
        return found

    monkeypatch.setattr(StorePerProcess, "probe", classmethod(probe_then_act))


def strip(line: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(line))
    del copy["provenance"]["captured_at"]
    return copy


def test_a_worker_process_of_the_round_reads_its_parents_snapshot(demo: DemoLayout, tmp_path: Path) -> None:
    """Opening the store again in the process that took the snapshot takes a new one (a new
    round); only a process it forked reads the one it took."""
    db = store_in_mode(demo, tmp_path / "store", "rollback")
    first = OpencodeStore.open(db)
    assert first is not None
    first.close()
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE session SET agent = 'after-the-first-open'")
    connection.close()

    again = OpencodeStore.open(db)
    assert again is not None
    try:
        agents = {row[0] for row in again._connection.execute("SELECT agent FROM session")}
    finally:
        again.close()

    assert agents == {"after-the-first-open"}


# Run in a process that may not write a file past 64 KiB (file_size_limit: the write fails
# with EFBIG, as on a full disk): the child prints what take_snapshot raised.
SNAPSHOT_UNDER_A_FILE_SIZE_LIMIT = textwrap.dedent(
    """
    import sys
    from rollout_assets.sources.opencode_store import take_snapshot
    try:
        take_snapshot(sys.argv[1], wait_s=0)
    except Exception as error:
        print(type(error).__name__, error)
    """
)


def test_a_snapshot_that_cannot_be_written_says_so_and_not_that_the_store_is_unreadable(
    demo: DemoLayout, tmp_path: Path
) -> None:
    db = store_in_mode(demo, tmp_path / "store", "rollback")
    assert db.stat().st_size > 64 * 1024

    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT_UNDER_A_FILE_SIZE_LIMIT, str(db)],
        preexec_fn=file_size_limit(64 * 1024), capture_output=True, text=True, timeout=60, check=True,
    )

    assert done.stdout.startswith(f"OpencodeStoreError {db}: cannot write its snapshot "), done.stdout + done.stderr
    assert "File too large" in done.stdout


AUDIT_UNDER_A_FILE_SIZE_LIMIT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rollout_assets.audit.stores import read_store
    from rollout_assets.audit.worker_cwds import WorkerCwds
    reading = read_store(Path(sys.argv[1]), WorkerCwds.of({"/some/cwd"}))
    print(reading.readable, reading.why)
    """
)


def test_an_audit_copy_that_cannot_be_written_names_the_copy_not_the_store(demo: DemoLayout, tmp_path: Path) -> None:
    db = store_in_mode(demo, tmp_path / "store", "rollback")

    done = subprocess.run(
        [sys.executable, "-c", AUDIT_UNDER_A_FILE_SIZE_LIMIT, str(db)],
        preexec_fn=file_size_limit(64 * 1024), capture_output=True, text=True, timeout=60, check=True,
    )

    assert done.stdout.startswith("False cannot copy it: "), done.stdout + done.stderr
    assert "/rollout-audit-store-" in done.stdout and "opencode.db: File too large" in done.stdout
    assert f"{db}:" not in done.stdout


def test_an_audit_copy_that_cannot_be_created_names_the_copy_not_the_store(demo: DemoLayout, tmp_path: Path) -> None:
    db = store_in_mode(demo, tmp_path / "store", "rollback")
    target = tmp_path / "removed-folder" / "opencode.db"  # open(target) fails: its folder is gone

    with pytest.raises(_CannotCopy) as refused:
        _copy_file(str(db), str(target))

    assert str(refused.value) == f"{target}: No such file or directory"


def test_the_round_s_snapshot_is_removed_as_soon_as_the_round_is_read(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_folders: Callable[[], list[str]]
) -> None:
    # Its pages not yet on disk are then dropped instead of being written (docs/performance.md).
    monkeypatch.setattr(parallel, "CELLS_PER_UNIT", 1)  # one progress call per cell
    while_reading: list[list[str]] = []
    backfill_to_file(
        demo.rounds[0],
        tmp_path / "ledger.jsonl",
        opencode_db=demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
        captured_at=CAPTURED_AT,
        workers=2,
        on_cells_done=lambda done, total: while_reading.append(snapshot_folders()),
    )

    assert while_reading and all(len(folders) == 1 for folders in while_reading)
    assert snapshot_folders() == []
