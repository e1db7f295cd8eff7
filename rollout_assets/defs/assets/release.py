"""`dataset_release` (group `release`, not partitioned): one scrubbed, split dataset from the
training data of several rounds, written to `<ledger root>/releases/<name>/` (docs/release.md)."""

from pathlib import Path
from typing import Any

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from rollout_assets.defs.constants import OWNERS, RELEASE_GROUP, TRAINING_DATASETS
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import blocking_checks, ledger_checks, round_partitions
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.release import ReleaseConfig, RoundInput, build_release
from rollout_assets.release.allowlist import read_allowlist
from rollout_assets.release.target import RELEASES_FOLDER
from rollout_assets.training.files import TrainingFiles
from rollout_assets.training.verify import CHECKS


class ReleaseAssetConfig(Config):
    """What to release and how (docs/release.md, What it takes). Strict: a value of another type
    (`test_fraction: "0.1"`, a string of host names) is refused, never converted."""

    license: str = Field(description="the dataset's license, an SPDX id; required", strict=True)
    name: str = Field(default="rollout-dataset", description="the release's folder name", strict=True)
    rounds: list[str] = Field(
        default=[], description="rounds to include (default: every round whose checks passed)", strict=True
    )
    split_unit: str = Field(default="instance", description="instance or repository", strict=True)
    test_fraction: float = Field(default=0.1, description="share of split keys in the test split", strict=True)
    host_names: list[str] = Field(default=[], description="host names to replace with <HOST>", strict=True)
    allow_file: str = Field(
        default="", description="a file of finding hashes a person checked and allows, one a line (none by default)"
    )


def rounds_ready(context: AssetExecutionContext) -> list[str]:
    """The rounds whose latest ledger and training data passed every blocking check."""
    keys = round_partitions(context.instance)
    ready = {key for key, checks in ledger_checks(context.instance, keys).items() if checks.passed}
    for dataset, asset_key in TRAINING_DATASETS.items():
        verdicts = blocking_checks(context.instance, asset_key, CHECKS[dataset], sorted(ready))
        ready = {key for key, checks in verdicts.items() if checks.passed}
    return sorted(ready)


def _round_inputs(context: AssetExecutionContext, config: ReleaseAssetConfig, locations: RoundLocations) -> list[RoundInput]:
    keys = config.rounds or rounds_ready(context)
    if not keys:
        raise Failure(
            description="no round to release: no round's ledger and training data have passed their checks; "
            "materialize the rounds (with the training group) first, or name rounds in the config"
        )
    if RELEASES_FOLDER in keys:
        raise Failure(description=f"a round named {RELEASES_FOLDER!r} would share the releases' folder; rename it")
    inputs = []
    for key in keys:
        outputs = locations.outputs(key)
        inputs.append(RoundInput(key, outputs.ledger, TrainingFiles(outputs.training)))
    return inputs


def _metadata(manifest: dict[str, Any], path: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "path": MetadataValue.path(path),
        "rounds": MetadataValue.json([entry["round"] for entry in manifest["rounds"]]),
        "license": manifest["license"],
        "scrubbed": MetadataValue.json(manifest["scrubbed"]),
        "scrubbed_total": sum(manifest["scrubbed"].values()),
        "dagster/row_count": sum(sum(splits.values()) for splits in manifest["rows"].values()),
    }
    for kind, splits in manifest["rows"].items():
        metadata.update({f"{kind}_{split}": count for split, count in splits.items()})
    return metadata


@asset(
    group_name=RELEASE_GROUP,
    deps=[AssetDep(key, partition_mapping=AllPartitionMapping()) for key in TRAINING_DATASETS.values()],
    kinds={"python", "parquet"},
    owners=OWNERS,
)
def dataset_release(
    context: AssetExecutionContext, config: ReleaseAssetConfig, locations: RoundLocations
) -> MaterializeResult:
    """A releasable dataset across rounds: split by instance, scrubbed, with a dataset card."""
    with round_errors_fail_the_step():
        locations.check_ledger_root()
        release_config = ReleaseConfig(
            license=config.license,
            name=config.name,
            split_unit=config.split_unit,
            test_fraction=config.test_fraction,
            host_names=tuple(config.host_names),
            allowed=read_allowlist(Path(config.allow_file)) if config.allow_file else frozenset(),
        )
        folder = locations.ledger_root.path / RELEASES_FOLDER / release_config.name
        for place in (folder.parent, folder):
            locations.refuse_among_inputs(place, f"the release folder {place}")
        manifest = build_release(_round_inputs(context, config, locations), folder, release_config)
    return MaterializeResult(metadata=_metadata(manifest, str(folder)))
