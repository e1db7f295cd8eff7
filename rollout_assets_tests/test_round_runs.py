"""One run per round, on a real SQLite-backed instance: the round's lock, the verdicts a round's
stats are judged on when another run of the round failed, and how the sensor reads a run's end.

Runs are in process (`materialize`); another run holding the round is this process (or a child)
holding the round's lock. test_concurrency.py races real `dagster asset materialize` processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRun, DagsterRunStatus, instance_for_test

from rollout_assets import audit
from rollout_assets.defs.assets import rollout_stats
from rollout_assets.defs.constants import LEDGER_BLOCKING_CHECKS
from rollout_assets.defs.instance import ledger_checks, sensor_run_outcomes
from rollout_assets.defs.round_lock import (
    LOCK_FILE_NAME,
    RoundBusyError,
    acquire_round_lock,
    release_round_lock,
)
from rollout_assets.demo import DemoLayout
from rollout_assets.discovery import SENSOR_NAME, RunOutcome
from rollout_assets_tests.dagster_rounds import (
    SMALL_SPEC,
    lose_a_worker_line_in_the_ledger_stage,
    materialize_round,
    metadata_values,
    round_resources,
    step_failures,
    write_rounds,
)

SMALL = SMALL_SPEC.name
BLOCKING = sorted(LEDGER_BLOCKING_CHECKS)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_rounds(tmp_path_factory.mktemp("demo"), (SMALL_SPEC,))


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def ledger_root(tmp_path: Path) -> Path:
    return tmp_path / "ledgers"


def busy(holder: str, ledger_root: Path) -> str:
    return (
        f"round {SMALL} is being materialized by {holder} right now (lock {ledger_root / SMALL / LOCK_FILE_NAME}); "
        "this run writes nothing to it"
    )


def held_by_another_run(ledger_root: Path, holder: str = "run other-run (process 1)") -> Any:
    folder = ledger_root / SMALL
    folder.mkdir(parents=True, exist_ok=True)
    return acquire_round_lock(folder, SMALL, holder)


# ---------------------------------------------------------------------------
# The round's lock
# ---------------------------------------------------------------------------


def test_a_run_of_a_round_another_run_holds_refuses_in_one_sentence_and_writes_nothing(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path
) -> None:
    lock = held_by_another_run(ledger_root)
    try:
        result = materialize_round(instance, round_resources(layout, ledger_root), SMALL)
    finally:
        release_round_lock(lock)

    assert not result.success
    assert step_failures(result) == {"round_manifest": busy("run other-run (process 1)", ledger_root)}
    (failure,) = result.get_step_failure_events()
    assert metadata_values(failure.step_failure_data.user_failure_data.metadata) == {
        "round": SMALL,
        "error": "RoundBusyError",
        "may_pass": True,
    }
    assert sorted(os.listdir(ledger_root / SMALL)) == ["stages"]  # the folder the lock sits in, nothing more
    assert os.listdir(ledger_root / SMALL / "stages") == []


def test_a_run_holds_its_round_from_its_first_writing_stage_to_its_end(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollout_assets.defs.assets import ledger as ledger_assets

    write_rollout_ledger = ledger_assets.write_rollout_ledger
    refusals: list[str] = []

    def another_run_tries(outputs: Any, *stores: Any) -> Any:
        try:
            release_round_lock(acquire_round_lock(outputs.folder, SMALL, "run intruder (process 2)"))
        except RoundBusyError as refusal:
            refusals.append(str(refusal))
        return write_rollout_ledger(outputs, *stores)

    monkeypatch.setattr(ledger_assets, "write_rollout_ledger", another_run_tries)
    result = materialize_round(instance, round_resources(layout, ledger_root), SMALL)

    assert result.success
    # Four stages after the one that took it, the run still held the round, under its own name.
    assert refusals == [busy(f"run {result.run_id} (process {os.getpid()})", ledger_root)]
    # Released, and its file removed, as the run ended.
    assert not (ledger_root / SMALL / LOCK_FILE_NAME).exists()
    release_round_lock(acquire_round_lock(ledger_root / SMALL, SMALL, "the next run"))


HOLD_AND_WAIT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rollout_assets.defs.round_lock import acquire_round_lock

    acquire_round_lock(Path(sys.argv[1]), sys.argv[2], "run crashed-run (process 3)")
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_lock_left_by_a_killed_run_does_not_hold_the_round_back(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path
) -> None:
    (ledger_root / SMALL).mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_WAIT, str(ledger_root / SMALL), SMALL],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        while_held = materialize_round(instance, round_resources(layout, ledger_root), SMALL)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (ledger_root / SMALL / LOCK_FILE_NAME).exists()  # left behind, as a crash leaves it

    after_the_crash = materialize_round(instance, round_resources(layout, ledger_root), SMALL)

    assert step_failures(while_held) == {"round_manifest": busy("run crashed-run (process 3)", ledger_root)}
    assert after_the_crash.success
    assert not (ledger_root / SMALL / LOCK_FILE_NAME).exists()


# ---------------------------------------------------------------------------
# The stats are judged on the checks of the run that wrote the ledger
# ---------------------------------------------------------------------------


def fail_a_run_of_the_round_before_its_checks(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path
) -> None:
    """A run of the whole round launched with a wrong rounds root, which fails at its first
    stage: its checks are planned (the latest records of the checks), never executed."""
    wrong_root = ledger_root.parent / "wrong-rounds-root"
    wrong_root.mkdir(exist_ok=True)
    failed = materialize_round(instance, round_resources(layout, ledger_root, rounds_root=wrong_root), SMALL)
    assert list(step_failures(failed)) == ["round_manifest"]


def test_a_failed_runs_planned_checks_do_not_keep_a_checked_ledger_from_its_stats(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path
) -> None:
    resources = round_resources(layout, ledger_root)
    assert materialize_round(instance, resources, SMALL).success
    fail_a_run_of_the_round_before_its_checks(layout, instance, ledger_root)

    checks = ledger_checks(instance, [SMALL])[SMALL]
    stats_again = materialize_round(instance, resources, SMALL, selection=[rollout_stats.key])

    assert (checks.materialized, checks.failed, checks.not_evaluated) == (True, (), ())
    assert stats_again.success, step_failures(stats_again)


def test_a_failed_runs_planned_checks_do_not_hide_the_ledgers_failed_check(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = round_resources(layout, ledger_root)
    with monkeypatch.context() as patch:
        lose_a_worker_line_in_the_ledger_stage(patch)
        assert not materialize_round(instance, resources, SMALL).success
    fail_a_run_of_the_round_before_its_checks(layout, instance, ledger_root)

    checks = ledger_checks(instance, [SMALL])[SMALL]
    stats_again = materialize_round(instance, resources, SMALL, selection=[rollout_stats.key])

    assert checks.failed == ("every_line_is_its_invocation_in_order", "every_worker_session_accounted_for")
    assert checks.not_evaluated == ()
    assert step_failures(stats_again)["rollout_stats"].startswith(
        f"round {SMALL}: not writing stats, its ledger failed the blocking check(s) "
        "every_line_is_its_invocation_in_order, every_worker_session_accounted_for;"
    )


def test_a_ledger_its_own_run_never_checked_stays_unjudged_whatever_plans_come_after(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = round_resources(layout, ledger_root)
    assert materialize_round(instance, resources, SMALL).success  # checked, passed: then replaced

    def cannot_read(path: Path) -> Any:
        raise OSError(f"cannot read {path}")

    with monkeypatch.context() as patch:
        patch.setattr(audit, "recount_ledger", cannot_read)  # the checks of the ledger fail to execute
        unchecked = materialize_round(instance, resources, SMALL)
    fail_a_run_of_the_round_before_its_checks(layout, instance, ledger_root)

    checks = ledger_checks(instance, [SMALL])[SMALL]

    assert not unchecked.success
    assert (
        instance.fetch_materializations(AssetKey("rollout_ledger"), limit=1).records[0].run_id
        == unchecked.run_id
    )
    assert (checks.materialized, checks.failed, checks.not_evaluated) == (True, (), tuple(BLOCKING))


# ---------------------------------------------------------------------------
# How the sensor reads the end of its runs
# ---------------------------------------------------------------------------


def sensor_tags(run_key: str) -> dict[str, str]:
    return {"dagster/sensor_name": SENSOR_NAME, "dagster/run_key": run_key}


def outcome_of(instance: DagsterInstance, run_key: str) -> RunOutcome:
    return sensor_run_outcomes(instance, SENSOR_NAME, [run_key])[run_key]


def test_a_run_another_run_held_back_failed_for_a_reason_that_may_pass(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path
) -> None:
    lock = held_by_another_run(ledger_root)
    try:
        failed = materialize_round(
            instance, round_resources(layout, ledger_root), SMALL, tags=sensor_tags("k")
        )
    finally:
        release_round_lock(lock)

    assert outcome_of(instance, "k") == RunOutcome(
        failed.run_id, finished=True, may_pass=True, reason=busy("run other-run (process 1)", ledger_root)
    )


def test_a_run_whose_ledger_failed_a_blocking_check_failed_for_the_round(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lose_a_worker_line_in_the_ledger_stage(monkeypatch)
    failed = materialize_round(instance, round_resources(layout, ledger_root), SMALL, tags=sensor_tags("k"))

    assert outcome_of(instance, "k") == RunOutcome(
        failed.run_id, finished=True, reason="its ledger failed a blocking check"
    )


def test_a_run_whose_round_has_no_folder_failed_for_the_round(
    layout: DemoLayout, instance: DagsterInstance, ledger_root: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    resources = round_resources(layout, ledger_root, rounds_root=tmp_path / "empty")
    failed = materialize_round(instance, resources, SMALL, tags=sensor_tags("k"))

    outcome = outcome_of(instance, "k")
    assert (outcome.run_id, outcome.finished, outcome.may_pass) == (failed.run_id, True, False)
    assert outcome.reason == step_failures(failed)["round_manifest"]


@pytest.mark.parametrize(
    ("status", "tags", "expected"),
    [
        (DagsterRunStatus.NOT_STARTED, {}, RunOutcome("r", finished=False)),
        (DagsterRunStatus.STARTED, {}, RunOutcome("r", finished=False)),
        (DagsterRunStatus.SUCCESS, {}, RunOutcome("r", finished=True, succeeded=True)),
        (DagsterRunStatus.CANCELED, {}, RunOutcome("r", finished=True, reason="terminated")),
        (
            DagsterRunStatus.FAILURE,
            {"dagster/failure_reason": "UNEXPECTED_TERMINATION"},
            RunOutcome("r", finished=True, may_pass=True, reason="interrupted: unexpected termination"),
        ),
        (
            DagsterRunStatus.FAILURE,
            {"dagster/failure_reason": "JOB_INITIALIZATION_FAILURE"},
            RunOutcome("r", finished=True, reason="the run could not start"),
        ),
        (
            DagsterRunStatus.FAILURE,
            {},
            RunOutcome("r", finished=True, may_pass=True, reason="the run stopped outside its steps"),
        ),
        (DagsterRunStatus.FAILURE, {"dagster/will_retry": "true"}, RunOutcome("r", finished=False)),
    ],
    ids=[
        "not started",
        "started",
        "succeeded",
        "terminated",
        "process died",
        "could not start",
        "no step failed",
        "Dagster retries it",
    ],
)
def test_a_runs_status_and_failure_reason_say_how_it_stands(
    instance: DagsterInstance, status: DagsterRunStatus, tags: dict[str, str], expected: RunOutcome
) -> None:
    instance.add_run(
        DagsterRun(job_name="materialize_round", run_id="r", status=status, tags={**sensor_tags("k"), **tags})
    )

    assert outcome_of(instance, "k") == expected


def test_the_newest_run_of_a_run_key_stands_and_other_keys_are_left_out(instance: DagsterInstance) -> None:
    instance.add_run(
        DagsterRun(
            job_name="materialize_round", run_id="a", status=DagsterRunStatus.FAILURE, tags=sensor_tags("k")
        )
    )
    instance.add_run(
        DagsterRun(
            job_name="materialize_round", run_id="b", status=DagsterRunStatus.SUCCESS, tags=sensor_tags("k")
        )
    )
    instance.add_run(
        DagsterRun(
            job_name="materialize_round", run_id="c", status=DagsterRunStatus.SUCCESS, tags=sensor_tags("j")
        )
    )
    instance.add_run(
        DagsterRun(
            job_name="materialize_round",
            run_id="d",
            status=DagsterRunStatus.FAILURE,
            tags={"dagster/run_key": "k"},
        )
    )

    assert sensor_run_outcomes(instance, SENSOR_NAME, ["k"]) == {
        "k": RunOutcome("b", finished=True, succeeded=True)
    }
