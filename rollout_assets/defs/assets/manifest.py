"""`round_manifest`, the first stage: what the round holds, and the fingerprint of the inputs it read."""

from pathlib import Path
from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.defs.assets.inputs import round_outdir
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import run_input_fingerprint
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.sources.fingerprint import input_digest
from rollout_assets.sources.round import RoundManifest
from rollout_assets.stages import RoundOutputs, write_manifest
from rollout_assets.stages.memory import return_freed_memory


def _input_fingerprint(context: AssetExecutionContext, out_dir: Path) -> str | None:
    """The fingerprint of the round's inputs this run reads, as the sensor computes it: the one
    the run was requested for (by the sensor or `rollout-assets materialize`), else taken now,
    before the manifest reads anything. rollout_stats records it, and the sensor then does not
    run the same inputs again after a run started from the UI or `dagster asset materialize`.
    A file changed after it was taken makes the sensor run the round again, never less."""
    requested_for = run_input_fingerprint(context.run)
    if requested_for:
        return requested_for
    try:
        return input_digest(out_dir)
    except (OSError, ValueError):  # RoundInputError included: the manifest stage fails saying why
        return None


def _candidates_table(manifest: RoundManifest) -> str:
    rows = [
        "| candidate | generation | commit | cells | reps | resolved | cached | shots | cost USD |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in manifest.entries:
        commit = entry.commit[:10] if entry.commit else "—"
        rows.append(
            f"| {entry.candidate_id} | {entry.generation} | `{commit}` | {len(entry.cells)} | {entry.reps} "
            f"| {entry.resolved_count}/{len(manifest.instances)} | {entry.cells_cached} "
            f"| {len(entry.shot_receipt_paths)} | {entry.cost['costUsd']:.4f} |"
        )
    return "\n".join(rows)


def _metadata(manifest: RoundManifest, outputs: RoundOutputs, out_dir: Path) -> dict[str, Any]:
    cells = sum(len(entry.cells) for entry in manifest.entries)
    return {
        "path": MetadataValue.path(str(outputs.manifest)),
        "out_dir": MetadataValue.path(str(out_dir)),
        "run_id": manifest.run_id,
        "instances": len(manifest.instances),
        "campaigns": len(manifest.entries),
        "generations": len({entry.generation for entry in manifest.entries if not entry.is_baseline}),
        "cells": cells,
        "shot_receipts": sum(len(entry.shot_receipt_paths) for entry in manifest.entries),
        "settled_cost_calls": manifest.settled_call_ids,
        "candidates": MetadataValue.md(_candidates_table(manifest)),
        "dagster/row_count": cells,
    }


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_outdir],
    kinds={"python", "json"},
    owners=OWNERS,
)
def round_manifest(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The manifest of one round: generations, candidates, commits, resolved counts and cost."""
    key = context.partition_key
    return_freed_memory()  # of the steps before
    with round_errors_fail_the_step(key):
        out_dir = locations.round_dir(key)
        outputs = locations.writable_outputs(key)
        manifest = write_manifest(out_dir, outputs, _input_fingerprint(context, out_dir))
    return MaterializeResult(metadata=_metadata(manifest, outputs, out_dir))
