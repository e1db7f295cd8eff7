"""Names shared across the Dagster layer: asset groups, owners, the keys of the assets that
other modules (checks, instance queries, the sensor) refer to without importing their
definitions, and the names of the ledger's blocking checks."""

from __future__ import annotations

from dagster import AssetKey

ROUNDS_GROUP = "rounds"
SOURCES_GROUP = "sources"
SUMMARY_GROUP = "summary"
TRAINING_GROUP = "training"
RELEASE_GROUP = "release"
INSPECT_GROUP = "inspect"
OWNERS = ["team:rollouts"]

ROUND_OUTDIR = AssetKey("round_outdir")
CAMPAIGN_CELLS = AssetKey("campaign_cells")
ROLLOUT_LEDGER = AssetKey("rollout_ledger")
ROLLOUT_STATS = AssetKey("rollout_stats")
SFT_ROWS = AssetKey("sft_rows")
PREFERENCE_PAIRS = AssetKey("preference_pairs")
GRPO_GROUPS = AssetKey("grpo_groups")
DATASET_RELEASE = AssetKey("dataset_release")
TRAINING_DATASETS = {"sft_rows": SFT_ROWS, "preference_pairs": PREFERENCE_PAIRS, "grpo_groups": GRPO_GROUPS}

# The blocking checks of `rollout_ledger` (defined in `rollout_assets.defs.checks`), whose
# verdicts `rollout_stats` and the summary ask the instance for. By name, so that asking does not
# import the checks: defining them warns that partitioned checks are a preview, which
# `rollout-assets materialize` silences only once it runs. test_defs keeps the two in step.
LEDGER_BLOCKING_CHECKS = (
    "every_cell_has_one_supervisor_line",
    "every_gap_is_warranted",
    "every_line_is_its_invocation_in_order",
    "every_shot_receipt_has_one_proposer_line",
    "every_usage_is_its_transcripts",
    "every_worker_session_accounted_for",
    "ledger_lines_valid_and_linked",
)

# The metadata entry, on a step's Failure, that says the failure may pass: nothing is wrong with
# the round (another run holds it, a store is busy), so the sensor retries its run.
MAY_PASS = "may_pass"
