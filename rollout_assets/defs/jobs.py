"""Jobs: `materialize_round` runs every asset (and check) of one round."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

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
