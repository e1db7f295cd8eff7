"""Jobs: `materialize_round` runs every asset (and check) of one round."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetSelection, DagsterInstance, DagsterRunStatus, RunsFilter, define_asset_job

from rollout_assets.defs.assets import ROUNDS_GROUP

materialize_round = define_asset_job(
    "materialize_round",
    selection=AssetSelection.groups(ROUNDS_GROUP),
    description="Materialize and check every asset of one round (one `rounds` partition).",
)

materialize_summary = define_asset_job(
    "materialize_summary",
    selection=AssetSelection.groups("summary"),
    description="Rebuild the cross-round overview from every round's stats.",
)

# The statuses in which the run queue counts a run against its round's limit.
RUNNING_STATUSES = (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING)
# Every status of a run that may still write a round's outputs: a queued run reads the
# round's inputs only when it starts.
UNFINISHED_STATUSES = (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.QUEUED, *RUNNING_STATUSES)


def round_run(instance: DagsterInstance, key: str, statuses: Sequence[DagsterRunStatus]) -> str | None:
    """The id of a run of round `key` (sensor, UI, command line) in one of `statuses`, if any."""
    records = instance.get_run_records(
        RunsFilter(tags={"dagster/partition": key}, statuses=list(statuses)), limit=1
    )
    return records[0].dagster_run.run_id if records else None
