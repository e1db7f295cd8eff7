"""A releasable dataset across rounds: splits without leakage, every string scrubbed, an
independent scan proving it, a dataset card. No Dagster here; docs/release.md."""

from rollout_assets.release.build import RoundInput
from rollout_assets.release.config import ReleaseConfig, ReleaseError, load_config_file
from rollout_assets.release.release import ReleaseCheckFailed, build_release

__all__ = ["ReleaseCheckFailed", "ReleaseConfig", "ReleaseError", "RoundInput", "build_release", "load_config_file"]
