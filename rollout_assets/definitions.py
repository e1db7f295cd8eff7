"""The one place that binds the Dagster layer together.

Loaded by `dagster dev` (through `workspace.yaml` or `[tool.dagster]` in pyproject.toml)
and by `dagster asset materialize -m rollout_assets.definitions`.
"""

from __future__ import annotations

import atexit
import gc
import os

from dagster import Definitions, EnvVar, in_process_executor

from rollout_assets.defs.assets import EXTERNAL_INPUTS, ROUND_ASSETS
from rollout_assets.defs.assets.release import dataset_release
from rollout_assets.defs.assets.training import TRAINING_ASSETS
from rollout_assets.defs.assets.viewing import inspect_logs
from rollout_assets.defs.checks import ROUND_CHECKS
from rollout_assets.defs.jobs import materialize_round, materialize_summary
from rollout_assets.defs.resources import (
    ClaudeProjects,
    LedgerRoot,
    OpencodeDatabase,
    RoundDiscovery,
    RoundLocations,
    RoundsRoot,
    seconds_from_environment,
)
from rollout_assets.defs.sensors import round_dirs_sensor, rounds_summary_automation
from rollout_assets.defs.summary import rounds_summary
from rollout_assets.defs.release_checks import RELEASE_ASSET_CHECKS
from rollout_assets.defs.training_checks import TRAINING_CHECKS
from rollout_assets.sources.claude import DEFAULT_CLAUDE_PROJECTS_DIR
from rollout_assets.sources.opencode import DEFAULT_OPENCODE_DB


def _env_or_default(variable: str, default: str) -> str | EnvVar:
    """The environment variable when it is set (resolved at run time, shown in the UI), else the default."""
    return EnvVar(variable) if os.environ.get(variable) else default


def build_resources() -> dict[str, object]:
    """The resources by key (the table in `rollout_assets.defs.resources`)."""
    locations = RoundLocations(
        rounds_root=RoundsRoot(root_dir=_env_or_default("ROLLOUT_ROUNDS_ROOT", "./rounds")),
        opencode=OpencodeDatabase(path=_env_or_default("OPENCODE_DB", DEFAULT_OPENCODE_DB)),
        claude=ClaudeProjects(
            projects_dir=_env_or_default("CLAUDE_PROJECTS_DIR", DEFAULT_CLAUDE_PROJECTS_DIR)
        ),
        ledger_root=LedgerRoot(root_dir=_env_or_default("ROLLOUT_LEDGER_ROOT", "./ledgers")),
    )
    return {
        "locations": locations,
        # The same objects again, on their own: the sensor lists the rounds root, and
        # `rollout-assets materialize` reads where the rounds and their ledgers are.
        "rounds_root": locations.rounds_root,
        "ledger_root": locations.ledger_root,
        "round_discovery": RoundDiscovery(
            quiet_period_seconds=seconds_from_environment("ROLLOUT_QUIET_PERIOD_SECONDS", 120, minimum=0)
        ),
    }


# The steps of a run execute one after another in the run's own process. The heavy stages
# spread their work over every core themselves (forked workers, see backfill/parallel.py),
# so a process per step would add start-up, a copy of the definitions and event traffic per
# step without using a core more; it cost about 5 s per run on a 12,000-cell round. Rounds
# still run in parallel: one run per round, as many at once as the run coordinator allows.
executor = in_process_executor

defs = Definitions(
    assets=[*EXTERNAL_INPUTS, *ROUND_ASSETS, *TRAINING_ASSETS, inspect_logs, dataset_release, rounds_summary],
    asset_checks=[*ROUND_CHECKS, *TRAINING_CHECKS, *RELEASE_ASSET_CHECKS],
    jobs=[materialize_round, materialize_summary],
    sensors=[round_dirs_sensor, rounds_summary_automation],
    resources=build_resources(),
    executor=executor,
)


# Every process that loads these definitions (a run, `dagster asset materialize`, the code
# server) walks all its objects for cycles several times as Python shuts down: about 0.6 s after
# a run. Objects frozen first are not walked; their memory goes with the process all the same.
atexit.register(gc.freeze)


def materialize_round_job():
    """The `materialize_round` job, for `reconstructable()`: a run launched with `execute_job`
    records where its job comes from, so the UI can re-execute it like any other run."""
    return defs.resolve_job_def("materialize_round")
