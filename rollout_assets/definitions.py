"""The one place that binds the Dagster layer together.

Loaded by `dagster dev` (through `workspace.yaml` or `[tool.dagster]` in pyproject.toml)
and by `dagster asset materialize -m rollout_assets.definitions`.
"""

from __future__ import annotations

import os

from dagster import Definitions, EnvVar, multiprocess_executor

from rollout_assets.defs.assets import EXTERNAL_INPUTS, ROUND_ASSETS
from rollout_assets.defs.checks import ROUND_CHECKS
from rollout_assets.defs.jobs import materialize_round, materialize_summary
from rollout_assets.defs.resources import ClaudeProjects, LedgerRoot, OpencodeDatabase, RoundsRoot
from rollout_assets.defs.sensors import RoundDiscovery, round_dirs_sensor
from rollout_assets.defs.summary import rounds_summary
from rollout_assets.sources.claude import DEFAULT_CLAUDE_PROJECTS_DIR
from rollout_assets.sources.opencode import DEFAULT_OPENCODE_DB


def _env_or_default(variable: str, default: str) -> str | EnvVar:
    """The environment variable when it is set (resolved at run time, shown in the UI), else the default."""
    return EnvVar(variable) if os.environ.get(variable) else default


def build_resources() -> dict[str, object]:
    return {
        "rounds_root": RoundsRoot(root_dir=_env_or_default("ROLLOUT_ROUNDS_ROOT", "./rounds")),
        "opencode": OpencodeDatabase(path=_env_or_default("OPENCODE_DB", DEFAULT_OPENCODE_DB)),
        "claude": ClaudeProjects(projects_dir=_env_or_default("CLAUDE_PROJECTS_DIR", DEFAULT_CLAUDE_PROJECTS_DIR)),
        "ledger_root": LedgerRoot(root_dir=_env_or_default("ROLLOUT_LEDGER_ROOT", "./ledgers")),
        "round_discovery": RoundDiscovery(
            quiet_period_seconds=int(os.environ.get("ROLLOUT_QUIET_PERIOD_SECONDS", "120"))
        ),
    }


# One process per step, as Dagster's default, but forked from a server that has already
# imported the definitions: a step then starts in milliseconds instead of re-importing
# Dagster and pandas for seconds.
executor = multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["rollout_assets.definitions"]}}}
)

defs = Definitions(
    assets=[*EXTERNAL_INPUTS, *ROUND_ASSETS, rounds_summary],
    asset_checks=ROUND_CHECKS,
    jobs=[materialize_round, materialize_summary],
    sensors=[round_dirs_sensor],
    resources=build_resources(),
    executor=executor,
)


def materialize_round_job():
    """The `materialize_round` job, for `reconstructable()`: a run on the multiprocess executor
    must be able to import its job definition again in each step process."""
    return defs.resolve_job_def("materialize_round")
