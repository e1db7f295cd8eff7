"""The round assets and checks materialized through Dagster on a real instance and real files.

Every run goes through `dagster.materialize` on an `instance_for_test()` instance (or, for the
command-line tests, a DAGSTER_HOME built from `deploy/local/dagster.yaml`), with resources
pointing at a demo round written by `rollout_assets.demo` and a temporary ledger root. The
expected ledger is what the command-line backfill writes for the same round.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, AssetSelection, DagsterInstance, MarkdownMetadataValue, instance_for_test

from rollout_assets.backfill.gaps import GAP_KINDS
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.demo import DemoLayout, edge_case_sites
from rollout_assets_tests.dagster_rounds import (
    CHECK_NAMES,
    ROUND,
    ROUND_SPEC,
    SMALL_SPEC,
    cli_backfill,
    evaluations,
    files_under,
    materializations,
    materialize_round,
    metadata_values,
    pickled_files,
    read_jsonl,
    round_resources,
    step_failures,
    without_captured_at,
    write_rounds,
)

PROJECT_DIR = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
ROUND_ASSET_NAMES = {
    "round_manifest",
    "campaign_cells",
    "worker_sessions",
    "proposer_transcripts",
    "rollout_ledger",
    "rollout_stats",
}
ROLES = ("supervisor", "worker", "proposer")


@pytest.fixture(scope="module")
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    """round-001 of the shipped demo, written once; tests that change inputs write their own."""
    return write_rounds(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def ledger_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ledgers")


@pytest.fixture(scope="module")
def materialized(instance: DagsterInstance, demo: DemoLayout, ledger_root: Path) -> Any:
    """One full materialization of round-001, shared by the tests that only read its results."""
    return materialize_round(instance, round_resources(demo, ledger_root))


@pytest.fixture(scope="module")
def backfilled(demo: DemoLayout, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """(ledger path, stats JSON) of the command-line backfill of round-001."""
    ledger_path = tmp_path_factory.mktemp("cli") / "round-001.jsonl"
    stats = cli_backfill(demo, demo.rounds_root / ROUND, ledger_path)
    return ledger_path, stats


# ---------------------------------------------------------------------------
# A full materialization
# ---------------------------------------------------------------------------


def test_every_asset_of_the_round_is_materialized_for_its_partition(materialized: Any) -> None:
    assert materialized.success
    found = materializations(materialized)
    assert set(found) == ROUND_ASSET_NAMES
    assert {name: m.partition for name, m in found.items()} == dict.fromkeys(ROUND_ASSET_NAMES, ROUND)


def test_every_check_passes_and_is_recorded_for_the_round(materialized: Any) -> None:
    found = evaluations(materialized)

    assert set(found) == CHECK_NAMES
    assert {name: (e.passed, e.partition) for name, e in found.items()} == dict.fromkeys(
        CHECK_NAMES, (True, ROUND)
    )
    assert {name: e.metadata["round"].value for name, e in found.items()} == dict.fromkeys(CHECK_NAMES, ROUND)


def test_check_evaluations_are_stored_per_partition_in_the_instance(
    materialized: Any, instance: DagsterInstance
) -> None:
    stored = [
        event.asset_check_evaluation
        for event in instance.all_logs(materialized.run_id)
        if event.dagster_event is not None
        and event.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    assert sorted((e.check_name, e.partition, e.passed) for e in stored) == sorted(
        (name, ROUND, True) for name in CHECK_NAMES
    )


def test_ledger_is_the_cli_backfill_apart_from_captured_at(
    materialized: Any, ledger_root: Path, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    ledger_path = ledger_root / ROUND / "rollout-ledger.jsonl"
    cli_ledger, _ = backfilled

    dagster_lines = read_jsonl(ledger_path)
    cli_lines = read_jsonl(cli_ledger)

    assert len(dagster_lines) == 96  # 93 + the 3 sub-agent (agent) lines of its joined shots
    assert without_captured_at(dagster_lines) == without_captured_at(cli_lines)


def test_all_lines_of_one_run_share_one_captured_at(materialized: Any, ledger_root: Path) -> None:
    lines = read_jsonl(ledger_root / ROUND / "rollout-ledger.jsonl")
    assert len({line["provenance"]["captured_at"] for line in lines}) == 1


def test_stats_file_is_the_cli_backfill_stats(
    materialized: Any, ledger_root: Path, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    _, cli_stats = backfilled
    stored = json.loads((ledger_root / ROUND / "rollout-stats.json").read_text(encoding="utf-8"))
    assert stored == cli_stats


def _counts_of(stats: dict[str, Any]) -> dict[str, int]:
    """The ledger metadata the UI plots, computed from a stats JSON."""
    counts = {
        "lines": stats["lines"],
        "gap_lines": stats["gapLines"],
        "full_transcripts": stats["fullTranscripts"],
        "reward_labeled": stats["rewardLabeled"],
    }
    counts.update({f"lines_{role}": stats["byRole"].get(role, 0) for role in ROLES})
    counts.update({f"gap_{kind}": stats["byGapReason"].get(kind, 0) for kind in GAP_KINDS})
    return counts


def test_ledger_metadata_numbers_equal_the_backfill_stats(
    materialized: Any, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    _, cli_stats = backfilled
    metadata = metadata_values(materializations(materialized)["rollout_ledger"].metadata)
    expected = _counts_of(cli_stats)

    assert {name: metadata[name] for name in expected} == expected
    assert metadata["dagster/row_count"] == cli_stats["lines"] == 96


def test_stats_metadata_numbers_equal_the_backfill_stats(
    materialized: Any, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    _, cli_stats = backfilled
    metadata = metadata_values(materializations(materialized)["rollout_stats"].metadata)
    expected = _counts_of(cli_stats) | {
        "worker_sessions_joined": cli_stats["workerSessionsJoined"],
        "worker_cwds_missed": cli_stats["workerCwdsMissed"],
        "worker_sessions_empty": cli_stats["workerSessionsEmpty"],
        "proposer_shots_joined": cli_stats["proposerShotsJoined"],
        "proposer_shots_missed": cli_stats["proposerShotsMissed"],
        "proposer_transcripts_empty": cli_stats["proposerTranscriptsEmpty"],
        "cells_without_worker_list": cli_stats["cellsWithoutWorkerList"],
        "opencode_db_available": True,
        "gap_rate": cli_stats["gapLines"] / cli_stats["lines"],
    }

    assert {name: metadata[name] for name in expected} == expected


def test_stage_metadata_numbers_add_up_to_the_ledger(
    materialized: Any, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    _, cli_stats = backfilled
    found = {name: metadata_values(m.metadata) for name, m in materializations(materialized).items()}

    assert found["campaign_cells"]["cells"] == cli_stats["byRole"]["supervisor"] == 30
    assert found["round_manifest"]["cells"] == 30
    assert found["round_manifest"]["shot_receipts"] == cli_stats["byRole"]["proposer"] == 4
    assert found["worker_sessions"]["lines"] == cli_stats["byRole"]["worker"]
    assert found["worker_sessions"]["sessions_joined"] == cli_stats["workerSessionsJoined"]
    assert found["worker_sessions"]["cwds_missed"] == cli_stats["workerCwdsMissed"]
    # The proposer stage holds each proposer line and its sub-agent (agent) lines.
    assert found["proposer_transcripts"]["lines"] == 4 + cli_stats["byRole"]["agent"] == 7
    assert found["proposer_transcripts"]["shots_missed"] == cli_stats["proposerShotsMissed"]


def test_manifest_metadata_carries_a_markdown_table_of_the_campaigns(materialized: Any) -> None:
    table = materializations(materialized)["round_manifest"].metadata["candidates"]

    assert isinstance(table, MarkdownMetadataValue)
    rows = table.value.splitlines()
    assert (
        rows[0] == "| candidate | generation | commit | cells | reps | resolved | cached | shots | cost USD |"
    )
    # baseline + 2 generations x 2 candidates, 6 cells each
    assert [row.split(" | ")[0] for row in rows[2:]] == [
        "| baseline",
        "| gen0-cand0",
        "| gen0-cand1",
        "| gen1-cand0",
        "| gen1-cand1",
    ]
    assert [row.split(" | ")[3] for row in rows[2:]] == ["6"] * 5


def test_stats_metadata_carries_a_markdown_table_per_role_and_gap_reason(
    materialized: Any, backfilled: tuple[Path, dict[str, Any]]
) -> None:
    _, cli_stats = backfilled
    table = materializations(materialized)["rollout_stats"].metadata["stats"]

    assert isinstance(table, MarkdownMetadataValue)
    rows = table.value.splitlines()
    assert rows[0] == "| role | lines | rewards labeled | mean reward | cost USD |"
    # `agent` (the sub-agent lines) comes first, in the line format's role order.
    assert [row.split(" | ")[:2] for row in rows[2:6]] == [
        [f"| {role}", str(cli_stats["byRole"][role])] for role in ("agent", *ROLES)
    ]
    assert "| gap reason | lines |" in rows
    for kind, count in cli_stats["byGapReason"].items():
        assert f"| {kind} | {count} |" in rows


def test_stage_files_are_json_or_jsonl(materialized: Any, ledger_root: Path) -> None:
    folder = ledger_root / ROUND
    files = files_under(folder)

    assert [path.relative_to(folder).as_posix() for path in files] == [
        "manifest.json",
        "rollout-ledger.jsonl",
        "rollout-stats.json",
        "stages/built-from/campaign_cells.json",
        "stages/built-from/proposer_transcripts.json",
        "stages/built-from/round_manifest.json",
        "stages/built-from/worker_sessions.json",
        "stages/campaign-cells.jsonl",
        "stages/manifest-cells.jsonl",
        "stages/manifest-head.json",
        "stages/proposer-transcripts.jsonl",
        "stages/rollout-ledger-stats.json",
        "stages/worker-sessions.json",
        "stages/worker-sessions.jsonl",
    ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
        else:
            assert isinstance(json.loads(text), dict)


def test_nothing_is_pickled_under_the_ledger_root_or_the_instance_storage(
    materialized: Any, ledger_root: Path, instance: DagsterInstance
) -> None:
    storage = Path(instance.storage_directory())

    assert pickled_files(ledger_root) == []
    assert pickled_files(storage) == []
    # No IO manager output was stored for any round asset.
    assert [p for p in files_under(storage) if set(p.parts) & ROUND_ASSET_NAMES] == []


# ---------------------------------------------------------------------------
# Idempotence and failures (each writes its own round: they change inputs or outputs)
# ---------------------------------------------------------------------------


def test_rematerializing_gives_the_same_ledger_apart_from_captured_at(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    resources = round_resources(layout, tmp_path / "ledgers")
    ledger_path = tmp_path / "ledgers" / ROUND / "rollout-ledger.jsonl"
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources).success
        first = read_jsonl(ledger_path)
        second_run = materialize_round(test_instance, resources)

    assert second_run.success
    assert without_captured_at(read_jsonl(ledger_path)) == without_captured_at(first)


def _corrupt_a_cell_cache(layout: DemoLayout) -> Path:
    cache = edge_case_sites(layout.root, ROUND_SPEC)["composite_judge_score"].cell_dir / "cached-result.json"
    cache.write_text('{"cellId": "truncated', encoding="utf-8")
    return cache


def test_corrupt_cell_cache_fails_round_manifest_naming_the_file_and_writes_no_ledger(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    cache = _corrupt_a_cell_cache(layout)
    with instance_for_test() as test_instance:
        result = materialize_round(test_instance, round_resources(layout, tmp_path / "ledgers"))

    assert not result.success
    failures = step_failures(result)
    assert list(failures) == ["round_manifest"]
    assert failures["round_manifest"].startswith(f"{cache}: cell cache is not valid JSON")
    assert materializations(result) == {}
    assert not (tmp_path / "ledgers" / ROUND / "rollout-ledger.jsonl").exists()


def test_corrupt_cell_cache_leaves_the_previous_ledger_intact(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    resources = round_resources(layout, tmp_path / "ledgers")
    folder = tmp_path / "ledgers" / ROUND
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources).success
        before = {path: path.read_bytes() for path in files_under(folder)}
        _corrupt_a_cell_cache(layout)
        result = materialize_round(test_instance, resources)

    assert not result.success
    assert list(step_failures(result)) == ["round_manifest"]
    assert {path: path.read_bytes() for path in files_under(folder)} == before


def test_a_rerun_that_fails_a_blocking_check_leaves_no_stats_of_the_old_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster import materialize

    from rollout_assets.defs.summary import rounds_summary
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS, lose_a_worker_line_in_the_ledger_stage

    layout = write_rounds(tmp_path / "demo")
    resources = round_resources(layout, tmp_path / "ledgers")
    folder = tmp_path / "ledgers" / ROUND
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources).success
        assert (folder / "rollout-stats.json").is_file()
        # The rerun's ledger fails a blocking check: its stage loses a worker line (a join bug).
        lose_a_worker_line_in_the_ledger_stage(monkeypatch)
        rerun = materialize_round(test_instance, resources)
        summary = materialize(
            [*ALL_ROUND_DEFS, rounds_summary], selection=[rounds_summary.key], instance=test_instance,
            resources=resources,
        )  # fmt: skip
        messages = [entry.user_message for entry in test_instance.all_logs(summary.run_id)]

    assert not rerun.success
    assert evaluations(rerun)["every_worker_session_accounted_for"].passed is False
    assert "rollout_ledger" in materializations(rerun)  # the new ledger replaced the old one ...
    assert not (folder / "rollout-stats.json").exists()  # ... and no stats of the old one stay beside it
    # The summary leaves the round out and says so, instead of reporting the old counts.
    metadata = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert (metadata["rounds"], metadata["rounds_without_stats"]) == (0, 1)
    assert metadata["rounds_without_stats_list"] == [ROUND]
    (left_out,) = [message for message in messages if "left out of the summary" in message]
    assert left_out.startswith(
        "1 round(s) left out of the summary (no stats: its ledger failed the blocking check(s) "
    )
    assert "every_worker_session_accounted_for" in left_out
    assert left_out.endswith(f"): {ROUND}")


def test_rollout_stats_alone_refuses_a_ledger_that_failed_its_blocking_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster import materialize

    from rollout_assets.defs.assets import rollout_stats
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS, lose_a_worker_line_in_the_ledger_stage

    layout = write_rounds(tmp_path / "demo")
    resources = round_resources(layout, tmp_path / "ledgers")
    with instance_for_test() as test_instance:
        with monkeypatch.context() as patched:
            lose_a_worker_line_in_the_ledger_stage(patched)
            assert not materialize_round(test_instance, resources).success
        # The UI's "Materialize" on rollout_stats alone: no blocking check runs before it.
        alone = materialize(ALL_ROUND_DEFS, selection=[rollout_stats.key], partition_key=ROUND,
                            instance=test_instance, resources=resources, raise_on_error=False)  # fmt: skip

    assert not alone.success
    failure = step_failures(alone)["rollout_stats"]
    assert failure.startswith(f"round {ROUND}: not writing stats, its ledger failed the blocking check(s) ")
    assert "every_worker_session_accounted_for" in failure
    assert failure.endswith("; materialize rollout_ledger (with its checks) for this round first")
    assert not (tmp_path / "ledgers" / ROUND / "rollout-stats.json").exists()


def test_rollout_stats_alone_refuses_a_ledger_its_checks_have_not_evaluated(tmp_path: Path) -> None:
    from dagster import materialize

    from rollout_assets.defs.assets import rollout_ledger, rollout_stats
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    resources = round_resources(layout, tmp_path / "ledgers")
    key = SMALL_SPEC.name
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources, key).success
        # A new ledger, materialized without its checks (deselected in the UI's launchpad).
        bare = materialize(ALL_ROUND_DEFS, selection=AssetSelection.assets(rollout_ledger).without_checks(),
                           partition_key=key, instance=test_instance, resources=resources)  # fmt: skip
        alone = materialize(ALL_ROUND_DEFS, selection=[rollout_stats.key], partition_key=key,
                            instance=test_instance, resources=resources, raise_on_error=False)  # fmt: skip

    assert bare.success and evaluations(bare) == {}
    failure = step_failures(alone)["rollout_stats"]
    assert failure.startswith(
        f"round {key}: not writing stats, the blocking check(s) every_cell_has_one_supervisor_line, "
    )
    assert "have not been evaluated on its latest ledger" in failure


def test_rollout_stats_alone_writes_the_stats_of_a_ledger_that_passed(tmp_path: Path) -> None:
    from dagster import materialize

    from rollout_assets.defs.assets import rollout_stats
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    resources = round_resources(layout, tmp_path / "ledgers")
    stats = tmp_path / "ledgers" / SMALL_SPEC.name / "rollout-stats.json"
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources, SMALL_SPEC.name).success
        written = stats.read_bytes()
        stats.unlink()
        alone = materialize(ALL_ROUND_DEFS, selection=[rollout_stats.key], partition_key=SMALL_SPEC.name,
                            instance=test_instance, resources=resources)  # fmt: skip

    assert alone.success
    assert stats.read_bytes() == written


def test_rollout_stats_alone_refuses_a_ledger_cut_after_its_checks_passed(tmp_path: Path) -> None:
    from dagster import materialize

    from rollout_assets.defs.assets import rollout_stats
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    resources = round_resources(layout, tmp_path / "ledgers")
    folder = tmp_path / "ledgers" / SMALL_SPEC.name
    with instance_for_test() as test_instance:
        assert materialize_round(test_instance, resources, SMALL_SPEC.name).success
        stats = (folder / "rollout-stats.json").read_bytes()
        ledger = folder / "rollout-ledger.jsonl"
        ledger.write_bytes(b"".join(ledger.read_bytes().splitlines(keepends=True)[:-5]))  # as `head` would
        alone = materialize(ALL_ROUND_DEFS, selection=[rollout_stats.key], partition_key=SMALL_SPEC.name,
                            instance=test_instance, resources=resources, raise_on_error=False)  # fmt: skip

    assert step_failures(alone)["rollout_stats"] == (
        f"{ledger} changed after rollout_ledger wrote it and its checks judged it; re-materialize rollout_ledger"
    )
    assert (folder / "rollout-stats.json").read_bytes() == stats


def test_a_cost_sum_beyond_a_double_materializes_the_round_with_an_unknown_cost(tmp_path: Path) -> None:
    from dagster import materialize

    from rollout_assets.defs.summary import rounds_summary
    from rollout_assets_tests.dagster_rounds import ALL_ROUND_DEFS

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    cells = sorted((layout.rounds_root / SMALL_SPEC.name).glob("improve-run/**/cached-result.json"))
    for cell in cells[:2]:  # 1e308 twice is beyond a double
        record = json.loads(cell.read_text())
        record["costUsd"] = 1e308
        cell.write_text(json.dumps(record))
    resources = round_resources(layout, tmp_path / "ledgers")
    with instance_for_test() as test_instance:
        result = materialize_round(test_instance, resources, SMALL_SPEC.name)
        summary = materialize([*ALL_ROUND_DEFS, rounds_summary], selection=[rounds_summary.key],
                              instance=test_instance, resources=resources)  # fmt: skip

    assert result.success, step_failures(result)
    stats = json.loads((tmp_path / "ledgers" / SMALL_SPEC.name / "rollout-stats.json").read_text())
    assert stats["costUsdByRole"]["supervisor"]["usd"] is None
    table = metadata_values(materializations(result)["rollout_stats"].metadata)["stats"]
    assert any(line.startswith("| supervisor |") and line.endswith("| — |") for line in table.splitlines())
    assert summary.success
    row = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert row["rounds"] == 1


def test_missing_opencode_db_still_materializes_with_gap_lines(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    missing_db = tmp_path / "nowhere" / "opencode.db"
    resources = round_resources(layout, tmp_path / "ledgers", opencode_db=missing_db)
    with instance_for_test() as test_instance:
        result = materialize_round(test_instance, resources)

    assert result.success
    assert {name: e.passed for name, e in evaluations(result).items()} == dict.fromkeys(CHECK_NAMES, True)
    found = {name: metadata_values(m.metadata) for name, m in materializations(result).items()}
    assert found["worker_sessions"]["opencode_db_available"] is False
    assert found["worker_sessions"]["opencode_db"] == str(missing_db)
    assert found["rollout_stats"]["opencode_db_available"] is False
    workers = found["rollout_ledger"]["lines_worker"]
    # One gap line per distinct worker cwd: the demo's 30 cells list 58 of them.
    assert (
        workers
        == found["worker_sessions"]["gap_lines"]
        == found["rollout_ledger"]["gap_opencode_store_unavailable"]
    )
    assert workers == 58
    assert found["worker_sessions"]["sessions_joined"] == 0


def test_a_rerun_without_the_store_keeps_the_ledger_whose_transcripts_it_would_lose(tmp_path: Path) -> None:
    """The store became unavailable (moved, collected) after the round was materialized: the
    rerun would replace every worker transcript with a gap line. rollout_ledger refuses, the
    ledger and its stats stay, and nothing downstream runs on the refused ledger."""
    layout = write_rounds(tmp_path / "demo")
    folder = tmp_path / "ledgers" / ROUND
    with instance_for_test() as test_instance:
        first = materialize_round(test_instance, round_resources(layout, tmp_path / "ledgers"))
        full_workers = metadata_values(materializations(first)["rollout_ledger"].metadata)["lines_worker"] - sum(
            1 for line in read_jsonl(folder / "rollout-ledger.jsonl") if line["role"] == "worker" and not line["messages"]
        )
        before = {path: path.read_bytes() for path in (folder / "rollout-ledger.jsonl", folder / "rollout-stats.json")}
        rerun = materialize_round(
            test_instance, round_resources(layout, tmp_path / "ledgers", opencode_db=tmp_path / "gone.db")
        )

    assert first.success and not rerun.success
    failures = step_failures(rerun)
    assert list(failures) == ["rollout_ledger"]
    assert f"would drop or shorten {full_workers} transcript(s)" in failures["rollout_ledger"]
    assert "move it aside" in failures["rollout_ledger"]
    (failure,) = [event for event in rerun.get_step_failure_events() if event.step_key == "rollout_ledger"]
    listed = metadata_values(failure.step_failure_data.user_failure_data.metadata)
    assert listed["transcripts_dropped"] == full_workers == len(listed["transcripts_dropped_list"])
    assert all(entry.startswith("worker opencode:") for entry in listed["transcripts_dropped_list"])
    assert {path: path.read_bytes() for path in before} == before
    assert "rollout_ledger" not in materializations(rerun) and "rollout_stats" not in materializations(rerun)
    assert set(evaluations(rerun)) == {"every_cell_lists_its_workers"}  # no ledger check ran


def test_missing_round_directory_fails_clearly(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    with instance_for_test() as test_instance:
        result = materialize_round(
            test_instance, round_resources(layout, tmp_path / "ledgers"), key="round-404"
        )

    assert not result.success
    assert step_failures(result) == {
        "round_manifest": f"round 'round-404' has no directory {layout.rounds_root / 'round-404'} under the "
        "rounds root (moved or deleted? set ROLLOUT_ROUNDS_ROOT to the folder that holds it)"
    }
    assert materializations(result) == {}
    assert not (tmp_path / "ledgers" / "round-404" / "rollout-ledger.jsonl").exists()


def _entries(folder: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under `folder`, by relative path."""
    entries: dict[str, bytes | None] = {}
    for base, folders, names in os.walk(folder):
        for name in folders:
            entries[os.path.relpath(os.path.join(base, name), folder)] = None
        for name in names:
            entries[os.path.relpath(os.path.join(base, name), folder)] = Path(base, name).read_bytes()
    return entries


@pytest.mark.parametrize("asset", sorted(ROUND_ASSET_NAMES))
def test_a_round_output_folder_linked_into_the_round_is_refused_and_nothing_is_written_there(
    tmp_path: Path, asset: str
) -> None:
    """The ledger root is apart from the inputs, but the round's folder under it is a symlink
    into the round: every stage refuses it, as `rollout-assets backfill` refuses an OUT there."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    key, ledger_root = SMALL_SPEC.name, tmp_path / "ledgers"
    ledger_root.mkdir()
    (ledger_root / key).symlink_to(layout.rounds_root / key, target_is_directory=True)
    before = _entries(layout.rounds_root)

    with instance_for_test() as test_instance:
        result = materialize_round(
            test_instance, round_resources(layout, ledger_root), key, selection=[AssetKey(asset)]
        )

    assert step_failures(result) == {
        asset: f"refusing the output folder {ledger_root / key} of round {key}: symlinks followed, it lies inside "
        f"the rounds root {layout.rounds_root}, and inputs are never written; replace the link with a folder of its own"
    }
    (failure,) = result.get_step_failure_events()
    assert metadata_values(failure.step_failure_data.user_failure_data.metadata) == {
        "round": key,
        "error": "ConfigurationError",
    }
    assert _entries(layout.rounds_root) == before


def test_a_stages_folder_linked_into_the_claude_projects_folder_is_refused(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    key, ledger_root = SMALL_SPEC.name, tmp_path / "ledgers"
    (ledger_root / key).mkdir(parents=True)
    (ledger_root / key / "stages").symlink_to(layout.claude_projects_dir, target_is_directory=True)
    before = _entries(layout.claude_projects_dir)

    with instance_for_test() as test_instance:
        result = materialize_round(test_instance, round_resources(layout, ledger_root), key)

    assert step_failures(result) == {
        "round_manifest": f"refusing the output folder {ledger_root / key / 'stages'} of round {key}: symlinks "
        f"followed, it is the Claude projects folder {layout.claude_projects_dir}, and inputs are never written; "
        "replace the link with a folder of its own"
    }
    assert _entries(layout.claude_projects_dir) == before
    assert os.listdir(ledger_root / key) == ["stages"]


# ---------------------------------------------------------------------------
# Command lines, as subprocesses on a DAGSTER_HOME built like scripts/env.sh does
# ---------------------------------------------------------------------------


def _dagster_home(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(PROJECT_DIR / "deploy" / "local" / "dagster.yaml", folder / "dagster.yaml")
    return folder


def _cli_env(home: Path, layout: DemoLayout, ledger_root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), **layout.environment(ledger_root))
    return env


@pytest.mark.slow
def test_rollout_assets_materialize_command_passes_every_check_of_every_round(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (ROUND_SPEC, SMALL_SPEC))
    home = _dagster_home(tmp_path / "dagster_home")
    env = _cli_env(home, layout, tmp_path / "ledgers")

    completed = subprocess.run(
        [str(VENV_BIN / "rollout-assets"), "materialize"],
        check=False,
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    for round_key in (ROUND, SMALL_SPEC.name):
        section = out.split(f"=== round {round_key}: ")[1].split("===")[0]
        assert section.startswith("succeeded (run ")
        for check in sorted(CHECK_NAMES):
            assert f"  check {check}: passed\n" in section
        assert f"  ledger: {tmp_path / 'ledgers' / round_key / 'rollout-ledger.jsonl'}\n" in section
        assert (tmp_path / "ledgers" / round_key / "rollout-ledger.jsonl").is_file()
    with DagsterInstance.from_config(str(home)) as stored:
        assert stored.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME) == [ROUND, SMALL_SPEC.name]
    assert pickled_files(home / "storage") == []


@pytest.mark.slow
def test_rollout_assets_materialize_of_one_round_on_a_temporary_instance_keeps_the_others_in_the_summary(
    tmp_path: Path,
) -> None:
    import pandas as pd

    other = dataclasses.replace(SMALL_SPEC, name="round-009")
    without_stats = dataclasses.replace(SMALL_SPEC, name="round-010")
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC, other, without_stats))
    env = _cli_env(tmp_path / "unused", layout, tmp_path / "ledgers")
    del env["DAGSTER_HOME"]  # a temporary instance per command
    command = [str(VENV_BIN / "rollout-assets"), "materialize"]
    run = {"check": False, "cwd": PROJECT_DIR, "env": env, "capture_output": True, "text": True, "timeout": 300}

    every_round = subprocess.run(command, **run)
    # As `dagster asset materialize --select rollout_ledger` on another instance leaves it:
    # a ledger without its stats.
    (tmp_path / "ledgers" / without_stats.name / "rollout-stats.json").unlink()
    one_round = subprocess.run([*command, other.name], **run)

    assert every_round.returncode == 0 == one_round.returncode, one_round.stderr[-3000:]
    assert "using a temporary instance" in one_round.stderr
    summary = pd.read_parquet(tmp_path / "ledgers" / "rounds-summary.parquet")
    assert sorted(summary["round"]) == [SMALL_SPEC.name, other.name]
    assert one_round.stdout.endswith(
        f"left out: {without_stats.name} (no stats: this instance has no record of the ledger beside them "
        "(written on another or a temporary instance); materialize the round)\n"
    )


@pytest.mark.slow
def test_dagster_asset_materialize_command_works_once_the_partition_is_added(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home = _dagster_home(tmp_path / "dagster_home")
    with DagsterInstance.from_config(str(home)) as stored:
        stored.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [SMALL_SPEC.name])
    command = [
        str(VENV_BIN / "dagster"), "asset", "materialize", "-m", "rollout_assets.definitions",
        "--select", "group:rounds", "--partition", SMALL_SPEC.name,
    ]  # fmt: skip

    completed = subprocess.run(
        command, check=False, cwd=PROJECT_DIR, env=_cli_env(home, layout, tmp_path / "ledgers"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert 'RUN_SUCCESS - Finished execution of run for "__ASSET_JOB"' in completed.stderr
    assert (tmp_path / "ledgers" / SMALL_SPEC.name / "rollout-ledger.jsonl").is_file()
    with DagsterInstance.from_config(str(home)) as stored:
        records = stored.get_run_records()
        assert len(records) == 1
        assert records[0].dagster_run.tags["dagster/partition"] == SMALL_SPEC.name
        assert records[0].dagster_run.is_success
    assert pickled_files(home / "storage") == []


@pytest.mark.slow
def test_rollout_assets_materialize_does_not_start_a_round_that_has_a_run_in_progress(tmp_path: Path) -> None:
    from dagster import DagsterRun, DagsterRunStatus

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home = _dagster_home(tmp_path / "dagster_home")
    # What the instance holds while the sensor's (or the UI's) run of the round executes.
    with DagsterInstance.from_config(str(home)) as stored:
        running = stored.add_run(
            DagsterRun(job_name="materialize_round", status=DagsterRunStatus.STARTED,
                       tags={"dagster/partition": SMALL_SPEC.name})
        )  # fmt: skip

    completed = subprocess.run(
        [str(VENV_BIN / "rollout-assets"), "materialize", SMALL_SPEC.name],
        check=False, cwd=PROJECT_DIR, env=_cli_env(home, layout, tmp_path / "ledgers"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert completed.returncode == 1, completed.stderr[-3000:]
    assert (
        f"\n=== round {SMALL_SPEC.name}: NOT STARTED: run {running.run_id} of this round is in progress on the "
        "instance; run again once it has finished (or terminate it in the UI)\n"
    ) in completed.stdout
    assert not (tmp_path / "ledgers" / SMALL_SPEC.name).exists()
    with DagsterInstance.from_config(str(home)) as stored:
        # No run of the round was added; the summary (another job) still ran.
        runs = [record.dagster_run for record in stored.get_run_records()]
        assert [run.run_id for run in runs if run.tags.get("dagster/partition") == SMALL_SPEC.name] == [
            running.run_id
        ]
        assert [run.job_name for run in runs if run.run_id != running.run_id] == ["materialize_summary"]


@pytest.mark.slow
def test_rollout_assets_materialize_names_no_ledger_for_a_round_whose_run_wrote_none(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    cache = next((layout.rounds[0] / "improve-run" / "baseline").glob("*/cached-result.json"))
    cache.write_text("{ not json", encoding="utf-8")  # corrupt evidence: the manifest stage fails
    home = _dagster_home(tmp_path / "dagster_home")

    completed = subprocess.run(
        [str(VENV_BIN / "rollout-assets"), "materialize", SMALL_SPEC.name],
        check=False, cwd=PROJECT_DIR, env=_cli_env(home, layout, tmp_path / "ledgers"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert completed.returncode == 1, completed.stderr[-3000:]
    section = completed.stdout.split(f"=== round {SMALL_SPEC.name}: ")[1].split("===")[0]
    assert section.startswith("FAILED (run ")
    assert f"  step round_manifest failed: {cache}" in section
    assert "  ledger: not written by this run (any earlier ledger of the round stays as it was)\n" in section
    assert str(tmp_path / "ledgers" / SMALL_SPEC.name / "rollout-ledger.jsonl") not in completed.stdout


def _materialize_command(tmp_path: Path, round_key: str, *, before: str = "") -> subprocess.CompletedProcess[str]:
    """`rollout-assets materialize ROUND` in a process of its own on a persistent instance; `before`
    is Python run first in that process (a fault put into a stage, as a bug would)."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    env = _cli_env(_dagster_home(tmp_path / "dagster_home"), layout, tmp_path / "ledgers")
    program = f"import sys\n{before}\nfrom rollout_assets.cli import main\nsys.exit(main(['materialize', {round_key!r}]))"
    return subprocess.run(
        [sys.executable, "-c", program], check=False, cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


_LOSE_A_WORKER_LINE = """
import pytest
from rollout_assets_tests.dagster_rounds import lose_a_worker_line_in_the_ledger_stage
lose_a_worker_line_in_the_ledger_stage(pytest.MonkeyPatch())
"""


@pytest.mark.slow
def test_rollout_assets_materialize_reports_a_failed_blocking_check_in_a_sentence_without_stack_traces(
    tmp_path: Path,
) -> None:
    completed = _materialize_command(tmp_path, SMALL_SPEC.name, before=_LOSE_A_WORKER_LINE)

    assert completed.returncode == 1, completed.stderr[-3000:]
    section = completed.stdout.split(f"=== round {SMALL_SPEC.name}: ")[1].split("===")[0]
    # What the check found, from its metadata: its counts and the invocations at fault.
    assert (
        "  check every_worker_session_accounted_for: FAILED (expected 4, seen 2, missing 2; e.g. cwd: missing "
    ) in section
    assert "; session: missing ses_" in section
    # Its step failed too, which the check's line already says.
    assert not [line for line in section.splitlines() if line.startswith("  step ")]
    assert "(written, but it FAILED a blocking check above: do not use it)" in section
    # Dagster's console lines and stack traces stay in the instance: only one sentence per failure here.
    output = completed.stdout + completed.stderr
    assert "Stack Trace" not in output and "STEP_FAILURE" not in output and "Not executing" not in output


@pytest.mark.slow
def test_rollout_assets_materialize_prints_the_warnings_of_the_steps(tmp_path: Path) -> None:
    completed = _materialize_command(
        tmp_path, SMALL_SPEC.name, before=f"import os; os.environ['OPENCODE_DB'] = {str(tmp_path / 'gone.db')!r}"
    )

    # Without the store every worker line is a labeled gap line, and the round passes its checks.
    assert completed.returncode == 0, completed.stderr[-3000:]
    section = completed.stdout.split(f"=== round {SMALL_SPEC.name}: ")[1].split("===")[0]
    assert f"  warning from worker_sessions: opencode database {tmp_path / 'gone.db'} does not exist" in section


@pytest.mark.slow
def test_rollout_assets_materialize_shows_the_stack_trace_of_an_unexpected_error(tmp_path: Path) -> None:
    """A bug is not one of the stages' sentences: its trace is what the next engineer needs."""
    raise_in_manifest = (
        "from rollout_assets.defs.assets import manifest as assets\n"
        "def broken(*args, **kwargs):\n"
        "    raise ZeroDivisionError('the manifest stage broke')\n"
        "assets.write_manifest = broken"
    )
    completed = _materialize_command(tmp_path, SMALL_SPEC.name, before=raise_in_manifest)

    assert completed.returncode == 1, completed.stderr[-3000:]
    section = completed.stdout.split(f"=== round {SMALL_SPEC.name}: ")[1].split("===")[0]
    assert "  step round_manifest failed: ZeroDivisionError: the manifest stage broke\n" in section
    assert "Stack Trace:" in section and "in broken" in section
    assert "Not executing" not in section
