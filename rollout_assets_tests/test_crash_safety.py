"""A backfill killed with SIGKILL while it writes leaves the previous ledger intact, and the
next run cleans up after it and completes. Real processes, a real multi-second round."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from rollout_assets.demo import DemoLayout
from rollout_assets.demo.opencode_store import create_store_schema
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets_tests.ledger_processes import (
    OLD_LEDGER,
    backfill_command,
    file_size_limit,
    ledger_line_count,
    lock_file,
    processes_mentioning,
    start_backfill,
    temp_files,
    wait_for,
    write_big_round,
)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_big_round(tmp_path_factory.mktemp("big"))


def test_sigkill_while_writing_keeps_the_previous_ledger_and_the_next_run_completes(
    big: DemoLayout, tmp_path: Path
) -> None:
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    ledger = ledgers / "out.jsonl"
    ledger.write_bytes(OLD_LEDGER)

    process = start_backfill(big, ledger, tmp_path / "killed.stdout")
    try:
        seen: dict[str, int] = {}

        def a_temp_file_grows() -> bool:
            nonlocal seen
            now = temp_files(ledger)
            grew = any(name in seen and size > seen[name] for name, size in now.items())
            seen = now
            return grew

        wait_for(a_temp_file_grows, "a growing .out.jsonl.*.tmp file")
        assert process.poll() is None, "the backfill ended before it could be killed mid-write"
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL

        # The previous ledger is byte-identical; the killed writer's temp file(s) are left.
        assert ledger.read_bytes() == OLD_LEDGER
        left = temp_files(ledger)
        assert left, "a killed writer leaves its temp file behind"
        # Nothing of the killed backfill lives on (its forked workers die with it) or writes on.
        time.sleep(0.5)
        assert processes_mentioning(str(ledger)) == []
        assert temp_files(ledger) == left
        assert ledger.read_bytes() == OLD_LEDGER
    finally:
        for pid in processes_mentioning(str(ledger)):  # only processes this test started
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()

    rerun = subprocess.run(backfill_command(big, ledger), capture_output=True, text=True, timeout=300, check=False)

    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Traceback" not in rerun.stderr
    stats_text, summary = rerun.stdout.rsplit("\nrollout ledger → ", 1)
    stats = json.loads(stats_text)
    assert summary == f"{ledger} ({stats['lines']} lines)\n"
    # No temp file, no segment and no lock file remain: only the ledger.
    assert temp_files(ledger) == {}
    assert not lock_file(ledger).exists()
    assert sorted(os.listdir(ledgers)) == ["out.jsonl"]
    # The ledger is complete: every line valid, as many as its stats count, all roles there.
    assert ledger_line_count(ledger) == stats["lines"] == sum(stats["byRole"].values())
    assert sum(1 for _ in read_ledger_dicts(ledger)) == stats["lines"]
    assert stats["byRole"]["supervisor"] == 816


def _store_without_sessions(folder: Path) -> Path:
    """An opencode store with its tables and no session (a few pages): its snapshot fits under
    the limits below, where the big round's store (73 MB) does not, and the limit then stops the
    snapshot first (test_the_snapshot_of_a_store_past_the_limit_fails_the_round_...). Every
    worker line becomes a gap line; the ledger is still larger than each limit."""
    store = folder / "opencode-without-sessions.db"
    with sqlite3.connect(store) as connection:
        create_store_schema(connection, legacy=False)
    connection.close()
    return store


@pytest.mark.parametrize(
    ("limit", "workers", "who"),
    [
        (256 * 1024, 2, "a worker writing its segment"),  # a unit's segment is about 1.6 MB
        (4 * 1024 * 1024, 2, "the backfill appending segments to the ledger"),  # the ledger ~28 MB
        (4 * 1024 * 1024, 1, "the backfill writing the lines itself"),
    ],
)
def test_a_disk_that_fills_up_during_a_backfill_leaves_the_old_ledger_and_nothing_else(
    big: DemoLayout, tmp_path: Path, limit: int, workers: int, who: str
) -> None:
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    ledger = ledgers / "out.jsonl"
    ledger.write_bytes(OLD_LEDGER)
    store = _store_without_sessions(tmp_path)
    assert store.stat().st_size < limit

    result = subprocess.run(
        backfill_command(big, ledger, "--workers", str(workers), "--opencode-db", str(store)),
        preexec_fn=file_size_limit(limit),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 1, f"{who}: {result.stderr[-3000:]}"
    assert result.stderr == f"rollout-assets: error: ledger {ledger} not written: [Errno 27] File too large\n"
    assert result.stdout == ""
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(os.listdir(ledgers)) == ["out.jsonl"]


def test_the_snapshot_of_a_store_past_the_limit_fails_the_round_and_leaves_the_old_ledger(
    big: DemoLayout, tmp_path: Path
) -> None:
    """The store is readable; its private copy cannot be written. That fails the round, naming the
    copy: its sessions never become gap lines saying the store could not be read."""
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    ledger = ledgers / "out.jsonl"
    ledger.write_bytes(OLD_LEDGER)

    result = subprocess.run(
        backfill_command(big, ledger),
        preexec_fn=file_size_limit(4 * 1024 * 1024),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 1, result.stderr[-3000:]
    assert re.fullmatch(
        rf"rollout-assets: error: {re.escape(str(big.opencode_db))}: cannot write its snapshot "
        r"\S+/rollout-assets-opencode-\w+/opencode\.db: File too large\n",
        result.stderr,
    ), result.stderr
    assert result.stdout == ""
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(os.listdir(ledgers)) == ["out.jsonl"]
