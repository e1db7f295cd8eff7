"""Sensors: `round_dirs_sensor` discovers new and changed rounds under the rounds root and
materializes them (its decision is `rollout_assets.discovery.plan_tick`);
`rounds_summary_automation` keeps the summary up to date."""

import time

from dagster import (
    AssetObservation,
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from rollout_assets.defs.constants import ROUND_OUTDIR
from rollout_assets.defs.instance import (
    materialized_fingerprint,
    round_partitions,
    sensor_run_keys,
    sensor_run_outcomes,
)
from rollout_assets.defs.jobs import materialize_round
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import (
    RoundDiscovery,
    RoundsRoot,
    list_round_dirs,
    seconds_from_environment,
)
from rollout_assets.defs.summary import rounds_summary
from rollout_assets.discovery import (
    SENSOR_NAME,
    RetryPolicy,
    RoundRequest,
    fingerprint_rounds,
    plan_tick,
    read_cursor,
)
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT_TAG

SENSOR_INTERVAL_SECONDS = seconds_from_environment("ROLLOUT_SENSOR_INTERVAL_SECONDS", 60, minimum=1)

# The tag of a run that retries the same inputs after a failure that may pass: its number.
RETRY_TAG = "rollout/retry"


def _run_request(request: RoundRequest) -> RunRequest:
    tags = {INPUT_FINGERPRINT_TAG: request.fingerprint.digest}
    if request.retry:
        tags[RETRY_TAG] = str(request.retry)
    return RunRequest(partition_key=request.key, run_key=request.run_key, tags=tags)


def _observation(request: RoundRequest) -> AssetObservation:
    fingerprint = request.fingerprint
    return AssetObservation(
        asset_key=ROUND_OUTDIR,
        partition=request.key,
        metadata={
            "fingerprint": fingerprint.digest,
            "input_files": fingerprint.files,
            "cells": fingerprint.cells,
            "shot_receipts": fingerprint.shot_receipts,
            "newest_input_mtime": request.last_written,
            "out_dir": str(request.out_dir),
        },
    )


@sensor(
    name=SENSOR_NAME,
    job=materialize_round,
    minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description="Discovers new and changed round directories and materializes them.",
)
def round_dirs_sensor(
    context: SensorEvaluationContext, rounds_root: RoundsRoot, round_discovery: RoundDiscovery
) -> SensorResult | SkipReason:
    """Discovers rounds under the rounds root and requests `materialize_round` for each new or changed one.

    A round is a directory under the rounds root holding `improve-run/` or `proposer-shots/`; its
    name is its `rounds` partition key (a name that cannot be one is skipped with a log line).
    Its fingerprint hashes the size and modification time of every file the backfill reads. A
    new or changed round gets a run keyed `<round>:<fingerprint>:<n>` and an observation of its
    `round_outdir` once its inputs have been quiet for the quiet period. A round whose run failed
    for a reason that may pass (another run held the round, a busy store, an interrupted run) is
    retried with the same inputs, a few times at most, after a growing delay (`RoundDiscovery`);
    one whose run failed for its inputs waits until they change. The cursor holds the
    fingerprint last requested and the request count by round, the rounds gone, the requests
    whose run has not been seen to end, and the retries; a cursor of another shape stops the
    tick (CursorError, saying to delete it). The whole policy: `rollout_assets.discovery`.
    """
    cursor = read_cursor(context.cursor)
    dirs = list_round_dirs(rounds_root.path, context.log)
    if dirs.root_problem is not None:
        # Not "every round disappeared": nothing is known of them until the root can be listed.
        context.log.warning(dirs.root_problem)
        return SkipReason(dirs.root_problem)
    instance = context.instance
    plan = plan_tick(
        fingerprint_rounds(dirs, context.log.warning),
        cursor,
        partitions=set(round_partitions(instance)),
        now=time.time(),
        quiet_period=round_discovery.quiet_period_seconds,
        materialized=lambda key: materialized_fingerprint(instance, key),
        run_keys=lambda: sensor_run_keys(instance, SENSOR_NAME),
        outcomes=lambda run_keys: sensor_run_outcomes(instance, SENSOR_NAME, run_keys),
        retry_policy=RetryPolicy(round_discovery.max_retries, round_discovery.retry_backoff_seconds),
    )
    for level, message in plan.log:
        context.log.log(level, message)
    if plan.skip_reason is not None:
        context.update_cursor(plan.cursor)
        return SkipReason(plan.skip_reason)
    added = [ROUNDS.build_add_request(plan.new_partitions)] if plan.new_partitions else []
    return SensorResult(
        run_requests=[_run_request(request) for request in plan.requests],
        dynamic_partitions_requests=added,
        asset_events=[_observation(request) for request in plan.requests],
        cursor=plan.cursor,
    )


# Dagster's own automation sensor is stopped until someone turns it on in the UI, and the
# summary is the one asset with an automation condition: this one runs from the start.
rounds_summary_automation = AutomationConditionSensorDefinition(
    "rounds_summary_automation",
    target=AssetSelection.assets(rounds_summary),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
    description="Rebuilds rounds_summary after any round's rollout_stats is materialized.",
)
