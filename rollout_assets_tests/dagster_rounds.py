"""Shared helpers of the Dagster-layer tests: demo rounds on disk, resources pointing at them,
materializations on a real instance, and small JSONL edits for breaking a ledger on purpose.

Nothing here is faked: rounds come from `rollout_assets.demo.write_demo` (real files, a real
SQLite store, real Claude transcripts), runs go through Dagster's `materialize` on the instance
the test passes in, and the expected ledger comes from the command-line backfill.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetMaterialization,
    AssetSelection,
    DagsterInstance,
    ExecuteInProcessResult,
    materialize,
)

from rollout_assets.backfill import RoundBackfill
from rollout_assets.defs.assets import EXTERNAL_INPUTS, ROUND_ASSETS
from rollout_assets.defs.checks import ROUND_CHECKS
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.defs.resources import ClaudeProjects, LedgerRoot, OpencodeDatabase, RoundLocations, RoundsRoot
from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout, RoundSpec, write_demo
from rollout_assets.ledger import write_ledger
from rollout_assets.training.verify import CHECKS as TRAINING_CHECKS

ROUND = "round-001"
# round-001 of the shipped demo: 30 cells, every edge case planted, 4 shot receipts.
ROUND_SPEC: RoundSpec = DEFAULT_ROUNDS[0]
# A second, tiny round without edge cases, for tests that need more than one round.
SMALL_SPEC = RoundSpec(
    name="round-002",
    instances=1,
    reps=1,
    generations=1,
    candidates_per_generation=1,
    workers_per_cell=1,
    steps_per_session=1,
    edge_cases=False,
    seed=7,
)

ALL_ROUND_DEFS = [*EXTERNAL_INPUTS, *ROUND_ASSETS, *ROUND_CHECKS]
CHECK_NAMES = {
    "every_cell_has_one_supervisor_line",
    "every_worker_session_accounted_for",
    "every_shot_receipt_has_one_proposer_line",
    "every_line_is_its_invocation_in_order",
    "every_gap_is_warranted",
    "every_usage_is_its_transcripts",
    "ledger_lines_valid_and_linked",
    "stats_reconcile_with_ledger",
    "every_cell_lists_its_workers",
}
# The checks a run of the job `materialize_round` evaluates: the round's and its training data's.
JOB_CHECK_NAMES = CHECK_NAMES | {name for names in TRAINING_CHECKS.values() for name in names}
PICKLE_MAGIC = b"\x80"  # protocol 2+ pickles start with PROTO (0x80)


def write_rounds(root: Path, specs: Sequence[RoundSpec] = (ROUND_SPEC,)) -> DemoLayout:
    """Demo rounds plus their opencode store and Claude projects under `root`."""
    return write_demo(root, rounds=specs)


def round_resources(
    layout: DemoLayout,
    ledger_root: Path,
    *,
    opencode_db: Path | None = None,
    rounds_root: Path | None = None,
    claude_projects: Path | None = None,
) -> dict[str, Any]:
    """The resources of the round assets and checks, pointing at a demo and a ledger root."""
    locations = RoundLocations(
        rounds_root=RoundsRoot(root_dir=str(rounds_root or layout.rounds_root)),
        opencode=OpencodeDatabase(path=str(opencode_db or layout.opencode_db)),
        claude=ClaudeProjects(projects_dir=str(claude_projects or layout.claude_projects_dir)),
        ledger_root=LedgerRoot(root_dir=str(ledger_root)),
    )
    return {"locations": locations}


def materialize_round(
    instance: DagsterInstance,
    resources: dict[str, Any],
    key: str = ROUND,
    *,
    selection: Any = None,
    tags: dict[str, str] | None = None,
) -> ExecuteInProcessResult:
    """Every asset and check of round `key` (or those of `selection`), in process, on
    `instance` (the partition is added first)."""
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [key])
    return materialize(
        ALL_ROUND_DEFS, selection=selection, partition_key=key, instance=instance, resources=resources,
        tags=tags, raise_on_error=False,
    )  # fmt: skip


def run_checks_of(
    instance: DagsterInstance, resources: dict[str, Any], asset: Any, key: str = ROUND
) -> ExecuteInProcessResult:
    """Only the checks of `asset` for round `key`, against what is on disk now.

    `materialize(partition_key=...)` refuses a checks-only selection in 1.13 ("There is no
    PartitionsDefinition shared by all the provided assets": no asset is selected), so the
    partition is passed as the run's `dagster/partition` tag, as the UI does.
    """
    return materialize(
        ALL_ROUND_DEFS,
        selection=AssetSelection.checks_for_assets(asset),
        instance=instance,
        resources=resources,
        tags={"dagster/partition": key},
        raise_on_error=False,
    )


def evaluations(result: ExecuteInProcessResult) -> dict[str, AssetCheckEvaluation]:
    return {evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()}


def materializations(result: ExecuteInProcessResult) -> dict[str, AssetMaterialization]:
    found: dict[str, AssetMaterialization] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        found[materialization.asset_key.to_user_string()] = materialization
    return found


def metadata_values(entries: dict[str, Any]) -> dict[str, Any]:
    """Metadata entries as plain values."""
    return {name: entry.value for name, entry in entries.items()}


def step_failures(result: ExecuteInProcessResult) -> dict[str, str]:
    """Failed step key -> the failure's description (or error message)."""
    failures: dict[str, str] = {}
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        user = data.user_failure_data
        failures[event.step_key] = user.description if user is not None else data.error.message
    return failures


# ---------------------------------------------------------------------------
# Ledgers
# ---------------------------------------------------------------------------


def cli_backfill(
    layout: DemoLayout, out_dir: Path, ledger_path: Path, *, opencode_db: Path | None = None
) -> dict:
    """What `rollout-assets backfill` writes for a round: the ledger at `ledger_path`; returns the stats JSON."""
    with RoundBackfill(
        out_dir,
        opencode_db=opencode_db or layout.opencode_db,
        claude_projects_dir=layout.claude_projects_dir,
    ) as backfill:
        write_ledger(ledger_path, backfill.lines())
        return backfill.stats.to_json()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def write_jsonl(path: Path, lines: Iterable[dict[str, Any]]) -> Path:
    """Lines written verbatim (no validation): how a damaged ledger looks on disk."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(
            json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines
        )
    return path


def without_captured_at(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deep copies of `lines` with `provenance.captured_at` removed (the one field allowed to differ)."""
    stripped = []
    for line in lines:
        copy = json.loads(json.dumps(line))
        del copy["provenance"]["captured_at"]
        stripped.append(copy)
    return stripped


def copy_tree(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def files_under(folder: Path) -> list[Path]:
    return sorted(Path(base, name) for base, _, names in os.walk(folder) for name in names)


def pickled_files(folder: Path) -> list[Path]:
    """Files under `folder` that start like a pickle."""
    found = []
    for path in files_under(folder):
        with open(path, "rb") as handle:
            if handle.read(1) == PICKLE_MAGIC:
                found.append(path)
    return found


def lose_a_worker_line_in_the_ledger_stage(monkeypatch: Any) -> None:
    """Make the ledger stage behave like a join bug: right after the real stage writes the
    ledger, its last worker line is gone. The checks, not the stage, must notice."""
    from rollout_assets.defs.assets import ledger as assets

    write_rollout_ledger = assets.write_rollout_ledger

    def losing_a_worker_line(outputs: Any, *stores: Any) -> Any:
        stats = write_rollout_ledger(outputs, *stores)
        lines = read_jsonl(outputs.ledger)
        del lines[max(i for i, line in enumerate(lines) if line["role"] == "worker")]
        write_jsonl(outputs.ledger, lines)
        return stats

    monkeypatch.setattr(assets, "write_rollout_ledger", losing_a_worker_line)
