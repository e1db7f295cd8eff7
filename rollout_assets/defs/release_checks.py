"""The blocking checks of `dataset_release`, each recounting from the written files
(`rollout_assets.release.verify`): no instance in both splits, no secret left (every rule and
detect-secrets plugin again), a card and manifest that state what the files hold, and no row
written twice."""

from pathlib import Path

from dagster import AssetCheckExecutionContext, AssetCheckResult, MetadataValue, asset_check

from rollout_assets.defs.constants import DATASET_RELEASE
from rollout_assets.defs.instance import latest_metadata
from rollout_assets.release.verify import RELEASE_CHECKS, ReleaseVerdict

_DESCRIPTIONS = {
    "release_splits_do_not_overlap": "No instance (or repository, as the release was split) is in both train and test.",
    "release_has_no_secrets": "Every scrubbing rule and every text plugin of detect-secrets finds nothing in the "
    "data files, the card, the manifest or the scrub report but the values the release allows.",
    "release_card_matches_files": "Each data file's rows and sha256 are the manifest's, and the card states the "
    "rows, instances and SFT tokens the files hold, counted from the files.",
    "release_rows_are_distinct": "No two rows of a kind are the same apart from their metadata.",
}


def _release_check(name: str):
    @asset_check(asset=DATASET_RELEASE, name=name, blocking=True, description=_DESCRIPTIONS[name])
    def _check(context: AssetCheckExecutionContext) -> AssetCheckResult:
        path = latest_metadata(context.instance, DATASET_RELEASE, "path")
        if path is None or not Path(path).is_dir():
            verdict = ReleaseVerdict(passed=False, problems=[f"no release folder to check ({path})"])
        else:
            verdict = RELEASE_CHECKS[name](Path(path))
        return AssetCheckResult(
            passed=verdict.passed,
            metadata={"path": str(path), **verdict.counts, "problems": MetadataValue.json(verdict.problems)},
        )

    return _check


RELEASE_ASSET_CHECKS = [_release_check(name) for name in RELEASE_CHECKS]
