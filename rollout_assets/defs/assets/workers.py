"""`worker_sessions`: the worker lines of the round, joined from the opencode store."""

from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.backfill import BackfillStats
from rollout_assets.defs.assets.cells import campaign_cells
from rollout_assets.defs.assets.inputs import opencode_db
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import run_created_at
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import OpencodeDatabase, RoundLocations
from rollout_assets.stages import RoundOutputs, write_worker_sessions
from rollout_assets.stages.memory import return_freed_memory


def _metadata(stats: BackfillStats, outputs: RoundOutputs, opencode: OpencodeDatabase) -> dict[str, Any]:
    return {
        "path": MetadataValue.path(str(outputs.worker_sessions)),
        "lines": stats.lines,
        "sessions_joined": stats.worker_sessions_joined,
        "cwds_missed": stats.worker_cwds_missed,
        "sessions_empty": stats.worker_sessions_empty,
        "gap_lines": stats.gap_lines,
        "opencode_db": MetadataValue.path(str(opencode.db_path)),
        "opencode_db_available": stats.opencode_db_available,
        "dagster/row_count": stats.lines,
    }


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[campaign_cells, opencode_db],
    kinds={"python", "sqlite", "jsonl"},
    owners=OWNERS,
)
def worker_sessions(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The worker lines of one round, joined from the opencode store, gap lines included."""
    key, opencode = context.partition_key, locations.opencode
    unavailable = opencode.unavailable_reason()
    if unavailable:
        context.log.warning(unavailable)
    return_freed_memory()  # of the steps before
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
        captured_at = run_created_at(context.instance, context.run.run_id)
        stats = write_worker_sessions(outputs, opencode.db_path, captured_at, context.log.info)
    if unavailable is None and not stats.opencode_db_available:
        context.log.warning(
            f"opencode database {opencode.db_path} could not be read: worker lines are gap lines"
        )
    return MaterializeResult(metadata=_metadata(stats, outputs, opencode))
