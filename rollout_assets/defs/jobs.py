"""Jobs: `materialize_round` runs every asset (and check) of one round, its training data and
Inspect logs included; `materialize_summary` rebuilds the cross-round overview."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from rollout_assets.defs.constants import INSPECT_GROUP, ROUNDS_GROUP, SUMMARY_GROUP, TRAINING_GROUP

materialize_round = define_asset_job(
    "materialize_round",
    selection=AssetSelection.groups(ROUNDS_GROUP, TRAINING_GROUP, INSPECT_GROUP),
    description=(
        "Materialize and check every asset of one round (one `rounds` partition), its training data "
        "and Inspect logs included."
    ),
)

materialize_summary = define_asset_job(
    "materialize_summary",
    selection=AssetSelection.groups(SUMMARY_GROUP),
    description="Rebuild the cross-round overview from every round's stats.",
)
