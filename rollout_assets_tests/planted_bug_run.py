"""One run of a demo round through Dagster, for test_planted_bugs.py: the round's assets and
checks, its training data and checks, then a release of it with the release checks, all on an
ephemeral instance. Prints one JSON object: every check's verdict (with its first problem) and
every failed step.

Run as `python -m rollout_assets_tests.planted_bug_run DEMO_ROOT LEDGER_ROOT ROUND` from a
copy of the project whose code carries a planted bug; the demo's files were written by the
unchanged code, so only the pipeline under test differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dagster import AssetSelection, DagsterInstance, ExecuteInProcessResult, materialize

import rollout_assets
from rollout_assets.defs.assets.release import dataset_release
from rollout_assets.defs.assets.training import TRAINING_ASSETS
from rollout_assets.defs.release_checks import RELEASE_ASSET_CHECKS
from rollout_assets.defs.training_checks import TRAINING_CHECKS
from rollout_assets.demo import DemoLayout
from rollout_assets_tests.dagster_rounds import (
    ALL_ROUND_DEFS,
    evaluations,
    materialize_round,
    round_resources,
    step_failures,
)

ROUND_AND_TRAINING = [*ALL_ROUND_DEFS, *TRAINING_ASSETS, *TRAINING_CHECKS]
RELEASE_CONFIG = {"ops": {"dataset_release": {"config": {"license": "cc-by-4.0", "test_fraction": 0.3}}}}


def _first_problem(metadata: dict[str, Any]) -> str | None:
    for key in ("problems", "sample", "details"):
        entry = metadata.get(key)
        if entry is not None:
            value = entry.value
            return str(value[0] if isinstance(value, list) and value else value)[:400]
    return None


def _verdicts(result: ExecuteInProcessResult, into: dict[str, Any]) -> None:
    for name, evaluation in evaluations(result).items():
        into["checks"][name] = {
            "passed": evaluation.passed,
            "blocking": evaluation.severity.value == "ERROR",
            "problem": _first_problem(evaluation.metadata),
        }
    into["step_failures"].update(step_failures(result))


def run(demo_root: Path, ledger_root: Path, round_name: str) -> dict[str, Any]:
    layout = DemoLayout(
        root=demo_root,
        rounds_root=demo_root / "rounds",
        opencode_db=demo_root / "opencode.db",
        claude_projects_dir=demo_root / "claude-projects",
        rounds=(demo_root / "rounds" / round_name,),
    )
    resources = round_resources(layout, ledger_root)
    found: dict[str, Any] = {"code": rollout_assets.__file__, "checks": {}, "step_failures": {}}
    with DagsterInstance.ephemeral() as instance:
        _verdicts(materialize_round(instance, resources, round_name), found)
        training = materialize(
            ROUND_AND_TRAINING, selection=AssetSelection.groups("training"), partition_key=round_name,
            instance=instance, resources=resources, raise_on_error=False,
        )  # fmt: skip
        _verdicts(training, found)
        release = materialize(
            [*ROUND_AND_TRAINING, dataset_release, *RELEASE_ASSET_CHECKS],
            selection=AssetSelection.assets("dataset_release"), instance=instance, resources=resources,
            run_config=RELEASE_CONFIG, raise_on_error=False,
        )  # fmt: skip
        _verdicts(release, found)
    return found


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])))
