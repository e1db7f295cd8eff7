"""`rollout_ledger`: the round's validated ledger, assembled from the stage files."""

from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.backfill import BackfillStats
from rollout_assets.backfill.gaps import GAP_KINDS
from rollout_assets.defs.assets.cells import campaign_cells
from rollout_assets.defs.assets.proposers import proposer_transcripts
from rollout_assets.defs.assets.workers import worker_sessions
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.stages import write_rollout_ledger
from rollout_assets.stages.memory import return_freed_memory


def role_and_gap_metadata(stats: BackfillStats) -> dict[str, Any]:
    """Lines per role and per gap reason, as numbers the UI plots across rounds."""
    metadata: dict[str, Any] = {
        f"lines_{role}": stats.by_role.get(role, 0) for role in ("supervisor", "worker", "proposer", "agent")
    }
    metadata.update({f"gap_{kind}": stats.by_gap_kind.get(kind, 0) for kind in GAP_KINDS})
    return metadata


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[campaign_cells, worker_sessions, proposer_transcripts],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def rollout_ledger(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The validated tangle.rollout.v1 ledger of one round, one line per agent invocation."""
    key = context.partition_key
    return_freed_memory()  # of the steps before
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
        stats = write_rollout_ledger(outputs, locations.opencode.db_path, locations.claude.path)
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(outputs.ledger)),
            "lines": stats.lines,
            "gap_lines": stats.gap_lines,
            "full_transcripts": stats.full_transcripts,
            "reward_labeled": stats.reward_labeled,
            **role_and_gap_metadata(stats),
            "dagster/row_count": stats.lines,
        }
    )
