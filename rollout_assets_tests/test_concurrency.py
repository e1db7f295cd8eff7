"""Two writers of one ledger path, as real processes; and the shipped instance configurations
allowing one run per round at a time, as a real DagsterInstance loads them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._utils.tags import TagConcurrencyLimitsCounter

from rollout_assets.demo import DemoLayout
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets_tests.ledger_processes import (
    backfill_command,
    ledger_line_count,
    lock_file,
    start_backfill,
    temp_files,
    wait_for,
    write_big_round,
)
from rollout_assets_tests.postgres_server import postgres_bin_dir, run_postgres

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PER_ROUND_LIMIT = {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_big_round(tmp_path_factory.mktemp("big"))


def test_a_second_writer_of_the_same_ledger_fails_at_once_and_the_first_completes(
    big: DemoLayout, tmp_path: Path
) -> None:
    ledger = tmp_path / "out.jsonl"
    first = start_backfill(big, ledger, tmp_path / "first.stdout")
    try:
        wait_for(lambda: lock_file(ledger).exists() and bool(temp_files(ledger)), "the first writer to hold the lock")
        # The first writer is frozen while it holds the lock, so "at the same time" does not
        # depend on timing: the second runs start to end inside the first one's write.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            second = subprocess.run(
                backfill_command(big, ledger), capture_output=True, text=True, timeout=120, check=False
            )
            elapsed = time.monotonic() - started
            assert first.poll() is None
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=300) == 0, first.stderr.read().decode() if first.stderr else ""
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    # The second failed at once (it did not wait for the lock: the holder was stopped) ...
    assert second.returncode == 1
    assert second.stdout == ""
    busy = (
        f"rollout-assets: error: {ledger} is being written by another process right now "
        f"(lock {lock_file(ledger)}); not writing it twice at once"
    )
    assert second.stderr.splitlines() == [busy]
    assert elapsed < 60
    # ... and the first completed a full, valid ledger, leaving nothing else behind.
    stats_text, summary = (tmp_path / "first.stdout").read_text(encoding="utf-8").rsplit("\nrollout ledger → ", 1)
    stats = json.loads(stats_text)
    assert summary == f"{ledger} ({stats['lines']} lines)\n"
    assert ledger_line_count(ledger) == stats["lines"] == sum(1 for _ in read_ledger_dicts(ledger))
    assert stats["byRole"]["supervisor"] == 816
    assert temp_files(ledger) == {} and not lock_file(ledger).exists()


# ---------------------------------------------------------------------------
# One run per round: the shipped instance configurations
# ---------------------------------------------------------------------------


def instance_from(config: Path, home: Path) -> DagsterInstance:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, home / "dagster.yaml")
    return DagsterInstance.from_config(str(home))


def run_of(round_key: str) -> DagsterRun:
    return DagsterRun(job_name="materialize_round", tags={"dagster/partition": round_key})


def assert_one_run_per_round(instance: DagsterInstance) -> None:
    # Queued runs are what a limit applies to; the daemon reads the limits from the instance's
    # concurrency settings merged with the coordinator's (get_concurrency_config), which is what
    # the `concurrency:` block feeds. The coordinator's own run_queue_config stays the default.
    assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
    queue = instance.get_concurrency_config().run_queue_config
    assert queue is not None
    assert [limit for limit in queue.tag_concurrency_limits if limit["key"] == "dagster/partition"] == [PER_ROUND_LIMIT]
    # What the limit does, through Dagster's own counter: a second run of a round in progress
    # waits; a run of another round does not.
    counter = TagConcurrencyLimitsCounter(queue.tag_concurrency_limits, [run_of("round-001")])
    assert counter.is_blocked(run_of("round-001"))
    assert not counter.is_blocked(run_of("round-002"))
    assert queue.max_concurrent_runs >= 2  # rounds still run in parallel


def test_local_instance_config_limits_runs_to_one_per_round(tmp_path: Path) -> None:
    instance = instance_from(DEPLOY / "local" / "dagster.yaml", tmp_path / "home")
    try:
        assert_one_run_per_round(instance)
    finally:
        instance.dispose()


def test_postgres_instance_config_limits_runs_to_one_per_round(tmp_path: Path, monkeypatch) -> None:
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")
    for server in run_postgres():  # a real server: the instance connects to it to load
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        instance = instance_from(DEPLOY / "postgres" / "dagster.yaml", tmp_path / "home")
        try:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            assert_one_run_per_round(instance)
        finally:
            instance.dispose()
