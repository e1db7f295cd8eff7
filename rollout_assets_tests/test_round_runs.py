"""Runs of one round, on a real SQLite-backed instance: the verdicts a round's stats are judged
on when another run of the round failed. Runs are in process (`materialize`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, instance_for_test

from rollout_assets import audit
from rollout_assets.defs.assets import rollout_stats
from rollout_assets.defs.instance import ledger_checks
from rollout_assets.demo import DemoLayout
from rollout_assets_tests.dagster_rounds import (
    SMALL_SPEC,
    lose_a_worker_line_in_the_ledger_stage,
    materialize_round,
    round_resources,
    step_failures,
    write_rounds,
)

SMALL = SMALL_SPEC.name
BLOCKING = [
    "every_cell_has_one_supervisor_line",
    "every_line_is_its_invocation_in_order",
    "every_shot_receipt_has_one_proposer_line",
    "every_worker_session_accounted_for",
    "ledger_lines_valid_and_linked",
]


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
