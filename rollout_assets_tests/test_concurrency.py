"""Two writers of one ledger path, as real processes; two runs of one round launched at once,
as real processes on a real instance; and the shipped instance configurations allowing one run
per round at a time, as a real DagsterInstance loads them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._utils.tags import TagConcurrencyLimitsCounter

from rollout_assets.defs.instance import ledger_checks, sensor_run_outcomes
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.defs.round_lock import LOCK_FILE_NAME, acquire_round_lock, release_round_lock
from rollout_assets.demo import DemoLayout
from rollout_assets.discovery import SENSOR_NAME
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets_tests.dagster_rounds import SMALL_SPEC, write_rounds
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
# One run per round: two runs launched at once
# ---------------------------------------------------------------------------

PROJECT_DIR = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
SMALL = SMALL_SPEC.name
ROUND_ASSETS = "round_manifest,campaign_cells,worker_sessions,proposer_transcripts,rollout_ledger,rollout_stats"

# `dagster asset materialize`, run by Dagster's own command-line entry point, with round_manifest
# made to wait, once it has written, until a file appears: the run then holds its round, and
# stays still between two events (no transaction of the instance open), for as long as a test needs.
PAUSED_MATERIALIZE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from rollout_assets.defs.assets import manifest

    write_manifest = manifest.write_manifest

    def write_then_wait(*args, **kwargs):
        written = write_manifest(*args, **kwargs)
        Path(os.environ["PAUSED_FLAG"]).touch()
        while not Path(os.environ["RESUME_FLAG"]).exists():
            time.sleep(0.05)
        return written

    manifest.write_manifest = write_then_wait
    from dagster._cli import main

    sys.argv = ["dagster", *sys.argv[1:]]
    sys.exit(main())
    """
)


def dagster_home(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(DEPLOY / "local" / "dagster.yaml", folder / "dagster.yaml")
    with DagsterInstance.from_config(str(folder)) as instance:
        instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [SMALL])
    return folder


def run_environment(home: Path, layout: DemoLayout, ledger_root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), **layout.environment(ledger_root))
    return env


def asset_materialize_arguments() -> list[str]:
    return ["asset", "materialize", "-m", "rollout_assets.definitions", "--select", ROUND_ASSETS, "--partition", SMALL]


def start_paused_run(env: dict[str, str], flags: Path) -> subprocess.Popen[bytes]:
    """A `dagster asset materialize` of SMALL, once it is paused inside round_manifest (holding
    the round) until `flags/resume` appears."""
    flags.mkdir()
    env = {**env, "PAUSED_FLAG": str(flags / "paused"), "RESUME_FLAG": str(flags / "resume")}
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSED_MATERIALIZE, *asset_materialize_arguments()],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: (flags / "paused").exists() or process.poll() is not None, "the run to hold the round", 240)
    except BaseException:
        process.kill()
        process.wait()
        raise
    assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
    return process


@contextmanager
def paused_run(env: dict[str, str], flags: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `dagster asset materialize` of SMALL, paused inside round_manifest (holding the round)
    until the block ends; then it is resumed, and must succeed."""
    process = start_paused_run(env, flags)
    try:
        yield process
        (flags / "resume").touch()
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr.decode()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def runs_of_small(instance: DagsterInstance) -> list[DagsterRun]:
    """The runs of SMALL, oldest first."""
    return list(reversed(instance.get_runs(RunsFilter(tags={"dagster/partition": SMALL}))))


def step_failure_descriptions(instance: DagsterInstance, run_id: str) -> dict[str, str]:
    failures = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.is_step_failure:
            user = event.step_failure_data.user_failure_data
            failures[event.step_key] = user.description if user else event.step_failure_data.error.message
    return failures


def busy_sentence(first: DagsterRun, pid: int, ledger_root: Path) -> str:
    return (
        f"round {SMALL} is being materialized by run {first.run_id} (process {pid}) right now "
        f"(lock {ledger_root / SMALL / LOCK_FILE_NAME}); this run writes nothing to it"
    )


@pytest.mark.slow
def test_a_second_dagster_asset_materialize_of_a_round_refuses_and_the_first_writes_its_stats(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home, ledger_root = dagster_home(tmp_path / "home"), tmp_path / "ledgers"
    env = run_environment(home, layout, ledger_root)

    with paused_run(env, tmp_path / "flags") as first_process:
        second = subprocess.run(
            [str(VENV_BIN / "dagster"), *asset_materialize_arguments()],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        ledger_while_paused = (ledger_root / SMALL / "rollout-ledger.jsonl").exists()

    with DagsterInstance.from_config(str(home)) as instance:
        first_run, second_run = runs_of_small(instance)
        first_failures = step_failure_descriptions(instance, first_run.run_id)
        second_failures = step_failure_descriptions(instance, second_run.run_id)
        first_run, second_run = (instance.get_run_by_id(run.run_id) for run in (first_run, second_run))
        stats = instance.fetch_materializations(AssetKey("rollout_stats"), limit=5).records
        checks = ledger_checks(instance, [SMALL])[SMALL]

    # The second run refused at its first stage, in one sentence naming the first run and the lock,
    # and wrote nothing: while the first was paused, no ledger existed.
    assert second.returncode != 0
    assert second_run.status == DagsterRunStatus.FAILURE
    assert second_failures == {"round_manifest": busy_sentence(first_run, first_process.pid, ledger_root)}
    assert not ledger_while_paused
    # The first run then wrote its ledger, passed its checks and wrote its stats, judged on its own
    # checks, though the second run's planned checks are the latest records of those checks.
    assert (first_run.status, first_failures) == (DagsterRunStatus.SUCCESS, {})
    assert [record.run_id for record in stats] == [first_run.run_id]
    assert checks.passed, checks.problem()
    assert not (ledger_root / SMALL / LOCK_FILE_NAME).exists()


@pytest.mark.slow
def test_rollout_assets_materialize_on_another_instance_refuses_a_round_another_run_holds(tmp_path: Path) -> None:
    """The command line's own guard asks its instance; a run on another instance (another
    DAGSTER_HOME) writing to the same ledger root is met by the round's lock."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    ledger_root = tmp_path / "ledgers"
    home = dagster_home(tmp_path / "home")
    other_env = run_environment(dagster_home(tmp_path / "other-home"), layout, ledger_root)

    with paused_run(run_environment(home, layout, ledger_root), tmp_path / "flags") as first_process:
        second = subprocess.run(
            [str(VENV_BIN / "rollout-assets"), "materialize", SMALL],
            cwd=PROJECT_DIR, env=other_env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    with DagsterInstance.from_config(str(home)) as instance:
        (first_run,) = runs_of_small(instance)
    assert second.returncode == 1
    refused = f"  step round_manifest failed: {busy_sentence(first_run, first_process.pid, ledger_root)}"
    assert refused in second.stdout.splitlines(), second.stdout[-3000:]
    assert "Traceback" not in second.stdout + second.stderr


@pytest.mark.slow
def test_a_run_interrupted_while_it_holds_its_round_frees_it_and_may_pass(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home, ledger_root = dagster_home(tmp_path / "home"), tmp_path / "ledgers"

    process = start_paused_run(run_environment(home, layout, ledger_root), tmp_path / "flags")
    process.send_signal(signal.SIGINT)  # Ctrl-C
    process.communicate(timeout=120)

    with DagsterInstance.from_config(str(home)) as instance:
        (interrupted,) = runs_of_small(instance)
        # As if the sensor had requested it: how the sensor reads its end.
        instance.add_run_tags(interrupted.run_id, {"dagster/sensor_name": SENSOR_NAME, "dagster/run_key": "k"})
        outcome = sensor_run_outcomes(instance, SENSOR_NAME, ["k"])["k"]
    assert process.returncode != 0
    assert (outcome.run_id, outcome.finished, outcome.may_pass) == (interrupted.run_id, True, True)
    assert outcome.reason.startswith("interrupted")
    release_round_lock(acquire_round_lock(ledger_root / SMALL, SMALL, "the next run"))  # free at once


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
