"""Each deliberate difference from the seed (docs/seed.md, Deliberate differences), on the round that plants it.

Every fix has its own small demo round generated with the matching `fixes` name, so one
case cannot mask another; each test first asserts the planted precondition, then the fixed
behaviour. Rounds without these cases must produce exactly the seed's lines (last tests).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import (
    FIX_CASES,
    DemoLayout,
    EdgeCaseSite,
    RoundSpec,
    edge_case_sites,
    write_demo,
)
from rollout_assets.ledger import read_ledger_dicts, write_ledger
from rollout_assets.sources.round import build_manifest
from rollout_assets_tests.backfill_runs import (
    SUPERVISOR_GAP,
    WORKER_LIST_MISSING_SUFFIX,
    Backfilled,
    backfill,
    claude_usage_once_per_message,
    parsed_or_none,
    rollout_uuid,
    session_rows,
)
from rollout_assets_tests.builders import campaign_dir, cell, write_cell


def small_round(name: str, fixes: frozenset[str] = frozenset(), **sizes: Any) -> RoundSpec:
    shape: dict[str, Any] = {
        "instances": 2,
        "reps": 1,
        "generations": 1,
        "candidates_per_generation": 2,
        "workers_per_cell": 1,
        "steps_per_session": 1,
        "shots_per_candidate": 1,
        "edge_cases": False,
    }
    shape.update(sizes)
    return RoundSpec(name=name, fixes=fixes, seed=7, **shape)


# A fix that needs a larger round than the smallest: its sizes (the demo refuses it smaller).
FIX_SIZES: dict[str, dict[str, Any]] = {
    "agent-file-of-another-session": {"shots_per_candidate": 2},
    "duplicate-transcripts": {"workers_per_cell": 2},
}
FIX_ROUNDS = {
    fix: small_round(f"fix-{fix}", frozenset({fix}), **FIX_SIZES.get(fix, {})) for fix in sorted(FIX_CASES)
}
PLAIN_ROUND = small_round("plain")
EDGE_ROUND = RoundSpec(name="edge-no-fixes", seed=1)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(
        tmp_path_factory.mktemp("fixes"), rounds=[*FIX_ROUNDS.values(), PLAIN_ROUND, EDGE_ROUND]
    )


@pytest.fixture(scope="module")
def runs(demo: DemoLayout) -> dict[str, Backfilled]:
    return {
        out_dir.name: backfill(
            out_dir, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
        )
        for out_dir in demo.rounds
    }


def fix_run(runs: dict[str, Backfilled], fix: str) -> Backfilled:
    return runs[FIX_ROUNDS[fix].name]


def fix_site(demo: DemoLayout, fix: str) -> EdgeCaseSite:
    return edge_case_sites(demo.root, FIX_ROUNDS[fix])[fix]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def transcript_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


# ---------------------------------------------------------------------------
# An empty joined Claude transcript is a gap line, not a crash of the whole round
# ---------------------------------------------------------------------------


def test_an_empty_joined_transcript_is_a_labeled_gap_line(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "empty-claude-transcript")
    assert site.transcript_path is not None
    assert sorted(site.transcript_path.parent.iterdir()) == [site.transcript_path]
    run = fix_run(runs, "empty-claude-transcript")

    line = run.proposer_of_receipt(site.receipt_path)

    assert line["messages"] == []
    assert line["provenance"]["gap"] == (
        f"claude transcript {site.transcript_path} matched the shot's time window "
        "but holds no conversation messages"
    )
    assert line["artifacts"]["transcript_ref"] == str(site.transcript_path)


def test_an_empty_joined_transcript_counts_as_joined_and_empty(runs: dict[str, Backfilled]) -> None:
    stats = fix_run(runs, "empty-claude-transcript").stats.to_json()

    assert stats["proposerTranscriptsEmpty"] == 1
    assert (stats["proposerShotsJoined"], stats["proposerShotsMissed"]) == (2, 0)


def test_an_empty_joined_transcript_leaves_the_rest_of_the_round_written(
    runs: dict[str, Backfilled], tmp_path: Path
) -> None:
    run = fix_run(runs, "empty-claude-transcript")
    ledger = tmp_path / "ledger.jsonl"

    assert write_ledger(ledger, run.lines) == len(run.lines)
    assert list(read_ledger_dicts(ledger)) == run.lines
    # The joined non-empty transcript holds one inline sub-agent conversation.
    assert run.stats.to_json()["byRole"] == {"agent": 1, "supervisor": 6, "worker": 6, "proposer": 2}


# ---------------------------------------------------------------------------
# Usage counted once per API message id
# ---------------------------------------------------------------------------


def test_usage_is_counted_once_when_the_first_block_line_is_an_empty_thinking_block(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "empty-thinking-first-block")
    assert site.transcript_path is not None
    assistant = [e for e in transcript_lines(site.transcript_path) if e.get("type") == "assistant"]
    first_id = assistant[0]["message"]["id"]
    first_message_lines = [e for e in assistant if e["message"]["id"] == first_id]
    assert first_message_lines[0]["message"]["content"] == [
        {**first_message_lines[0]["message"]["content"][0], "thinking": ""}
    ]
    assert len(first_message_lines) == 3

    line = fix_run(runs, "empty-thinking-first-block").proposer_of_receipt(site.receipt_path)

    usage = claude_usage_once_per_message(site.transcript_path)
    assert {key: line["cost"][key] for key in usage} == usage


def test_an_empty_thinking_block_adds_no_reasoning(runs: dict[str, Backfilled], demo: DemoLayout) -> None:
    site = fix_site(demo, "empty-thinking-first-block")

    line = fix_run(runs, "empty-thinking-first-block").proposer_of_receipt(site.receipt_path)

    first_assistant = line["messages"][1]
    assert first_assistant["role"] == "assistant"
    assert "reasoning_content" not in first_assistant
    assert first_assistant["content"] == "I'll start by reading the current supervisor profile."
    assert [call["function"]["name"] for call in first_assistant["tool_calls"]] == ["Read"]


# ---------------------------------------------------------------------------
# "error": null is no error
# ---------------------------------------------------------------------------


def test_an_explicit_null_error_is_no_error(runs: dict[str, Backfilled], demo: DemoLayout) -> None:
    site = fix_site(demo, "error-null")
    record = read_json(site.cell_dir / "cached-result.json")
    assert "error" in record and record["error"] is None and record["artifact"] is not None

    line = fix_run(runs, "error-null").supervisor_of_cell(site.cell_dir)

    assert line["outcome"]["is_completed"] is True
    assert line["outcome"]["error"] is None


# ---------------------------------------------------------------------------
# A legacy opencode store (no cost/token columns): the spend its messages record, not 0
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def legacy_layout(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(
        tmp_path_factory.mktemp("legacy"), rounds=[small_round("legacy")], legacy_opencode_schema=True
    )


@pytest.fixture(scope="module")
def legacy_run(legacy_layout: DemoLayout) -> Backfilled:
    return backfill(
        legacy_layout.rounds[0],
        opencode_db=legacy_layout.opencode_db,
        claude_projects_dir=legacy_layout.claude_projects_dir,
    )


def test_a_legacy_store_gives_the_cost_and_tokens_its_messages_record(
    legacy_run: Backfilled, legacy_layout: DemoLayout
) -> None:
    # Summed here with SQLite's own JSON functions over each session's assistant messages.
    spend = {}
    connection = sqlite3.connect(legacy_layout.opencode_db)
    for row in connection.execute(
        "SELECT session_id, sum(json_extract(data, '$.cost')), sum(json_extract(data, '$.tokens.input')), "
        "sum(json_extract(data, '$.tokens.output')), sum(json_extract(data, '$.tokens.reasoning')), "
        "sum(json_extract(data, '$.tokens.cache.read')), sum(json_extract(data, '$.tokens.cache.write')) "
        "FROM message WHERE json_valid(data) AND json_extract(data, '$.role') = 'assistant' GROUP BY session_id"
    ):
        spend[row[0]] = row[1:]
    connection.close()
    workers = legacy_run.role("worker")

    assert len(workers) == 6
    for line in workers:
        cost = line["cost"]
        usd, *tokens = spend[line["artifacts"]["transcript_ref"].removeprefix("opencode:")]
        assert cost["usd"] == pytest.approx(usd)
        keys = ("tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write")
        assert [cost[key] for key in keys] == tokens
        assert isinstance(cost["wall_s"], int)


def test_a_legacy_store_still_gives_the_transcripts(legacy_run: Backfilled) -> None:
    workers = legacy_run.role("worker")

    assert all(line["messages"] and line["outcome"]["is_completed"] for line in workers)
    assert legacy_run.stats.to_json()["workerSessionsJoined"] == 6
    assert legacy_run.stats.to_json()["opencodeDbAvailable"] is True


# ---------------------------------------------------------------------------
# A sidechain-only transcript file is not a candidate
# ---------------------------------------------------------------------------


def test_a_sidechain_only_file_is_not_a_candidate_for_a_shot_without_times(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "sidechain-only-file")
    assert site.transcript_path is not None and site.other_path is not None
    assert sorted(site.transcript_path.parent.iterdir()) == sorted([site.transcript_path, site.other_path])
    assert all(entry.get("isSidechain") is True for entry in transcript_lines(site.other_path))
    receipt = read_json(site.receipt_path)["receipt"]
    assert "startedAt" not in receipt and "completedAt" not in receipt

    line = fix_run(runs, "sidechain-only-file").proposer_of_receipt(site.receipt_path)

    assert line["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert line["messages"] != []
    assert "gap" not in line["provenance"]


# ---------------------------------------------------------------------------
# <synthetic> is never a model
# ---------------------------------------------------------------------------


def test_a_synthetic_last_model_leaves_the_last_real_model(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "synthetic-model")
    assert site.transcript_path is not None
    models = [
        e["message"]["model"] for e in transcript_lines(site.transcript_path) if e.get("type") == "assistant"
    ]
    assert models[-1] == "<synthetic>"
    last_real = [model for model in models if model != "<synthetic>"][-1]

    line = fix_run(runs, "synthetic-model").proposer_of_receipt(site.receipt_path)

    assert line["policy"]["model"] == last_real == "claude-opus-4-1-20250805"


# ---------------------------------------------------------------------------
# A relative or symlinked outDir joins every transcript, as the absolute path does
# ---------------------------------------------------------------------------


def plain_absolute(runs: dict[str, Backfilled]) -> Backfilled:
    run = runs[PLAIN_ROUND.name]
    assert run.stats.to_json()["proposerShotsMissed"] == 0
    assert len(run.role("proposer")) == 2
    return run


def test_a_relative_out_dir_gives_the_lines_of_the_absolute_path(
    runs: dict[str, Backfilled], demo: DemoLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = plain_absolute(runs)
    monkeypatch.chdir(demo.rounds_root)

    relative = backfill(
        Path(PLAIN_ROUND.name), opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
    )

    assert relative.lines == absolute.lines
    assert relative.stats.to_json() == absolute.stats.to_json()


def test_a_relative_out_dir_with_dot_segments_gives_the_lines_of_the_absolute_path(
    runs: dict[str, Backfilled], demo: DemoLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = plain_absolute(runs)
    monkeypatch.chdir(demo.claude_projects_dir)

    relative = backfill(
        Path("..") / "rounds" / "." / PLAIN_ROUND.name,
        opencode_db=demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
    )

    assert relative.lines == absolute.lines


def test_a_symlinked_out_dir_joins_every_proposer_transcript(
    runs: dict[str, Backfilled], demo: DemoLayout, tmp_path: Path
) -> None:
    absolute = plain_absolute(runs)
    link = tmp_path / "link-to-round"
    link.symlink_to(absolute.out_dir, target_is_directory=True)

    linked = backfill(link, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir)

    assert [line["artifacts"]["transcript_ref"] for line in linked.role("proposer")] == [
        line["artifacts"]["transcript_ref"] for line in absolute.role("proposer")
    ]
    assert [line["messages"] for line in linked.role("proposer")] == [
        line["messages"] for line in absolute.role("proposer")
    ]
    assert linked.stats.to_json() == absolute.stats.to_json()


def test_a_symlinked_out_dir_differs_from_the_absolute_path_only_in_the_out_dir_spelling(
    runs: dict[str, Backfilled], demo: DemoLayout, tmp_path: Path
) -> None:
    absolute = plain_absolute(runs)
    link = tmp_path / "link-to-round"
    link.symlink_to(absolute.out_dir, target_is_directory=True)

    linked = backfill(link, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir)

    # Paths built from the outDir (worktree run_dir, candidate patch) keep the name it was
    # given; ids, transcripts and everything else are those of the real path.
    respelled = json.loads(json.dumps(linked.lines).replace(str(link), str(absolute.out_dir)))
    assert respelled == absolute.lines
    assert linked.role("proposer")[0]["artifacts"]["run_dir"].startswith(str(link) + os.sep)


def test_without_a_run_id_the_run_id_is_the_absolute_out_dir_even_when_given_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    monkeypatch.chdir(tmp_path)

    run = backfill(Path("round"), opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    assert [line["run_id"] for line in run.lines] == [str(out_dir)]
    assert run.lines[0]["rollout_id"] == rollout_uuid(f"{out_dir}|supervisor|baseline|a__a-1|0")


def test_without_a_run_id_a_symlinked_out_dir_keeps_the_link_path_as_run_id(tmp_path: Path) -> None:
    # docs/line-format.md resolves the real path only to build worktree paths; the run id (and so
    # every id) of a round without `runId` is the outDir as named. Ambiguous: listed as such.
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    link = tmp_path / "link"
    link.symlink_to(out_dir, target_is_directory=True)

    run = backfill(link, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    assert [line["run_id"] for line in run.lines] == [str(link)]


# ---------------------------------------------------------------------------
# The baseline commit is the first baseline cell's in (scenarioId, rep) order
# ---------------------------------------------------------------------------


def test_the_baseline_commit_is_the_first_cell_in_scenario_and_rep_order(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "baseline-commit-order")
    assert site.other_path is not None
    first_by_key = read_json(site.cell_dir / "cached-result.json")
    first_by_directory = read_json(site.other_path / "cached-result.json")
    assert min(p.name for p in site.campaign_dir.iterdir()) == site.other_path.name
    assert (first_by_key["scenarioId"], first_by_key["rep"]) < (
        first_by_directory["scenarioId"],
        first_by_directory["rep"],
    )
    assert first_by_key["artifact"]["commit"] != first_by_directory["artifact"]["commit"]

    baseline = build_manifest(fix_run(runs, "baseline-commit-order").out_dir).entries[0]

    assert baseline.candidate_id == "baseline"
    assert baseline.commit == first_by_key["artifact"]["commit"]


def test_baseline_cells_keep_their_own_commit_as_profile_commit(
    runs: dict[str, Backfilled], demo: DemoLayout
) -> None:
    site = fix_site(demo, "baseline-commit-order")
    run = fix_run(runs, "baseline-commit-order")

    commits = [
        line["policy"]["profile_commit"]
        for line in run.role("supervisor")
        if line["candidate_id"] == "baseline"
    ]

    assert commits == [
        read_json(site.cell_dir / "cached-result.json")["artifact"]["commit"],
        read_json(site.other_path / "cached-result.json")["artifact"]["commit"],
    ]


# ---------------------------------------------------------------------------
# A cell whose result.json is missing or corrupt says its workers cannot be listed
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fix", ["result-json-missing", "result-json-corrupt"])
def test_a_cell_without_a_readable_result_json_is_flagged_on_its_supervisor(
    runs: dict[str, Backfilled], demo: DemoLayout, fix: str
) -> None:
    site = fix_site(demo, fix)
    assert site.other_path is not None and site.run_dir is not None
    if fix == "result-json-missing":
        assert not site.other_path.exists()
    else:
        assert parsed_or_none(site.other_path.read_text(encoding="utf-8")) is None
    run = fix_run(runs, fix)

    line = run.supervisor_of_cell(site.cell_dir)

    assert line["outcome"]["metrics"]["worker_list_missing"] is True
    assert line["provenance"]["gap"] == SUPERVISOR_GAP + WORKER_LIST_MISSING_SUFFIX
    assert line["provenance"]["gap"] == (
        "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"
        "; result.json missing: this cell's worker sessions cannot be listed"
    )
    assert list(line["outcome"]["metrics"])[-1] == "worker_list_missing"


@pytest.mark.parametrize("fix", ["result-json-missing", "result-json-corrupt"])
def test_a_cell_without_a_readable_result_json_has_no_worker_lines_though_sessions_exist(
    runs: dict[str, Backfilled], demo: DemoLayout, fix: str
) -> None:
    site = fix_site(demo, fix)
    assert site.run_dir is not None and site.worker_cwd is not None
    assert len(session_rows(demo.opencode_db, site.worker_cwd)) == 1
    run = fix_run(runs, fix)

    assert run.workers_of(run.supervisor_of_cell(site.cell_dir)) == []


@pytest.mark.parametrize("fix", ["result-json-missing", "result-json-corrupt"])
def test_cells_without_a_worker_list_are_counted(runs: dict[str, Backfilled], fix: str) -> None:
    run = fix_run(runs, fix)

    stats = run.stats.to_json()

    assert stats["cellsWithoutWorkerList"] == 1
    assert stats["byGapReason"]["supervisor_worker_list_missing"] == 1
    flagged = [s for s in run.role("supervisor") if s["outcome"]["metrics"].get("worker_list_missing")]
    assert len(flagged) == 1


# ---------------------------------------------------------------------------
# Rounds without these cases give exactly the seed's lines
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("round_name", [PLAIN_ROUND.name, EDGE_ROUND.name])
def test_a_round_without_fixes_has_no_worker_list_missing_key(
    runs: dict[str, Backfilled], round_name: str
) -> None:
    run = runs[round_name]

    assert all("worker_list_missing" not in line["outcome"]["metrics"] for line in run.role("supervisor"))
    assert all(line["provenance"]["gap"] == SUPERVISOR_GAP for line in run.role("supervisor"))
    assert run.stats.to_json()["cellsWithoutWorkerList"] == 0
    assert run.stats.to_json()["proposerTranscriptsEmpty"] == 0


def test_an_errored_cell_without_run_dir_is_not_flagged(runs: dict[str, Backfilled]) -> None:
    run = runs[EDGE_ROUND.name]
    errored = [line for line in run.role("supervisor") if line["outcome"]["error"] is not None]

    assert len(errored) == 1
    assert errored[0]["artifacts"]["run_dir"] is None
    assert "worker_list_missing" not in errored[0]["outcome"]["metrics"]
