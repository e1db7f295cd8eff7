"""`campaign_cells`: every cell of the round, with its supervisor line, reward and worker cwds."""

from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.defs.assets.inputs import round_outdir
from rollout_assets.defs.assets.manifest import round_manifest
from rollout_assets.defs.constants import OWNERS, ROUNDS_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import run_created_at
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.stages import CellsSummary, RoundOutputs, write_campaign_cells
from rollout_assets.stages.memory import return_freed_memory


def _metadata(summary: CellsSummary, outputs: RoundOutputs) -> dict[str, Any]:
    return {
        "path": MetadataValue.path(str(outputs.campaign_cells)),
        "cells": summary.cells,
        "worker_cwds": summary.worker_cwds,
        "reward_labeled": summary.reward_labeled,
        "cells_without_worker_list": summary.cells_without_worker_list,
        "cells_per_candidate": MetadataValue.json(summary.by_candidate),
        "dagster/row_count": summary.cells,
    }


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_manifest, round_outdir],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def campaign_cells(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """The campaign cells of one round, each with its supervisor line, reward and worker cwds."""
    key = context.partition_key
    return_freed_memory()  # of the steps before
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
        captured_at = run_created_at(context.instance, context.run.run_id)
        summary = write_campaign_cells(locations.round_dir(key), outputs, captured_at, context.log.info)
    if summary.cells_without_worker_list:
        context.log.warning(
            f"{summary.cells_without_worker_list} cell(s) of round {key} have no readable result.json: "
            "their worker sessions cannot be listed"
        )
    return MaterializeResult(metadata=_metadata(summary, outputs))
