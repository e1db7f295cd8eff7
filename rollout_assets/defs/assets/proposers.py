"""`proposer_transcripts`: the proposer lines of the round, joined to Claude Code transcripts."""

from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.backfill import BackfillStats
from rollout_assets.defs.assets.inputs import claude_projects, round_outdir
from rollout_assets.defs.assets.manifest import round_manifest
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import run_created_at
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import ClaudeProjects, RoundLocations
from rollout_assets.stages import RoundOutputs, write_proposer_transcripts


def _metadata(
    stats: BackfillStats, outputs: RoundOutputs, claude: ClaudeProjects, available: bool
) -> dict[str, Any]:
    return {
        "path": MetadataValue.path(str(outputs.proposer_transcripts)),
        "lines": stats.lines,
        "shots_joined": stats.proposer_shots_joined,
        "shots_missed": stats.proposer_shots_missed,
        "transcripts_empty": stats.proposer_transcripts_empty,
        "claude_projects": MetadataValue.path(str(claude.path)),
        "claude_projects_available": available,
        "dagster/row_count": stats.lines,
    }


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_manifest, round_outdir, claude_projects],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def proposer_transcripts(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The proposer lines of one round, joined to Claude Code transcripts by time window."""
    key, claude = context.partition_key, locations.claude
    unavailable = claude.unavailable_reason()
    if unavailable:
        context.log.warning(unavailable)
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
        captured_at = run_created_at(context.instance, context.run.run_id)
        stats = write_proposer_transcripts(outputs, claude.path, captured_at)
    return MaterializeResult(metadata=_metadata(stats, outputs, claude, available=unavailable is None))
