"""Every question the Dagster layer asks of the Dagster instance, on its public API: the rounds'
partitions, when a run was created, runs of a round still unfinished, the run keys of the
sensor's runs and how those runs ended, the input fingerprint of a round's latest
materialization, and the verdicts of the blocking checks on a round's latest ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetKey,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)

from rollout_assets.defs.constants import LEDGER_BLOCKING_CHECKS, MAY_PASS, ROLLOUT_LEDGER, ROLLOUT_STATS
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.discovery import RunOutcome
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT, INPUT_FINGERPRINT_TAG

# The tag's name on runs requested before it took the fingerprint's one name: such a run,
# queued or re-executed after an upgrade, still says which inputs it was requested for.
_EARLIER_FINGERPRINT_TAG = "rollout/fingerprint"

# The statuses in which the run queue counts a run against its round's limit.
RUNNING_STATUSES = (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING)
# Every status of a run that may still write a round's outputs: a queued run reads the
# round's inputs only when it starts.
UNFINISHED_STATUSES = (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, *RUNNING_STATUSES)

# The statuses of a check execution record (`dagster` does not export their enum), by value.
_PASSED = "SUCCEEDED"
_COMPLETED = {"SUCCEEDED", "FAILED"}


def round_partitions(instance: DagsterInstance) -> list[str]:
    """The partition keys of `rounds`, in the order they were added: one query."""
    return instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME)


def run_created_at(instance: DagsterInstance, run_id: str) -> str:
    """When the run was created, as the ledger's capture time: every stage of a run agrees."""
    record = instance.get_run_record_by_id(run_id)
    created = record.create_timestamp if record is not None else datetime.now(UTC)
    return created.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_input_fingerprint(run: DagsterRun) -> str | None:
    """The input fingerprint the run was requested for, from its tag (the sensor's and
    `rollout-assets materialize`'s runs carry one), or None. A re-execution (from the UI, or
    Dagster's automatic retries) carries its parent's tags, and with them the fingerprint of
    the inputs as they were when the parent was requested: it has none of its own."""
    if run.parent_run_id is not None:
        return None
    return run.tags.get(INPUT_FINGERPRINT_TAG) or run.tags.get(_EARLIER_FINGERPRINT_TAG) or None


def round_run(instance: DagsterInstance, key: str, statuses: Sequence[DagsterRunStatus]) -> str | None:
    """The id of a run of round `key` (sensor, UI, command line) in one of `statuses`, if any."""
    records = instance.get_run_records(
        RunsFilter(tags={"dagster/partition": key}, statuses=list(statuses)), limit=1
    )
    return records[0].dagster_run.run_id if records else None


def sensor_run_keys(instance: DagsterInstance, sensor_name: str) -> list[str]:
    """The run keys of the runs the sensor requested (Dagster tags each with the sensor's name
    and the request's run key)."""
    runs = instance.get_runs(RunsFilter(tags={"dagster/sensor_name": sensor_name}))
    return [run.tags.get("dagster/run_key", "") for run in runs]


# How a run that failed outside its steps failed (Dagster's `dagster/failure_reason` tag): its
# process died, never started, or was lost with the daemon that watched it. Interrupted.
_INTERRUPTED_RUNS = {"UNEXPECTED_TERMINATION", "START_TIMEOUT", "RUN_WORKER_RESTART"}
# What a step raises when its run is interrupted (SIGINT or SIGTERM to the run's process).
_INTERRUPTED_STEPS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt"}


def _step_failure_cause(entry: Any) -> tuple[bool, str]:
    """(whether the failure may pass, its sentence) of one STEP_FAILURE event."""
    data = entry.dagster_event.step_failure_data
    if data.user_failure_data is not None:  # a Failure: ours say when they may pass
        marked = data.user_failure_data.metadata.get(MAY_PASS)
        return marked is not None and marked.value is True, data.user_failure_data.description or ""
    error = data.error
    names = {error.cls_name, error.cause.cls_name if error.cause else None}
    if names & _INTERRUPTED_STEPS:
        return True, "interrupted"
    if "DagsterAssetCheckFailedError" in names:
        return False, "its ledger failed a blocking check"
    # Unexpected: a bug, which the same inputs meet again.
    first_line = error.message.strip().splitlines()[0] if error.message.strip() else ""
    return False, f"{error.cls_name}: {first_line}"


def _failed_run_outcome(instance: DagsterInstance, run: DagsterRun) -> RunOutcome:
    """How a failed run failed: it may pass when every step failure may, or when the run was
    interrupted outside its steps."""
    reason_tag = run.tags.get("dagster/failure_reason", "")
    if reason_tag in _INTERRUPTED_RUNS:
        reason = f"interrupted: {reason_tag.lower().replace('_', ' ')}"
        return RunOutcome(run.run_id, finished=True, may_pass=True, reason=reason)
    causes = [
        _step_failure_cause(entry)
        for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)
        if entry.dagster_event is not None
    ]
    if not causes:
        if reason_tag == "JOB_INITIALIZATION_FAILURE":  # its configuration, say: so it will again
            return RunOutcome(run.run_id, finished=True, reason="the run could not start")
        return RunOutcome(
            run.run_id, finished=True, may_pass=True, reason="the run stopped outside its steps"
        )
    lasting = [sentence for passing, sentence in causes if not passing]
    reason = lasting[0] if lasting else causes[0][1]
    return RunOutcome(run.run_id, finished=True, may_pass=not lasting, reason=reason)


def sensor_run_outcomes(
    instance: DagsterInstance, sensor_name: str, run_keys: Sequence[str]
) -> dict[str, RunOutcome]:
    """How the sensor's runs of `run_keys` stand, by run key: one query, and one more per failed
    run. A re-execution (from the UI, or Dagster's own run retries) carries its parent's run key:
    the newest run stands, and a failed run Dagster is about to retry itself is not finished."""
    records = instance.get_run_records(
        RunsFilter(tags={"dagster/sensor_name": sensor_name, "dagster/run_key": list(run_keys)})
    )
    outcomes: dict[str, RunOutcome] = {}
    for record in records:  # newest first
        run = record.dagster_run
        run_key = run.tags.get("dagster/run_key", "")
        if run_key in outcomes:
            continue
        if not run.is_finished or run.tags.get("dagster/will_retry") == "true":
            outcomes[run_key] = RunOutcome(run.run_id, finished=False)
        elif run.status == DagsterRunStatus.SUCCESS:
            outcomes[run_key] = RunOutcome(run.run_id, finished=True, succeeded=True)
        elif run.status == DagsterRunStatus.CANCELED:  # terminated by someone, who meant it
            outcomes[run_key] = RunOutcome(run.run_id, finished=True, reason="terminated")
        else:
            outcomes[run_key] = _failed_run_outcome(instance, run)
    return outcomes


def _latest_materialization(instance: DagsterInstance, asset: AssetKey, round_key: str) -> Any:
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset, asset_partitions=[round_key]), limit=1
    ).records
    return records[0] if records and records[0].asset_materialization is not None else None


def latest_metadata(instance: DagsterInstance, asset: AssetKey, name: str) -> Any:
    """The value of metadata entry `name` of the latest materialization of an unpartitioned
    asset, or None."""
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=asset), limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    entry = records[0].asset_materialization.metadata.get(name)
    return entry.value if entry is not None else None


def materialized_fingerprint(instance: DagsterInstance, round_key: str) -> str | None:
    """The input fingerprint of the round's ledger as it stands, when the instance knows it: the
    one recorded by the latest `rollout_stats` materialization (the run's tag, from the sensor or
    `rollout-assets materialize`; without one, what its round_manifest took), provided that

    - the latest `rollout_ledger` materialization is of the same run: a later run that
      replaced the ledger and then failed wrote the ledger of other inputs;
    - no run of the round is queued or in progress: it may be about to replace the ledger
      with the inputs of another moment (a round changed A -> B -> A while B's run executes).
    """
    stats = _latest_materialization(instance, ROLLOUT_STATS, round_key)
    if stats is None:
        return None
    ledger = _latest_materialization(instance, ROLLOUT_LEDGER, round_key)
    if ledger is None or ledger.run_id != stats.run_id:
        return None
    if round_run(instance, round_key, UNFINISHED_STATUSES) is not None:
        return None
    entry = stats.asset_materialization.metadata.get(INPUT_FINGERPRINT)
    return entry.value if entry is not None and isinstance(entry.value, str) else None


# -- the blocking checks of a round's ledger --------------------------------------


@dataclass(frozen=True)
class LedgerChecks:
    """What the instance recorded about the blocking checks of a round's latest ledger."""

    materialized: bool  # the round has a rollout_ledger materialization
    failed: tuple[str, ...]  # blocking checks whose evaluation of that ledger failed
    not_evaluated: tuple[str, ...]  # blocking checks not (yet) evaluated on that ledger

    @property
    def passed(self) -> bool:
        return self.materialized and not self.failed and not self.not_evaluated

    def problem(self) -> str:
        """Why the ledger is not known to pass its blocking checks, as part of a sentence."""
        if not self.materialized:
            return "its ledger is not materialized yet"
        if self.failed:
            return f"its ledger failed the blocking check(s) {', '.join(self.failed)}"
        return f"the blocking check(s) {', '.join(self.not_evaluated)} have not been evaluated on its latest ledger"


def _materialized(instance: DagsterInstance, asset: AssetKey, round_key: str) -> bool:
    records_filter = AssetRecordsFilter(asset_key=asset, asset_partitions=[round_key])
    return bool(instance.fetch_materializations(records_filter, limit=1).records)


def _verdicts_of_the_writing_run(
    instance: DagsterInstance, asset: AssetKey, round_key: str, names: Iterable[str]
) -> dict[str, bool]:
    """The verdicts (passed or not) of the checks `names` on the round's latest materialization
    of `asset`, by name, as the run that wrote it evaluated them; a check it did not evaluate
    is left out."""
    latest = _latest_materialization(instance, asset, round_key)
    if latest is None:
        return {}
    verdicts: dict[str, bool] = {}
    for entry in instance.all_logs(latest.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.event_specific_data if entry.dagster_event else None
        if not isinstance(evaluation, AssetCheckEvaluation):
            continue
        target = evaluation.target_materialization_data
        if (
            evaluation.asset_key == asset
            and evaluation.partition == round_key
            and evaluation.check_name in names
            and (target is None or target.storage_id == latest.storage_id)
        ):
            verdicts[evaluation.check_name] = evaluation.passed  # in order: the last one stands
    return verdicts


def _round_checks(
    instance: DagsterInstance,
    asset: AssetKey,
    round_key: str,
    blocking: list[AssetCheckKey],
    infos: dict[tuple, Any],
) -> LedgerChecks:
    found = [infos[round_key, check] for check in blocking if (round_key, check) in infos]
    # An evaluation's record knows the asset's latest materialization; without one, ask.
    if found:
        materialized = any(info.latest_materialization_storage_id is not None for info in found)
    else:
        materialized = _materialized(instance, asset, round_key)
    verdicts: dict[str, bool] = {}  # by check name; a check not evaluated on the latest one is left out
    planned: list[str] = []
    for check in blocking:
        info = infos.get((round_key, check))
        if info is None:
            continue
        status = info.latest_execution_status.value
        # Evaluated means: on the asset's latest materialization, not on an earlier one.
        if status in _COMPLETED and info.is_current:
            verdicts[check.name] = status == _PASSED
        elif status not in _COMPLETED:
            planned.append(check.name)
    if planned and materialized:
        # The latest record of these checks is a run's plan, never (or not yet) executed: a run
        # of the round that failed before its checks, or one still in progress. It says nothing
        # of the materialization as it stands, which the run that wrote it judged.
        verdicts.update(_verdicts_of_the_writing_run(instance, asset, round_key, planned))
    names = [check.name for check in blocking]
    failed = tuple(name for name in names if verdicts.get(name) is False)
    not_evaluated = tuple(name for name in names if name not in verdicts)
    return LedgerChecks(materialized, failed, not_evaluated)


def ledger_checks(instance: DagsterInstance, round_keys: Iterable[str]) -> dict[str, LedgerChecks]:
    """The blocking checks of each round's latest `rollout_ledger` materialization, as the
    instance recorded them (see `blocking_checks`)."""
    return blocking_checks(instance, ROLLOUT_LEDGER, LEDGER_BLOCKING_CHECKS, round_keys)


def blocking_checks(
    instance: DagsterInstance, asset: AssetKey, check_names: Iterable[str], round_keys: Iterable[str]
) -> dict[str, LedgerChecks]:
    """The checks `check_names` of each round's latest materialization of `asset`, as the
    instance recorded them: one query per check for all the rounds, one per round that no
    check evaluated, and two per round whose latest record of a check is another run's plan
    (a run of the round that failed before its checks): then the verdicts are those of the run
    that wrote the materialization."""
    round_keys = list(round_keys)
    if not round_keys:
        return {}
    blocking = [AssetCheckKey(asset, name) for name in sorted(check_names)]
    recorded = instance.event_log_storage.get_asset_check_partition_info(blocking, partition_keys=round_keys)
    infos = {(info.partition_key, info.check_key): info for info in recorded}
    return {key: _round_checks(instance, asset, key, blocking, infos) for key in round_keys}
