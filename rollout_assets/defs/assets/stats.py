"""`rollout_stats`: the counters of the round's ledger, written only for a ledger that passed its
blocking checks."""

from typing import Any

from dagster import AssetExecutionContext, Failure, MaterializeResult, MetadataValue, asset

from rollout_assets.backfill import BackfillStats
from rollout_assets.defs.assets.ledger import role_and_gap_metadata, rollout_ledger
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import (
    refuse_unless_ledger_checks_passed,
    round_errors_fail_the_step,
    round_failure,
)
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.errors import RoundError
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT
from rollout_assets.stages import RoundOutputs, write_rollout_stats


def stats_table(stats: dict[str, Any]) -> str:
    """The counters as Markdown: one table per role, one per gap reason, then the rest."""
    rewards, costs = stats["rewardByRole"], stats["costUsdByRole"]
    lines = ["| role | lines | rewards labeled | mean reward | cost USD |", "|---|---|---|---|---|"]
    for role, count in stats["byRole"].items():
        reward = rewards.get(role)
        # A sum that overflowed is stored as null: shown as a dash, like a missing one.
        mean = f"{reward['mean']:.3f}" if reward and reward["mean"] is not None else "—"
        usd = costs.get(role, {}).get("usd")
        cost = f"{usd:.4f}" if usd is not None else "—"
        lines.append(f"| {role} | {count} | {reward['labeled'] if reward else 0} | {mean} | {cost} |")
    lines += ["", "| gap reason | lines |", "|---|---|"]
    lines += [f"| {kind} | {count} |" for kind, count in stats["byGapReason"].items()]
    lines += ["", "| counter | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in stats.items() if not isinstance(value, dict)]
    return "\n".join(lines)


def _metadata(stats: BackfillStats, outputs: RoundOutputs, fingerprint: str | None) -> dict[str, Any]:
    return {
        # The inputs the ledger was built from, as its round_manifest recorded them. Not this run's
        # tag: a run of rollout_stats alone may be tagged with inputs the ledger was not built from.
        **({INPUT_FINGERPRINT: fingerprint} if fingerprint else {}),
        "path": MetadataValue.path(str(outputs.stats)),
        "lines": stats.lines,
        "full_transcripts": stats.full_transcripts,
        "gap_lines": stats.gap_lines,
        "reward_labeled": stats.reward_labeled,
        # No lines, no rate: a 0.0 would plot an empty round as a round without gaps.
        "gap_rate": stats.gap_lines / stats.lines if stats.lines else MetadataValue.null(),
        "worker_sessions_joined": stats.worker_sessions_joined,
        "worker_cwds_missed": stats.worker_cwds_missed,
        "worker_sessions_empty": stats.worker_sessions_empty,
        "proposer_shots_joined": stats.proposer_shots_joined,
        "proposer_shots_missed": stats.proposer_shots_missed,
        "proposer_transcripts_empty": stats.proposer_transcripts_empty,
        "cells_without_worker_list": stats.cells_without_worker_list,
        "opencode_db_available": stats.opencode_db_available,
        **role_and_gap_metadata(stats),
        "stats": MetadataValue.md(stats_table(stats.to_json())),
    }


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[rollout_ledger],
    kinds={"python", "json"},
    owners=OWNERS,
)
def rollout_stats(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The counters of one round's ledger, per role and per gap reason."""
    key = context.partition_key
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
    refuse_unless_ledger_checks_passed(context.instance, key, "writing stats")
    try:
        stats, recorded_fingerprint = write_rollout_stats(outputs)
    except RoundError as error:
        raise round_failure(error, key) from error
    except (OSError, ValueError) as error:
        raise Failure(
            description=f"round {key}: the stats of {outputs.ledger} cannot be written: {error}",
            metadata={"round": key, "error": type(error).__name__},
        ) from error
    return MaterializeResult(metadata=_metadata(stats, outputs, recorded_fingerprint))
