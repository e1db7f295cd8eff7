"""The training data of one round (group `training`): SFT rows, preference pairs and GRPO
groups from the round's ledger, and a report of what each took and dropped (docs/training.md).

The three datasets are one step (`training_datasets`): the ledger is scanned once for all of
them. A ledger whose blocking checks did not pass is not turned into training data.
"""

from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetSpec,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
    multi_asset,
)
from pydantic import Field

from rollout_assets.defs.constants import (
    OWNERS,
    ROLLOUT_LEDGER,
    TRAINING_DATASETS,
    TRAINING_GROUP,
)
from rollout_assets.defs.failures import refuse_unless_ledger_checks_passed, round_errors_fail_the_step
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.stages.memory import in_child_process
from rollout_assets.training import DROP_REASONS, TrainingFilter, export_training
from rollout_assets.training.export import read_report
from rollout_assets.training.filter import ROLES

_DESCRIPTIONS = {
    "sft_rows": "The SFT rows of one round: trainable transcripts above the minimum reward, in the chat shape.",
    "preference_pairs": "The preference pairs of one round: best against worst per instance and prompt.",
    "grpo_groups": "The GRPO groups of one round: the rewarded completions of each instance and prompt.",
}


class TrainingConfig(Config):
    """The training filter (docs/training.md, The filter)."""

    min_reward: float = Field(default=0.0, description="SFT keeps rewards strictly above it")
    roles: list[str] = Field(default=list(ROLES), description="roles that may become rows")
    per_instance_cap: int = Field(default=3, description="SFT rows per (role, instance), best reward first")
    margin: float = Field(default=0.05, description="least chosen - rejected reward of a pair")
    normalize_identifiers: bool = Field(
        default=True, description="replace each line's working folder, worker name, run folder and session ids by placeholders"
    )
    group_by: str = Field(default="prompt", description="pairs and groups join lines of one instance by: prompt or instance")
    max_tokens: int | None = Field(default=None, description="drop lines longer than this as too_long (default: no limit)")
    tokenizer: str | None = Field(
        default=None, description="a Hugging Face tokenizer.json that counts the tokens (default: the estimate)"
    )

    def training_filter(self) -> TrainingFilter:
        return TrainingFilter(
            min_reward=self.min_reward,
            roles=tuple(self.roles),
            per_instance_cap=self.per_instance_cap,
            margin=self.margin,
            normalize_identifiers=self.normalize_identifiers,
            group_by=self.group_by,
            max_tokens=self.max_tokens,
            tokenizer=self.tokenizer,
        )


def _dataset_metadata(report: Any, path: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "path": MetadataValue.path(path),
        "dagster/row_count": report.rows,
        "rows": report.rows,
        "lines": report.lines,
        "lines_in_rows": report.lines_in_rows,
        "dropped": sum(report.drops.values()),
    }
    metadata.update({f"drop_{reason}": report.drops.get(reason, 0) for reason in DROP_REASONS})
    if report.tokens is not None:
        metadata["tokens"] = report.tokens
    return metadata


@multi_asset(
    specs=[
        AssetSpec(
            key,
            deps=[ROLLOUT_LEDGER],
            group_name=TRAINING_GROUP,
            kinds={"python", "parquet"},
            owners=OWNERS,
            description=_DESCRIPTIONS[name],
        )
        for name, key in TRAINING_DATASETS.items()
    ],
    partitions_def=ROUNDS,
    can_subset=False,
)
def training_datasets(context: AssetExecutionContext, config: TrainingConfig, locations: RoundLocations):
    """SFT rows, preference pairs and GRPO groups of one round, from one scan of its ledger."""
    key = context.partition_key
    with round_errors_fail_the_step(key):
        settings = config.training_filter()
        outputs = locations.writable_outputs(key)
        refuse_unless_ledger_checks_passed(context.instance, key, "writing training data")
        # In a child: pyarrow and the per-line keys leave with it, so the training checks and
        # the round job's later steps do not start from them.
        export = in_child_process(export_training, outputs.ledger, outputs.training, key, settings)
    for name, asset_key in TRAINING_DATASETS.items():
        path = str(export.files.parquet(name))
        yield MaterializeResult(asset_key=asset_key, metadata=_dataset_metadata(export.reports[name], path))


@asset(
    partitions_def=ROUNDS,
    group_name=TRAINING_GROUP,
    deps=list(TRAINING_DATASETS.values()),
    kinds={"python", "markdown"},
    owners=OWNERS,
)
def training_report(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """What the training data of one round took from its ledger: rows and drops per reason."""
    key = context.partition_key
    with round_errors_fail_the_step(key):
        outputs = locations.outputs(key)
        report, markdown = read_report(outputs.training)
    metadata: dict[str, Any] = {"path": MetadataValue.path(str(outputs.training)), "report": MetadataValue.md(markdown)}
    for name, dataset in report["datasets"].items():
        metadata[f"{name}_rows"] = dataset["rows"]
        metadata[f"{name}_dropped"] = dataset["dropped"]
        metadata.update({f"{name}_drop_{reason}": count for reason, count in dataset["drops"].items()})
    return MaterializeResult(metadata=metadata)


TRAINING_ASSETS = [training_datasets, training_report]
