"""The `inspect_logs` asset on a real Dagster instance, over a demo round: every ledger line in
its logs, the metadata that leads from the UI to them, and a ledger that fails to read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetSelection, DagsterInstance, materialize
from inspect_ai.log import read_eval_log

from rollout_assets.defs.assets.viewing import inspect_logs
from rollout_assets_tests.dagster_rounds import (
    ALL_ROUND_DEFS,
    ROUND,
    SMALL_SPEC,
    materialize_round,
    materializations,
    metadata_values,
    round_resources,
    step_failures,
    write_rounds,
)
from rollout_assets_tests.inspect_ledgers import rewrite_line

PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo(tmp_path: Path):
    layout = write_rounds(tmp_path / "demo")
    return layout, round_resources(layout, tmp_path / "ledgers"), tmp_path / "ledgers" / ROUND


def _materialize(instance: DagsterInstance, resources: dict, selection=None):
    return materialize(
        [*ALL_ROUND_DEFS, inspect_logs], selection=selection, partition_key=ROUND, instance=instance,
        resources=resources, raise_on_error=False,
    )  # fmt: skip


def test_the_asset_writes_every_ledger_line_and_its_metadata_leads_to_the_logs(demo) -> None:
    _, resources, folder = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)  # adds the partition; round assets only
        result = _materialize(instance, resources)
        assert result.success, step_failures(result)
        found = materializations(result)
    metadata = metadata_values(found["inspect_logs"].metadata)
    ledger = metadata_values(found["rollout_ledger"].metadata)
    logs = {path.name: read_eval_log(str(path)) for path in (folder / "inspect-logs").glob("*.eval")}

    assert metadata["path"] == str(folder / "inspect-logs")
    assert metadata["open_with"] == f"rollout-assets view {folder}"
    assert metadata["samples"] == metadata["dagster/row_count"] == ledger["lines"] == sum(len(log.samples) for log in logs.values())
    assert metadata["samples_with_transcript"] + metadata["samples_gap"] == metadata["samples"]
    assert metadata["samples_gap"] == ledger["gap_lines"] and metadata["samples_scored"] == ledger["reward_labeled"]
    assert metadata["logs"] == len(logs) == 17
    for name, log in logs.items():
        assert metadata[f"samples_{name.removesuffix('.eval')}"] == len(log.samples)
        assert f"| {name} | {len(log.samples)} |" in metadata["samples_per_log"]
    # The ledger's counts per role, agent lines included, plot beside the logs' counts.
    agent_samples = sum(len(log.samples) for name, log in logs.items() if name.startswith("agent-"))
    assert ledger["lines_agent"] == agent_samples > 0


def test_a_ledger_that_fails_to_read_fails_the_step_in_one_sentence_and_keeps_the_logs(demo) -> None:
    _, resources, folder = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)
        assert _materialize(instance, resources).success
        before = {path.name: path.read_bytes() for path in (folder / "inspect-logs").iterdir()}
        rewrite_line(folder / "rollout-ledger.jsonl", 12, '{"schema": ')
        result = _materialize(instance, resources, selection=AssetSelection.assets(inspect_logs))

    assert not result.success
    assert step_failures(result) == {
        "inspect_logs": f"{folder / 'rollout-ledger.jsonl'}:12: invalid JSON: Expecting value at column 12"
    }
    assert {path.name: path.read_bytes() for path in (folder / "inspect-logs").iterdir()} == before


@pytest.mark.slow
def test_rollout_assets_materialize_runs_the_inspect_logs_and_prints_how_to_open_them(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_DIR / "deploy" / "local" / "dagster.yaml", home / "dagster.yaml")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), **layout.environment(tmp_path / "ledgers"))

    completed = subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", "materialize"],
        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    round_folder = tmp_path / "ledgers" / SMALL_SPEC.name
    logs = sorted(path.name for path in (round_folder / "inspect-logs").glob("*.eval"))
    samples = sum(len(read_eval_log(str(round_folder / "inspect-logs" / name)).samples) for name in logs)
    assert f"  Inspect logs: {samples} samples in {len(logs)} logs → {round_folder / 'inspect-logs'}\n" in completed.stdout
    assert f"  transcripts: rollout-assets view {round_folder}\n" in completed.stdout
