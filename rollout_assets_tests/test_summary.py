"""The cross-round overview, misconfiguration messages, and progress reporting."""

import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from dagster import Definitions, evaluate_automation_conditions, instance_for_test, materialize

from rollout_assets.defs.assets import EXTERNAL_INPUTS, ROUND_ASSETS
from rollout_assets.defs.checks import ROUND_CHECKS
from rollout_assets.defs.summary import rounds_summary
from rollout_assets.stages import RoundOutputs
from rollout_assets.summary import (
    SUMMARY_COLUMNS,
    SUMMARY_TYPES,
    build_rounds_summary,
    markdown_table,
    write_parquet_atomic,
)
from rollout_assets_tests.dagster_rounds import (
    ALL_ROUND_DEFS,
    ROUND_SPEC,
    SMALL_SPEC,
    lose_a_worker_line_in_the_ledger_stage,
    materialize_round,
    metadata_values,
    read_jsonl,
    round_resources,
    step_failures,
    write_rounds,
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return write_rounds(tmp_path_factory.mktemp("summary"), (ROUND_SPEC, SMALL_SPEC))


def test_rounds_summary_has_one_row_per_round_recounted_from_each_ledger(demo, tmp_path: Path) -> None:
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(demo, ledger_root)
    with instance_for_test() as instance:
        for spec in (ROUND_SPEC, SMALL_SPEC):
            assert materialize_round(instance, resources, spec.name).success
        result = materialize([*ALL_ROUND_DEFS, rounds_summary], selection=[rounds_summary.key],
                             instance=instance, resources=resources)
    assert result.success
    frame = pd.read_parquet(ledger_root / "rounds-summary.parquet")
    assert list(frame.columns) == SUMMARY_COLUMNS
    assert list(frame["round"]) == [ROUND_SPEC.name, SMALL_SPEC.name]
    for row in frame.itertuples(index=False):
        lines = read_jsonl(ledger_root / row.round / "rollout-ledger.jsonl")
        assert row.lines == len(lines)
        assert row.lines_worker == sum(line["role"] == "worker" for line in lines)
        assert row.lines_agent == sum(line["role"] == "agent" for line in lines) > 0
        assert row.gap_rate == pytest.approx(sum(not line["messages"] for line in lines) / len(lines))
        assert row.reward_labeled_share == pytest.approx(
            sum(line["outcome"]["reward"] is not None for line in lines) / len(lines)
        )
        supervisor_rewards = [
            line["outcome"]["reward"] for line in lines
            if line["role"] == "supervisor" and line["outcome"]["reward"] is not None
        ]
        assert row.mean_reward_supervisor == pytest.approx(sum(supervisor_rewards) / len(supervisor_rewards))
        episode_costs = [line["cost"]["usd"] for line in lines if line["role"] in ("supervisor", "proposer")]
        recorded = [usd for usd in episode_costs if usd is not None]
        assert row.cost_usd_recorded == pytest.approx(sum(recorded))
        if len(recorded) == len(episode_costs):
            assert row.cost_usd == pytest.approx(sum(recorded))
        else:  # the demo's edge cases leave some receipts without a cost
            assert pd.isna(row.cost_usd)
        assert bool(row.opencode_db_available) is True
    metadata = metadata_values(result.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["rounds"] == 2
    assert metadata["lines"] == int(frame["lines"].sum())
    assert metadata["summary"].startswith("| round | lines |")


def test_a_round_without_stats_is_left_out_and_reported(tmp_path: Path) -> None:
    from rollout_assets.stages import RoundOutputs

    stats = {"lines": 4, "byRole": {"supervisor": 2, "worker": 2}, "gapLines": 2, "rewardLabeled": 0,
             "opencodeDbAvailable": False, "rewardByRole": {}, "costUsdByRole": {}}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rollout-stats.json").write_text(json.dumps(stats))
    frame, skipped = build_rounds_summary(
        [("a", RoundOutputs(tmp_path / "a")), ("b", RoundOutputs(tmp_path / "b"))], present={"a", "b"}
    )
    assert skipped == ["b"]
    assert frame.to_dict("records")[0]["gap_rate"] == 0.5
    assert pd.isna(frame.to_dict("records")[0]["mean_reward_worker"])
    assert pd.isna(frame.to_dict("records")[0]["cost_usd"])  # unrecorded cost is not 0
    # round, lines, per role (supervisor, worker, proposer, agent), gap lines, gap rate, share
    assert markdown_table(frame).splitlines()[2].startswith("| a | 4 | 2 | 2 | 0 | 0 | 2 | 0.500 | 0.000 | — |")


def materialize_summary(instance, resources):
    return materialize([*ALL_ROUND_DEFS, rounds_summary], selection=[rounds_summary.key], instance=instance,
                       resources=resources, raise_on_error=False)


def test_a_renamed_round_keeps_its_old_row_marked_as_gone(demo, tmp_path: Path) -> None:
    """The old partition and its ledger stay (nothing is dropped), the new name gets a row of its
    own, and `round_dir_present` tells the two apart."""
    rounds_root = tmp_path / "rounds"
    rounds_root.mkdir()
    shutil.copytree(demo.rounds_root / SMALL_SPEC.name, rounds_root / "old-name", symlinks=True)
    resources = round_resources(demo, tmp_path / "ledgers", rounds_root=rounds_root)
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, "old-name").success
        (rounds_root / "old-name").rename(rounds_root / "new-name")
        assert materialize_round(instance, resources, "new-name").success
        summary = materialize_summary(instance, resources)

    assert summary.success, step_failures(summary)
    frame = pd.read_parquet(tmp_path / "ledgers" / "rounds-summary.parquet")
    assert frame[["round", "round_dir_present"]].to_dict("records") == [
        {"round": "old-name", "round_dir_present": False},
        {"round": "new-name", "round_dir_present": True},
    ]
    assert frame["lines"].iloc[0] == frame["lines"].iloc[1]
    metadata = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["rounds_without_directory"] == ["old-name"]


def test_a_rounds_root_that_cannot_be_listed_marks_no_round_gone(demo, tmp_path: Path) -> None:
    """An unmounted disk or a mistyped ROLLOUT_ROUNDS_ROOT says nothing of the rounds: their
    column is null, not false, and none is listed as without a directory."""
    rounds_root = tmp_path / "rounds"
    rounds_root.mkdir()
    shutil.copytree(demo.rounds_root / SMALL_SPEC.name, rounds_root / SMALL_SPEC.name, symlinks=True)
    resources = round_resources(demo, tmp_path / "ledgers", rounds_root=rounds_root)
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, SMALL_SPEC.name).success
        rounds_root.rename(tmp_path / "unmounted")
        summary = materialize_summary(instance, resources)
        logs = [(entry.level, entry.user_message) for entry in instance.all_logs(summary.run_id)]

    assert summary.success, step_failures(summary)
    frame = pd.read_parquet(tmp_path / "ledgers" / "rounds-summary.parquet")
    assert list(frame["round"]) == [SMALL_SPEC.name]
    assert frame["round_dir_present"].isna().all()
    metadata = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["rounds_without_directory"] == []
    assert metadata["summary"].splitlines()[-1].endswith("| True | — |")  # unknown, not "<NA>"
    warning = (
        f"rounds root {rounds_root} cannot be listed (No such file or directory): round_dir_present is null in "
        "every row; set ROLLOUT_ROUNDS_ROOT"
    )
    assert (logging.WARNING, warning) in logs


def test_a_partition_key_that_cannot_be_a_round_is_left_out_of_the_summary_and_listed(demo, tmp_path: Path) -> None:
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(demo, ledger_root)
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, SMALL_SPEC.name).success
        # Dagster validates no dynamic key: the UI's "Add new partition" takes this one.
        instance.add_dynamic_partitions("rounds", ["round 3 (copy)", "round-009"])
        result = materialize_summary(instance, resources)
        logs = [(entry.level, entry.user_message) for entry in instance.all_logs(result.run_id)]

    assert result.success, step_failures(result)
    assert list(pd.read_parquet(ledger_root / "rounds-summary.parquet")["round"]) == [SMALL_SPEC.name]
    metadata = metadata_values(result.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["invalid_partition_keys"] == ["round 3 (copy)"]
    assert metadata["rounds_without_stats_list"] == ["round-009"]  # valid, never materialized
    warning = (
        "partition 'round 3 (copy)' left out of the summary: round name 'round 3 (copy)' is not a valid partition "
        "key: it must start with a letter or digit and hold at most 100 letters, digits, '.', '_' or '-'"
    )
    assert (logging.WARNING, warning) in logs


def test_a_round_named_like_the_summary_file_is_refused_and_the_summary_still_written(demo, tmp_path: Path) -> None:
    from rollout_assets.defs.partitions import round_key_problem
    from rollout_assets.defs.resources import list_round_dirs

    rounds_root = tmp_path / "rounds"
    rounds_root.mkdir()
    shutil.copytree(demo.rounds_root / SMALL_SPEC.name, rounds_root / "rounds-summary.parquet", symlinks=True)
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(demo, ledger_root, rounds_root=rounds_root)
    with instance_for_test() as instance:
        # Added by hand before any summary exists: its folder would take the summary's place.
        refused = materialize_round(instance, resources, "rounds-summary.parquet")
        summary = materialize_summary(instance, resources)

    assert not refused.success
    assert step_failures(refused) == {
        "round_manifest": "round name 'rounds-summary.parquet' is not a valid partition key: it is the name of the "
        "cross-round summary file at the ledger root, where the round's folder would collide with it; rename the "
        "round directory"
    }
    assert summary.success, step_failures(summary)
    assert (ledger_root / "rounds-summary.parquet").is_file()
    metadata = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["invalid_partition_keys"] == ["rounds-summary.parquet"]
    # The sensor and `rollout-assets materialize` skip the directory for the same reason.
    skipped = []
    assert list_round_dirs(rounds_root, SimpleNamespace(warning=skipped.append)).rounds == {}
    assert skipped == [
        f"skipping {rounds_root / 'rounds-summary.parquet'}: {round_key_problem('rounds-summary.parquet')}"
    ]


# ---------------------------------------------------------------------------
# Automation: the summary follows the rounds' stats
# ---------------------------------------------------------------------------


def test_the_summary_is_requested_after_a_rounds_stats_while_other_rounds_have_none(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = round_resources(demo, tmp_path / "ledgers")
    defs = Definitions(assets=[*EXTERNAL_INPUTS, *ROUND_ASSETS, rounds_summary], asset_checks=ROUND_CHECKS,
                       resources=resources)
    with instance_for_test() as instance:
        # A round added by the sensor and not run yet ...
        instance.add_dynamic_partitions("rounds", ["round-003"])
        first = evaluate_automation_conditions(defs=defs, instance=instance)
        # ... and one whose ledger failed a blocking check: neither has stats, nor will soon.
        with monkeypatch.context() as patched:
            lose_a_worker_line_in_the_ledger_stage(patched)
            assert not materialize_round(instance, resources, SMALL_SPEC.name).success
        assert materialize_round(instance, resources, ROUND_SPEC.name).success
        second = evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)

    assert first.total_requested == 0
    assert second.total_requested == 1
    assert second.get_num_requested(rounds_summary.key) == 1


def test_the_summary_is_requested_again_when_a_rounds_new_ledger_fails_its_checks(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its stats are gone with the old ledger, and rollout_stats does not run: the summary must
    follow the ledger too, or it keeps showing the old counts."""
    resources = round_resources(demo, tmp_path / "ledgers")
    defs = Definitions(assets=[*EXTERNAL_INPUTS, *ROUND_ASSETS, rounds_summary], asset_checks=ROUND_CHECKS,
                       resources=resources)
    ticks = []
    with instance_for_test() as instance:

        def tick() -> None:
            cursor = ticks[-1].cursor if ticks else None
            ticks.append(evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor))

        tick()
        assert materialize_round(instance, resources, SMALL_SPEC.name).success
        tick()  # requested: the automation sensor runs it
        assert materialize_summary(instance, resources).success
        tick()  # up to date
        with monkeypatch.context() as patched:
            lose_a_worker_line_in_the_ledger_stage(patched)
            assert not materialize_round(instance, resources, SMALL_SPEC.name).success
        tick()

    assert [result.get_num_requested(rounds_summary.key) for result in ticks] == [0, 1, 0, 1]


def test_a_ledger_materialized_again_alone_leaves_the_round_out_as_stats_out_of_date(demo, tmp_path: Path) -> None:
    from rollout_assets.defs.assets import rollout_ledger

    ledger_root = tmp_path / "ledgers"
    resources = round_resources(demo, ledger_root)
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, SMALL_SPEC.name).success
        # The UI's "Materialize" on rollout_ledger alone: its checks run with it, rollout_stats does not.
        alone = materialize(ALL_ROUND_DEFS, selection=[rollout_ledger.key], partition_key=SMALL_SPEC.name,
                            instance=instance, resources=resources)
        summary = materialize_summary(instance, resources)
        messages = [entry.user_message for entry in instance.all_logs(summary.run_id)]

    assert alone.success
    assert not (ledger_root / SMALL_SPEC.name / "rollout-stats.json").exists()
    reason = "stats out of date: its ledger was materialized again without rollout_stats; materialize rollout_stats"
    assert f"1 round(s) left out of the summary ({reason}): {SMALL_SPEC.name}" in messages
    metadata = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert metadata["rounds_without_stats_reasons"] == {SMALL_SPEC.name: reason}


def _write_summaries(path: Path, tag: str, times: int) -> None:
    def value(column: str, i: int) -> object:
        return f"{tag}-{i}" if column == "round" else i % 2 == 0 if SUMMARY_TYPES[column] in ("bool", "boolean") else i

    frame = pd.DataFrame([{column: value(column, i) for column in SUMMARY_COLUMNS} for i in range(5000)],
                         columns=SUMMARY_COLUMNS).astype(SUMMARY_TYPES)  # fmt: skip
    for _ in range(times):
        write_parquet_atomic(frame, path)


def test_two_summaries_written_at_once_never_fail_nor_leave_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "rounds-summary.parquet"
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_summaries, args=(path, tag, 30)) for tag in ("a", "b")]
    for writer in writers:
        writer.start()
    torn = 0
    while any(writer.is_alive() for writer in writers):
        try:
            pd.read_parquet(path)
        except FileNotFoundError:
            pass
        except Exception:  # noqa: BLE001 - any other error is a torn file
            torn += 1
    for writer in writers:
        writer.join()

    assert [writer.exitcode for writer in writers] == [0, 0]
    assert torn == 0
    assert len(pd.read_parquet(path)) == 5000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rounds-summary.parquet"]


def test_a_cost_sum_beyond_a_double_is_an_unknown_cost_not_a_crash(tmp_path: Path) -> None:
    from rollout_assets.defs.assets.stats import stats_table
    from rollout_assets.stages import RoundOutputs

    stats = {"lines": 2, "byRole": {"supervisor": 1, "proposer": 1}, "gapLines": 0, "rewardLabeled": 1,
             "opencodeDbAvailable": True, "byGapReason": {},
             "rewardByRole": {"supervisor": {"labeled": 1, "mean": None}},
             "costUsdByRole": {"supervisor": {"usd": None, "linesWithCost": 1},
                               "proposer": {"usd": 1.5, "linesWithCost": 1}}}  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rollout-stats.json").write_text(json.dumps(stats))

    frame, _ = build_rounds_summary([("a", RoundOutputs(tmp_path / "a"))], present={"a"})

    assert pd.isna(frame.to_dict("records")[0]["cost_usd"])
    assert pd.isna(frame.to_dict("records")[0]["cost_usd_recorded"])
    assert "| supervisor | 1 | 1 | — | — |" in stats_table(stats).splitlines()
    assert "| proposer | 1 | 0 | — | 1.5000 |" in stats_table(stats).splitlines()


def _stats_file(folder: Path, stats: dict) -> RoundOutputs:
    folder.mkdir(parents=True)
    (folder / "rollout-stats.json").write_text(json.dumps(stats))
    return RoundOutputs(folder)


NO_VERDICT_STATS = {  # a round whose every reward and cost is null
    "lines": 3, "byRole": {"supervisor": 1, "worker": 1, "proposer": 1}, "gapLines": 1, "rewardLabeled": 0,
    "opencodeDbAvailable": True, "rewardByRole": {}, "costUsdByRole": {},
}  # fmt: skip


@pytest.mark.parametrize("rounds", ["no round", "one round with nothing but nulls"])
def test_the_summary_file_keeps_its_column_types_whatever_the_rows_hold(tmp_path: Path, rounds: str) -> None:
    """Types inferred from the values would make an all-null column (or every column of an
    empty summary) of type null, and such a file could not be read together with another."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    outputs = [("a", _stats_file(tmp_path / "a", NO_VERDICT_STATS))] if rounds != "no round" else []
    frame, _ = build_rounds_summary(outputs, present={"a"})
    write_parquet_atomic(frame, tmp_path / "summary.parquet")
    full, _ = build_rounds_summary([("b", _stats_file(tmp_path / "b", {
        **NO_VERDICT_STATS, "rewardLabeled": 1,
        "rewardByRole": {"supervisor": {"labeled": 1, "mean": 1.0}},
        "costUsdByRole": {"supervisor": {"usd": 0.5, "linesWithCost": 1}, "proposer": {"usd": 1.0, "linesWithCost": 1}},
    }))], present=set())  # fmt: skip
    write_parquet_atomic(full, tmp_path / "full.parquet")

    schema = pq.read_schema(tmp_path / "summary.parquet")
    assert {name: str(schema.field(name).type) for name in schema.names} == {
        "round": "string", "lines": "int64", "lines_supervisor": "int64", "lines_worker": "int64",
        "lines_proposer": "int64", "lines_agent": "int64", "gap_lines": "int64", "gap_rate": "double",
        "reward_labeled_share": "double", "mean_reward_supervisor": "double", "mean_reward_worker": "double",
        "mean_reward_proposer": "double", "mean_reward_agent": "double",
        "cost_usd": "double", "cost_usd_recorded": "double", "opencode_db_available": "bool",
        "round_dir_present": "bool",
    }  # fmt: skip
    both = pa.concat_tables([pq.read_table(tmp_path / "summary.parquet"), pq.read_table(tmp_path / "full.parquet")])
    assert both.column("round").to_pylist() == [*(["a"] if outputs else []), "b"]
    assert both.column("cost_usd").to_pylist()[-1] == 1.5


def test_a_round_missing_episode_costs_has_no_cost_but_the_sum_it_recorded(tmp_path: Path) -> None:
    stats = {**NO_VERDICT_STATS, "lines": 8, "byRole": {"supervisor": 6, "proposer": 2},
             "costUsdByRole": {"supervisor": {"usd": 3.25, "linesWithCost": 3},
                               "proposer": {"usd": 7.0, "linesWithCost": 2}}}  # fmt: skip

    frame, _ = build_rounds_summary([("a", _stats_file(tmp_path / "a", stats))], present={"a"})

    row = frame.to_dict("records")[0]
    assert pd.isna(row["cost_usd"])  # 3 of 6 episode receipts: the round's cost is unknown
    assert row["cost_usd_recorded"] == 10.25


def test_a_round_without_lines_has_no_gap_rate_not_a_rate_of_zero(demo, tmp_path: Path) -> None:
    rounds_root = tmp_path / "rounds"
    (rounds_root / "empty-round" / "improve-run").mkdir(parents=True)  # started, nothing run yet
    resources = round_resources(demo, tmp_path / "ledgers", rounds_root=rounds_root)
    with instance_for_test() as instance:
        materialized = materialize_round(instance, resources, "empty-round")
        summary = materialize_summary(instance, resources)

    assert materialized.success and summary.success
    stats = metadata_values(materialized.asset_materializations_for_node("rollout_stats")[0].metadata)
    assert (stats["lines"], stats["gap_rate"]) == (0, None)
    totals = metadata_values(summary.asset_materializations_for_node("rounds_summary")[0].metadata)
    assert (totals["lines"], totals["gap_rate"]) == (0, None)
    row = pd.read_parquet(tmp_path / "ledgers" / "rounds-summary.parquet").to_dict("records")[0]
    assert (row["lines"], pd.isna(row["gap_rate"])) == (0, True)


def test_an_unreadable_stats_file_fails_the_summary_naming_it(demo, tmp_path: Path) -> None:
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(demo, ledger_root)
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, SMALL_SPEC.name).success
        stats = ledger_root / SMALL_SPEC.name / "rollout-stats.json"
        stats.write_text("{not json")
        result = materialize_summary(instance, resources)

    assert step_failures(result)["rounds_summary"].startswith(
        f"{stats} cannot be read as the stats of round {SMALL_SPEC.name} (JSONDecodeError: "
    )


# ---------------------------------------------------------------------------
# Misconfiguration: one sentence that says what to set
# ---------------------------------------------------------------------------


def test_missing_rounds_root_says_to_set_rollout_rounds_root(demo, tmp_path: Path) -> None:
    resources = round_resources(demo, tmp_path / "ledgers", rounds_root=tmp_path / "no-such-root")
    with instance_for_test() as instance:
        result = materialize_round(instance, resources)
    failure = step_failures(result)["round_manifest"]
    assert failure == (
        f"rounds root {tmp_path / 'no-such-root'} does not exist: set ROLLOUT_ROUNDS_ROOT to the folder holding "
        "round outDirs"
    )


def test_unwritable_ledger_root_says_to_set_rollout_ledger_root(demo, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    resources = round_resources(demo, blocker / "ledgers")
    with instance_for_test() as instance:
        result = materialize_round(instance, resources)
    failure = step_failures(result)["round_manifest"]
    assert failure.startswith(f"ledger root {blocker / 'ledgers'} is not writable (")
    assert failure.endswith("set ROLLOUT_LEDGER_ROOT to a folder this process may write")


def test_missing_claude_projects_folder_gives_gap_lines_and_a_warning_naming_the_variable(demo, tmp_path: Path) -> None:
    resources = round_resources(demo, tmp_path / "ledgers", claude_projects=tmp_path / "no-claude")
    with instance_for_test() as instance:
        result = materialize_round(instance, resources)
        warnings = [
            entry.user_message for entry in instance.all_logs(result.run_id)
            if entry.level >= 30 and "CLAUDE_PROJECTS_DIR" in entry.user_message
        ]
    assert result.success
    assert warnings == [
        (f"Claude projects folder {tmp_path / 'no-claude'} does not exist: proposer shots become labeled gap lines; "
        "set CLAUDE_PROJECTS_DIR to the folder that holds the transcripts")
    ]
    metadata = metadata_values(result.asset_materializations_for_node("proposer_transcripts")[0].metadata)
    assert metadata["claude_projects_available"] is False
    assert metadata["shots_joined"] == 0


def test_missing_opencode_database_warns_naming_the_variable(demo, tmp_path: Path) -> None:
    resources = round_resources(demo, tmp_path / "ledgers", opencode_db=tmp_path / "no.db")
    with instance_for_test() as instance:
        result = materialize_round(instance, resources)
        messages = [entry.user_message for entry in instance.all_logs(result.run_id) if entry.level >= 30]
    assert result.success
    assert (
        f"opencode database {tmp_path / 'no.db'} does not exist: worker sessions become labeled gap lines; "
        "set OPENCODE_DB to the opencode.db that holds them"
    ) in messages


# ---------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------


def test_runs_log_progress_per_candidate(demo, tmp_path: Path) -> None:
    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(demo, tmp_path / "ledgers"))
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    candidates = ["baseline", "gen0-cand0", "gen0-cand1", "gen1-cand0", "gen1-cand1"]
    assert [m for m in messages if m.startswith("campaign_cells: candidate ")] == [
        f"campaign_cells: candidate {c} done ({n} lines)" for c, n in zip(candidates, [6, 6, 6, 6, 6], strict=True)
    ]
    assert sorted(m for m in messages if m.startswith("worker_sessions: candidate ")) == sorted(
        f"worker_sessions: candidate {c} done" for c in candidates
    )


def _backfill(demo, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", "backfill", str(demo.rounds[0]), str(tmp_path / "out.jsonl"),
         "--opencode-db", str(demo.opencode_db), "--claude-projects", str(demo.claude_projects_dir), *extra],
        capture_output=True, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_backfill_draws_a_progress_bar_when_asked(demo, tmp_path: Path) -> None:
    completed = _backfill(demo, tmp_path, "--progress", "always")
    assert completed.stderr.endswith(b"] 30/30 cells\n")
    assert b"\r[" in completed.stderr


def test_backfill_draws_no_progress_bar_when_stderr_is_not_a_terminal(demo, tmp_path: Path) -> None:
    assert _backfill(demo, tmp_path).stderr == b""
