"""The backfill join over generated demo rounds: line order, ids, every planted edge case, stats.

The demo rounds are written once per session (`write_demo`) and only read by these tests.
Expected values are recomputed from the round's own files and the opencode store, never taken
from the code under test; where a planted case needs a precondition (a receipt that really is
not JSON, a folder that really is missing), the test asserts it first, so a change in the demo
cannot turn a test into a tautology.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.backfill.ids import supervisor_rollout_id
from rollout_assets.demo import (
    DEFAULT_ROUNDS,
    NON_ASCII_SAMPLE,
    DemoLayout,
    EdgeCaseSite,
    edge_case_sites,
    write_demo,
)
from rollout_assets.ledger import read_ledger, read_ledger_dicts, serialize_line, write_ledger
from rollout_assets.sources.claude import claude_project_slug
from rollout_assets.sources.round import RoundInputError, build_manifest
from rollout_assets_tests.audit_runs import audit_inputs_match
from rollout_assets_tests.backfill_runs import (
    SEED_STATS_KEYS,
    SUPERVISOR_GAP,
    WORKER_LIST_MISSING_SUFFIX,
    Backfilled,
    backfill,
    candidate_of_campaign,
    claude_usage_once_per_message,
    parsed_or_none,
    rollout_uuid,
    session_message_data,
    session_parts,
    session_rows,
    without_captured_at,
)
from rollout_assets_tests.builders import (
    artifact,
    assistant_line,
    campaign_dir,
    cell,
    message,
    part,
    session,
    user_line,
    write_cell,
    write_json,
    write_opencode_db,
    write_transcript,
)

ROUND_001 = DEFAULT_ROUNDS[0]
RUN_ID_001 = "improve-round-001"
_RECEIPT_NAME = re.compile(r"gen(\d+)-cand(\d+)-shot(\d+)\.json")


# ---------------------------------------------------------------------------
# Fixtures: the demo rounds, written and backfilled once
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def rounds(demo: DemoLayout) -> dict[str, Backfilled]:
    return {
        out_dir.name: backfill(
            out_dir, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
        )
        for out_dir in demo.rounds
    }


@pytest.fixture(scope="module")
def round_001(rounds: dict[str, Backfilled]) -> Backfilled:
    return rounds["round-001"]


@pytest.fixture(scope="module")
def sites(demo: DemoLayout) -> dict[str, EdgeCaseSite]:
    return edge_case_sites(demo.root, ROUND_001)


def site_cwd(site: EdgeCaseSite) -> str:
    assert site.worker_cwd is not None
    return site.worker_cwd


def only_worker_line(run: Backfilled, worker_cwd: str) -> dict[str, Any]:
    lines = run.worker_lines_of_cwd(worker_cwd)
    assert len(lines) == 1
    return lines[0]


def session_id_of(line: dict[str, Any]) -> str:
    ref = line["artifacts"]["transcript_ref"]
    assert ref.startswith("opencode:")
    return ref.removeprefix("opencode:")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def listed_worker_cwds(run_dir: str) -> list[Any]:
    return read_json(Path(run_dir) / "result.json")["recoveredSpend"]["workerCwds"]


def distinct_strings(values: list[Any]) -> list[str]:
    return list(dict.fromkeys(value for value in values if isinstance(value, str)))


def expected_worker_cwds(run_dir: str | None) -> list[str]:
    """The distinct string worker cwds a cell's readable result.json lists ([] without one)."""
    result_path = None if run_dir is None else Path(run_dir) / "result.json"
    if result_path is None or not result_path.is_file():
        return []
    result = parsed_or_none(result_path.read_text(encoding="utf-8"))
    if not isinstance(result, dict):
        return []
    return distinct_strings(result["recoveredSpend"]["workerCwds"])


def receipt_files(out_dir: Path) -> list[str]:
    """Every receipt of the round, flat or in an author folder, as absolute path strings."""
    shots = out_dir / "proposer-shots"
    found = [p for p in shots.iterdir() if p.is_file() and _RECEIPT_NAME.fullmatch(p.name)]
    for author in (p for p in shots.iterdir() if p.is_dir()):
        found += [p for p in author.iterdir() if _RECEIPT_NAME.fullmatch(p.name)]
    return [str(p) for p in found]


def receipt_of_line(out_dir: Path, line: dict[str, Any]) -> str:
    author = line["outcome"]["metrics"]["author"]
    folder = out_dir / "proposer-shots" if author is None else out_dir / "proposer-shots" / author
    return str(folder / f"{line['candidate_id']}-shot{line['task']['rep']}.json")


def expected_recount(opencode_db: Path, session_id: str) -> int:
    """Chat messages a session must give, recounted from its raw rows: one per readable user
    message, one per assistant step (every demo step holds text, reasoning or a tool call),
    one per tool part."""
    users = sum(
        1
        for data in session_message_data(opencode_db, session_id)
        if isinstance(parsed_or_none(data), dict) and parsed_or_none(data).get("role") == "user"
    )
    parts = [parsed_or_none(data) for data in session_parts(opencode_db, session_id)]
    steps = sum(1 for p in parts if isinstance(p, dict) and p.get("type") == "step-start")
    tools = sum(1 for p in parts if isinstance(p, dict) and p.get("type") == "tool")
    return users + steps + tools


# ---------------------------------------------------------------------------
# Line order
# ---------------------------------------------------------------------------


def expected_cell_keys(out_dir: Path) -> list[tuple[str, str, int]]:
    """(candidate id, scenarioId, rep) of every cell, in ledger order, from the round's files."""
    improve_run = out_dir / "improve-run"
    campaigns = [improve_run / "baseline"]
    generations = sorted(improve_run.glob("gen-*"), key=lambda p: int(p.name.removeprefix("gen-")))
    for generation in generations:
        campaigns += sorted(
            generation.glob("candidate-*"), key=lambda p: int(p.name.removeprefix("candidate-"))
        )
    keys = []
    for campaign in campaigns:
        records = [read_json(p) for p in campaign.glob("*/cached-result.json")]
        records.sort(key=lambda r: (r["scenarioId"], r["rep"]))
        keys += [(candidate_of_campaign(campaign), r["scenarioId"], r["rep"]) for r in records]
    return keys


@pytest.mark.parametrize("round_name", ["round-001", "round-002", "round-003"])
def test_supervisor_lines_follow_baseline_then_generation_candidate_then_scenario_and_rep(
    rounds: dict[str, Backfilled], round_name: str
) -> None:
    run = rounds[round_name]
    actual = [
        (line["candidate_id"], line["task"]["instance_id"], line["task"]["rep"])
        for line in run.role("supervisor")
    ]

    assert actual == expected_cell_keys(run.out_dir)


def test_cells_are_ordered_by_scenario_id_code_point_then_numeric_rep(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    baseline = campaign_dir(out_dir)
    for name, scenario, rep in [("c1", "alpha__a-1", 0), ("c2", "Zeta__z-1", 10), ("c3", "Zeta__z-1", 2)]:
        write_cell(baseline, name, cell(scenario, rep))

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    # Code points: "Z" (U+005A) sorts before "a" (U+0061); locale collation would put "alpha" first.
    assert [(line["task"]["instance_id"], line["task"]["rep"]) for line in run.lines] == [
        ("Zeta__z-1", 2),
        ("Zeta__z-1", 10),
        ("alpha__a-1", 0),
    ]


@pytest.mark.parametrize("round_name", ["round-001", "round-002", "round-003"])
def test_each_supervisor_is_directly_followed_by_its_workers_in_result_json_cwd_order(
    rounds: dict[str, Backfilled], round_name: str
) -> None:
    run = rounds[round_name]
    cells = [line for line in run.lines if line["role"] != "proposer"]
    for index, supervisor in enumerate(cells):
        if supervisor["role"] != "supervisor":
            continue
        following = []
        for line in cells[index + 1 :]:
            if line["role"] != "worker":
                break
            following.append(line)
        assert all(line["parent_rollout_id"] == supervisor["rollout_id"] for line in following)
        expected = expected_worker_cwds(supervisor["artifacts"]["run_dir"])
        assert distinct_strings([line["outcome"]["metrics"]["worker_cwd"] for line in following]) == expected
    assert sum(1 for line in cells if line["role"] == "worker") == len(run.role("worker"))


@pytest.mark.parametrize("round_name", ["round-001", "round-002", "round-003"])
def test_proposer_lines_come_last_sorted_by_receipt_path(
    rounds: dict[str, Backfilled], round_name: str
) -> None:
    run = rounds[round_name]
    proposers = run.role("proposer")
    # Each proposer line is followed by the lines of its sub-agent conversations, if any.
    tail = run.lines[-len(proposers) - len(run.role("agent")) :]

    assert [line for line in tail if line["role"] == "proposer"] == proposers
    assert all(line["role"] in ("proposer", "agent") for line in tail)
    assert [receipt_of_line(run.out_dir, line) for line in proposers] == sorted(receipt_files(run.out_dir))


def test_round_001_proposer_order_is_code_point_order_of_receipt_paths(round_001: Backfilled) -> None:
    assert [receipt_of_line(round_001.out_dir, line) for line in round_001.role("proposer")] == [
        str(round_001.out_dir / "proposer-shots" / "birch" / "gen1-cand1-shot0.json"),
        str(round_001.out_dir / "proposer-shots" / "cedar" / "gen0-cand1-shot0.json"),
        str(round_001.out_dir / "proposer-shots" / "dune" / "gen1-cand0-shot0.json"),
        str(round_001.out_dir / "proposer-shots" / "gen0-cand0-shot0.json"),
    ]


# ---------------------------------------------------------------------------
# Deterministic ids (docs/line-format.md, Ids)
# ---------------------------------------------------------------------------


def test_the_run_id_is_the_loop_provenance_run_id(round_001: Backfilled) -> None:
    provenance = read_json(round_001.out_dir / "improve-run" / "loop-provenance.json")

    assert provenance["runId"] == RUN_ID_001
    assert {line["run_id"] for line in round_001.lines} == {RUN_ID_001}


def test_a_supervisor_id_is_uuid5_of_run_role_candidate_scenario_and_rep(round_001: Backfilled) -> None:
    supervisor = round_001.role("supervisor")[0]

    assert (supervisor["candidate_id"], supervisor["task"]["instance_id"], supervisor["task"]["rep"]) == (
        "baseline",
        "astropy__astropy-12907",
        0,
    )
    assert supervisor["rollout_id"] == rollout_uuid(
        "improve-round-001|supervisor|baseline|astropy__astropy-12907|0"
    )


def test_an_id_is_uuid5_of_its_name_and_defined_for_a_name_holding_a_lone_surrogate() -> None:
    name = "run|supervisor|gen0-cand0|naïve-日本語|0"
    assert supervisor_rollout_id("run", "gen0-cand0", "naïve-日本語", 0) == rollout_uuid(name)
    torn = supervisor_rollout_id("run", "gen0-cand0", "astropy\ud83d", 0)
    # uuid5's own algorithm over the name's bytes, the surrogate written as UTF-8 would be.
    digest = hashlib.sha1(
        uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1").bytes
        + "run|supervisor|gen0-cand0|astropy\ud83d|0".encode("utf-8", "surrogatepass")
    ).digest()
    assert torn == str(uuid.UUID(bytes=digest[:16], version=5))


def test_every_supervisor_id_follows_the_rule(round_001: Backfilled) -> None:
    for line in round_001.role("supervisor"):
        name = f"{RUN_ID_001}|supervisor|{line['candidate_id']}|{line['task']['instance_id']}|{line['task']['rep']}"
        assert line["rollout_id"] == rollout_uuid(name)


def test_a_worker_id_is_uuid5_of_supervisor_id_cwd_and_session_id(
    round_001: Backfilled, demo: DemoLayout
) -> None:
    supervisor = round_001.role("supervisor")[0]
    worker = round_001.workers_of(supervisor)[0]
    # The first clone the cell's result.json lists: a folder of the worker's own name.
    result = json.loads((Path(supervisor["artifacts"]["run_dir"]) / "result.json").read_text())
    cwd = result["recoveredSpend"]["workerCwds"][0]
    assert cwd.startswith(f"{demo.root}/worker-clones/round-001/loops-w-0-")
    (row,) = session_rows(demo.opencode_db, cwd)

    assert worker["outcome"]["metrics"]["worker_cwd"] == cwd
    assert worker["rollout_id"] == rollout_uuid(f"{supervisor['rollout_id']}|{cwd}|{row['id']}")


def test_every_worker_id_follows_the_rule_with_a_dash_for_no_session(round_001: Backfilled) -> None:
    for line in round_001.role("worker"):
        ref = line["artifacts"]["transcript_ref"]
        session_part = "-" if ref is None else ref.removeprefix("opencode:")
        name = f"{line['parent_rollout_id']}|{line['outcome']['metrics']['worker_cwd']}|{session_part}"
        assert line["rollout_id"] == rollout_uuid(name)


def test_a_proposer_id_is_uuid5_of_run_role_and_receipt_path_relative_to_the_out_dir(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    receipt = sites["per_author_receipt"].receipt_path
    assert receipt is not None
    line = round_001.proposer_of_receipt(receipt)

    assert line["rollout_id"] == rollout_uuid(
        "improve-round-001|proposer|proposer-shots/cedar/gen0-cand1-shot0.json"
    )


def test_rollout_ids_are_unique_within_every_round(rounds: dict[str, Backfilled]) -> None:
    for run in rounds.values():
        ids = [line["rollout_id"] for line in run.lines]
        assert len(set(ids)) == len(ids)


def test_two_runs_give_identical_lines_apart_from_captured_at(demo: DemoLayout) -> None:
    out_dir = demo.rounds[0]
    first = backfill(
        out_dir, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir, captured_at=None
    )
    second = backfill(
        out_dir, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir, captured_at=None
    )

    assert without_captured_at(first.lines) == without_captured_at(second.lines)


def test_every_line_of_a_run_shares_one_utc_captured_at(demo: DemoLayout) -> None:
    run = backfill(
        demo.rounds[0],
        opencode_db=demo.opencode_db,
        claude_projects_dir=demo.claude_projects_dir,
        captured_at=None,
    )
    stamps = {line["provenance"]["captured_at"] for line in run.lines}

    assert len(stamps) == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamps.pop())
    assert {line["provenance"]["capture"] for line in run.lines} == {"backfill"}


# ---------------------------------------------------------------------------
# Edge cases planted by the demo (round-001; see demo.EDGE_CASE_LOCATIONS)
# ---------------------------------------------------------------------------


def test_a_cwd_listed_twice_gives_one_set_of_lines(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["cwd_listed_twice"]
    assert site.run_dir is not None
    listed = listed_worker_cwds(str(site.run_dir))
    assert listed.count(site_cwd(site)) == 2
    supervisor = round_001.supervisor_of_cell(site.cell_dir)

    cwds = [line["outcome"]["metrics"]["worker_cwd"] for line in round_001.workers_of(supervisor)]

    assert cwds == distinct_strings(listed)
    assert cwds.count(site_cwd(site)) == 1


def test_a_cwd_with_two_sessions_gives_two_lines_oldest_session_first(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["cwd_with_two_sessions"])
    rows = session_rows(demo.opencode_db, cwd)
    assert len(rows) == 2 and rows[0]["time_created"] < rows[1]["time_created"]

    lines = round_001.worker_lines_of_cwd(cwd)

    assert [session_id_of(line) for line in lines] == [rows[0]["id"], rows[1]["id"]]
    assert [line["outcome"]["metrics"]["session_parent_id"] for line in lines] == [None, rows[0]["id"]]
    assert [line["outcome"]["metrics"]["session_agent"] for line in lines] == ["build", "general"]
    first = round_001.lines.index(lines[0])
    assert round_001.lines[first + 1] is lines[1]


def test_a_cwd_without_session_gives_one_gap_line(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["cwd_without_session"])
    assert session_rows(demo.opencode_db, cwd) == []

    line = only_worker_line(round_001, cwd)

    assert line["messages"] == []
    assert line["provenance"]["gap"] == f"no opencode session found for worker cwd {cwd}"
    assert line["outcome"]["metrics"]["has_session"] is False
    assert line["outcome"]["is_completed"] is False
    assert line["artifacts"]["transcript_ref"] is None
    assert line["policy"]["model"] is None and line["policy"]["provider"] is None
    assert set(line["cost"].values()) == {None}


def test_a_session_without_message_rows_is_a_gap_line_naming_the_session(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["session_without_messages"])
    (row,) = session_rows(demo.opencode_db, cwd)
    assert session_message_data(demo.opencode_db, row["id"]) == []

    line = only_worker_line(round_001, cwd)

    assert line["messages"] == []
    assert line["provenance"]["gap"] == f"opencode session {row['id']} has no readable message parts"
    assert line["outcome"]["metrics"]["has_session"] is True
    assert line["outcome"]["is_completed"] is False
    assert line["artifacts"]["transcript_ref"] == f"opencode:{row['id']}"


def test_a_session_whose_messages_are_all_malformed_is_a_gap_line_naming_the_session(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["session_with_only_malformed_messages"])
    (row,) = session_rows(demo.opencode_db, cwd)
    raw_messages = session_message_data(demo.opencode_db, row["id"])
    assert len(raw_messages) == 2 and all(parsed_or_none(data) is None for data in raw_messages)

    line = only_worker_line(round_001, cwd)

    assert line["messages"] == []
    assert line["provenance"]["gap"] == f"opencode session {row['id']} has no readable message parts"
    assert line["outcome"]["is_completed"] is False


def test_a_malformed_part_is_skipped_and_the_rest_of_the_session_kept(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["malformed_part"])
    line = only_worker_line(round_001, cwd)
    raw_parts = session_parts(demo.opencode_db, session_id_of(line))
    assert sum(1 for data in raw_parts if parsed_or_none(data) is None) == 1

    assert len(line["messages"]) == expected_recount(demo.opencode_db, session_id_of(line))
    assert not any("I will now read the fi" in (m["content"] or "") for m in line["messages"])
    assert line["messages"][-1]["content"] == "The regression test passes now; the patch is ready."
    assert line["outcome"]["is_completed"] is True
    assert "gap" not in line["provenance"]


def test_a_malformed_message_is_skipped_and_the_rest_of_the_session_kept(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["malformed_message"])
    line = only_worker_line(round_001, cwd)
    raw_messages = session_message_data(demo.opencode_db, session_id_of(line))
    assert sum(1 for data in raw_messages if parsed_or_none(data) is None) == 1

    assert len(line["messages"]) == expected_recount(demo.opencode_db, session_id_of(line))
    assert line["messages"][0]["role"] == "user"
    assert line["outcome"]["is_completed"] is True


def test_a_very_long_tool_output_is_kept_whole(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    line = only_worker_line(round_001, site_cwd(sites["very_long_tool_output"]))
    tool_parts = [
        p
        for p in map(parsed_or_none, session_parts(demo.opencode_db, session_id_of(line)))
        if p["type"] == "tool"
    ]
    stored_output = tool_parts[0]["state"]["output"]
    assert len(stored_output.encode("utf-8")) >= 200_000

    first_tool_message = next(m for m in line["messages"] if m["role"] == "tool")

    assert first_tool_message["content"] == stored_output
    assert first_tool_message["tool_call_id"] == tool_parts[0]["callID"]


def test_a_non_string_tool_output_becomes_its_compact_json_text(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    line = only_worker_line(round_001, site_cwd(sites["non_string_tool_output"]))
    tool_parts = [
        p
        for p in map(parsed_or_none, session_parts(demo.opencode_db, session_id_of(line)))
        if p["type"] == "tool"
    ]
    stored_output = tool_parts[0]["state"]["output"]
    assert isinstance(stored_output, dict)

    first_tool_message = next(m for m in line["messages"] if m["role"] == "tool")

    assert first_tool_message["content"] == json.dumps(
        stored_output, separators=(",", ":"), ensure_ascii=False
    )
    assert first_tool_message["name"] == "todowrite"


def test_a_session_lasting_a_whole_second_plus_500_ms_rounds_its_wall_time_up(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    cwd = site_cwd(sites["half_second_wall_time"])
    (row,) = session_rows(demo.opencode_db, cwd)
    elapsed_ms = row["time_updated"] - row["time_created"]
    assert elapsed_ms % 1000 == 500

    assert only_worker_line(round_001, cwd)["cost"]["wall_s"] == elapsed_ms // 1000 + 1


def test_a_non_string_worker_cwd_is_ignored(round_001: Backfilled, sites: dict[str, EdgeCaseSite]) -> None:
    site = sites["non_string_worker_cwd"]
    listed = listed_worker_cwds(str(site.run_dir))
    assert None in listed
    supervisor = round_001.supervisor_of_cell(site.cell_dir)

    workers = round_001.workers_of(supervisor)

    assert [line["outcome"]["metrics"]["worker_cwd"] for line in workers] == [
        c for c in listed if c is not None
    ]
    assert all(line["messages"] for line in workers)


def test_an_errored_cell_is_an_incomplete_supervisor_without_reward_or_workers(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["errored_cell"]
    record = read_json(site.cell_dir / "cached-result.json")
    assert record["artifact"] is None and "judgeScores" not in record

    line = round_001.supervisor_of_cell(site.cell_dir)

    assert line["outcome"]["is_completed"] is False
    assert line["outcome"]["error"] == record["error"]
    assert line["outcome"]["reward"] is None
    assert line["outcome"]["reward_source"] is None
    assert line["outcome"]["verdict"] is None
    assert line["artifacts"] == {"patch_path": None, "run_dir": None, "transcript_ref": None}
    assert line["cost"]["usd"] == record["costUsd"] and line["cost"]["wall_s"] is None
    assert line["provenance"]["gap"] == SUPERVISOR_GAP
    assert "worker_list_missing" not in line["outcome"]["metrics"]
    assert round_001.workers_of(line) == []


def test_an_errored_cell_with_a_composite_score_is_rewarded_by_the_composite(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    record = cell(
        "a__a-1",
        0,
        artifact=None,
        error="arm crashed",
        judgeScores={"swe-arena-official-judge": {"composite": 0.37}},
    )
    write_cell(campaign_dir(out_dir), "c", record)

    (line,) = backfill(
        out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude"
    ).lines

    assert line["outcome"]["reward"] == 0.37
    assert line["outcome"]["reward_source"] == "swe-arena-official-judge"
    assert line["outcome"]["is_completed"] is False
    assert line["outcome"]["error"] == "arm crashed"


def test_a_composite_judge_score_is_the_reward_over_resolved(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["composite_judge_score"]
    record = read_json(site.cell_dir / "cached-result.json")
    assert isinstance(record["artifact"]["resolved"], bool)

    supervisor = round_001.supervisor_of_cell(site.cell_dir)
    workers = round_001.workers_of(supervisor)

    assert supervisor["outcome"]["reward"] == 0.62
    assert supervisor["outcome"]["reward_source"] == "swe-arena-official-judge"
    assert len(workers) == 2
    assert [(w["outcome"]["reward"], w["outcome"]["reward_source"]) for w in workers] == [
        (0.62, "swe-arena-official-judge/inherited")
    ] * 2


def test_a_cell_without_reward_leaves_its_workers_unrewarded_too(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["cell_without_reward"]
    record = read_json(site.cell_dir / "cached-result.json")
    assert "judgeScores" not in record and record["artifact"]["resolved"] is None

    supervisor = round_001.supervisor_of_cell(site.cell_dir)
    workers = round_001.workers_of(supervisor)

    assert (supervisor["outcome"]["reward"], supervisor["outcome"]["reward_source"]) == (None, None)
    assert supervisor["outcome"]["verdict"] is None
    assert supervisor["outcome"]["metrics"]["resolved"] is None
    assert len(workers) == 2
    assert [(w["outcome"]["reward"], w["outcome"]["reward_source"]) for w in workers] == [(None, None)] * 2


def test_a_running_supervisor_is_truncated(round_001: Backfilled, sites: dict[str, EdgeCaseSite]) -> None:
    site = sites["sup_status_running"]
    assert read_json(site.other_path)["sup_status"] == "running"

    line = round_001.supervisor_of_cell(site.cell_dir)

    assert line["outcome"]["is_truncated"] is True
    assert line["outcome"]["is_completed"] is True
    assert line["outcome"]["metrics"]["sup_status"] == "running"
    assert line["outcome"]["metrics"]["sup_verdict"] is None


def test_a_flat_receipt_has_no_author(round_001: Backfilled, sites: dict[str, EdgeCaseSite]) -> None:
    site = sites["flat_receipt"]
    assert site.receipt_path == round_001.out_dir / "proposer-shots" / "gen0-cand0-shot0.json"

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["task"] == {
        "suite": "swe-arena-proposer",
        "instance_id": "gen0-cand0",
        "split": "search",
        "seed": None,
        "rep": 0,
    }
    assert line["outcome"]["metrics"]["author"] is None
    assert line["artifacts"]["run_dir"] == str(round_001.out_dir / "proposer-wt" / "gen0-cand0")


def test_a_per_author_receipt_suffixes_the_instance_id_with_the_author(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["per_author_receipt"]
    assert site.receipt_path == round_001.out_dir / "proposer-shots" / "cedar" / "gen0-cand1-shot0.json"

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["candidate_id"] == "gen0-cand1"
    assert line["task"]["instance_id"] == "gen0-cand1-cedar"
    assert line["outcome"]["metrics"]["author"] == "cedar"
    assert line["artifacts"]["run_dir"] == str(round_001.out_dir / "proposer-wt" / "gen0-cand1-cedar")


def test_a_receipt_without_timestamps_joins_its_only_transcript(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["receipt_without_timestamps"]
    receipt = read_json(site.receipt_path)["receipt"]
    assert "startedAt" not in receipt and "completedAt" not in receipt
    assert site.transcript_path is not None
    assert sorted(p.name for p in site.transcript_path.parent.iterdir()) == [site.transcript_path.name]

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert line["messages"] != []
    assert "gap" not in line["provenance"]


def test_a_transcript_outside_the_window_is_not_chosen(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["transcript_outside_window"]
    assert site.other_path is not None and site.transcript_path is not None
    assert site.other_path.is_file() and site.other_path.parent == site.transcript_path.parent

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["artifacts"]["transcript_ref"] == str(site.transcript_path)


def test_a_missing_transcript_folder_is_a_gap_line_pointing_at_the_receipt(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], demo: DemoLayout
) -> None:
    site = sites["missing_transcript_folder"]
    slug = re.sub(r"[^A-Za-z0-9-]", "-", str(site.worktree))
    assert not (demo.claude_projects_dir / slug).exists()
    receipt = read_json(site.receipt_path)["receipt"]

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["messages"] == []
    assert line["provenance"]["gap"] == (
        f"no claude transcript matched worktree {site.worktree} in the shot's time window"
    )
    assert line["artifacts"]["transcript_ref"] == str(site.receipt_path)
    assert line["artifacts"]["run_dir"] == str(site.worktree)
    assert line["policy"]["model"] == receipt["model"]
    assert [line["cost"][key] for key in ("tokens_in", "tokens_out", "cache_read", "cache_write")] == [
        None
    ] * 4


def test_a_timed_out_shot_is_truncated_and_not_completed(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["timed_out_shot"]
    receipt = read_json(site.receipt_path)["receipt"]
    assert receipt["timedOut"] is True and receipt["exitCode"] == 124

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["outcome"]["is_truncated"] is True
    assert line["outcome"]["is_completed"] is False
    assert line["outcome"]["error"] == receipt["error"]
    assert (line["outcome"]["metrics"]["exit_code"], line["outcome"]["metrics"]["timed_out"]) == (124, True)


def test_a_candidate_without_a_patch_has_a_null_patch_path(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["candidate_without_patch"]
    assert site.other_path is not None and not site.other_path.exists()

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["artifacts"]["patch_path"] is None


def test_a_candidate_with_a_patch_points_at_it(round_001: Backfilled, sites: dict[str, EdgeCaseSite]) -> None:
    site = sites["flat_receipt"]
    line = round_001.proposer_of_receipt(site.receipt_path)
    commit = read_json(next(site.campaign_dir.glob("*/cached-result.json")))["artifact"]["commit"]
    patch = round_001.out_dir / "candidates" / f"{commit[:10]}.patch"
    assert patch.is_file()

    assert line["artifacts"]["patch_path"] == str(patch)
    assert line["policy"]["profile_commit"] == commit


def test_a_receipt_that_is_not_json_still_gives_a_line_with_null_receipt_fields(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["receipt_not_json"]
    assert parsed_or_none(site.receipt_path.read_text(encoding="utf-8")) is None

    line = round_001.proposer_of_receipt(site.receipt_path)

    assert line["policy"]["harness"] is None
    metrics = line["outcome"]["metrics"]
    assert [metrics[key] for key in ("exit_code", "timed_out", "max_shots", "prompt_sha256")] == [None] * 4
    assert (line["outcome"]["is_completed"], line["outcome"]["is_truncated"], line["outcome"]["error"]) == (
        False,
        False,
        None,
    )
    assert (line["cost"]["usd"], line["cost"]["wall_s"]) == (None, None)
    # Its worktree holds exactly one transcript, which a receipt without times may join.
    assert line["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert line["policy"]["model"] == "claude-opus-4-1-20250805"


def test_non_ascii_text_is_kept_in_lines_and_in_the_ledger_file(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite], tmp_path: Path
) -> None:
    line = round_001.worker_lines_of_cwd(site_cwd(sites["non_ascii_text"]))[0]
    assert NON_ASCII_SAMPLE in line["messages"][0]["content"]

    ledger = tmp_path / "ledger.jsonl"
    write_ledger(ledger, [line])

    assert NON_ASCII_SAMPLE.encode("utf-8") in ledger.read_bytes()
    assert serialize_line(line).encode("utf-8") + b"\n" == ledger.read_bytes()


def test_a_garbage_cost_ledger_line_is_skipped(round_001: Backfilled, sites: dict[str, EdgeCaseSite]) -> None:
    ledger = sites["cost_ledger_garbage_line"].other_path
    assert ledger is not None
    assert parsed_or_none(ledger.read_text(encoding="utf-8").splitlines()[-1]) is None

    manifest = build_manifest(round_001.out_dir)

    assert manifest.cost_ledger_skipped == 1
    assert len(round_001.role("supervisor")) == sum(len(entry.cells) for entry in manifest.entries)


# ---------------------------------------------------------------------------
# The opencode store unavailable
# ---------------------------------------------------------------------------


def all_listed_worker_cwds(out_dir: Path) -> list[str]:
    """Distinct string worker cwds of every cell's result.json, per cell, from the files."""
    cwds: list[str] = []
    for cached in out_dir.glob("improve-run/**/cached-result.json"):
        record = read_json(cached)
        cwds += expected_worker_cwds((record["artifact"] or {}).get("runDir"))
    return cwds


def assert_store_unavailable(run: Backfilled, problem: str | None = None) -> None:
    """Every worker line is the store-unavailable gap, saying why (`problem`) when the store is there."""
    workers = run.role("worker")
    expected_cwds = all_listed_worker_cwds(run.out_dir)
    assert sorted(line["outcome"]["metrics"]["worker_cwd"] for line in workers) == sorted(expected_cwds)
    for line in workers:
        cwd = line["outcome"]["metrics"]["worker_cwd"]
        assert line["messages"] == []
        why = "" if problem is None else f" ({problem})"
        assert line["provenance"]["gap"] == f"opencode store unavailable; worker cwd {cwd} unrecoverable{why}"
        assert line["outcome"]["metrics"]["has_session"] is False
        assert line["outcome"]["is_completed"] is False
    stats = run.stats.to_json()
    assert stats["opencodeDbAvailable"] is False
    assert stats["workerCwdsMissed"] == len(expected_cwds)
    assert (stats["workerSessionsJoined"], stats["workerSessionsEmpty"]) == (0, 0)


def test_a_missing_opencode_store_turns_every_worker_into_an_unavailable_gap_line(
    demo: DemoLayout, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such" / "opencode.db"

    run = backfill(demo.rounds[0], opencode_db=missing, claude_projects_dir=demo.claude_projects_dir)

    assert_store_unavailable(run)


def test_a_garbage_bytes_store_behaves_like_a_missing_one(demo: DemoLayout, tmp_path: Path) -> None:
    garbage = tmp_path / "opencode.db"
    garbage.write_bytes(os.urandom(8192))
    missing = backfill(
        demo.rounds[0], opencode_db=tmp_path / "absent.db", claude_projects_dir=demo.claude_projects_dir
    )

    run = backfill(demo.rounds[0], opencode_db=garbage, claude_projects_dir=demo.claude_projects_dir)

    assert_store_unavailable(run, f"{garbage}: not an SQLite database")
    # The same lines but for the reason their gaps give (a missing store needs none).
    as_missing = json.loads(json.dumps(run.lines).replace(f" ({garbage}: not an SQLite database)", ""))
    assert as_missing == missing.lines
    assert run.stats.to_json() == missing.stats.to_json()


# ---------------------------------------------------------------------------
# Stats
# ---------------------------------------------------------------------------


def recount(run: Backfilled, opencode_available: bool) -> dict[str, Any]:
    """The stats of docs/line-format.md, recounted from the lines' own fields."""
    lines = run.lines
    by_role: dict[str, int] = {}
    for line in lines:
        by_role[line["role"]] = by_role.get(line["role"], 0) + 1
    workers = [line for line in lines if line["role"] == "worker"]
    proposers = [line for line in lines if line["role"] == "proposer"]
    supervisors = [line for line in lines if line["role"] == "supervisor"]
    # A shot that matched no transcript points at its receipt instead.
    missed = [
        line
        for line in proposers
        if line["artifacts"]["transcript_ref"] == receipt_of_line(run.out_dir, line)
    ]
    return {
        "lines": len(lines),
        "byRole": by_role,
        "fullTranscripts": sum(1 for line in lines if line["messages"]),
        "gapLines": sum(1 for line in lines if not line["messages"]),
        "rewardLabeled": sum(1 for line in lines if line["outcome"]["reward"] is not None),
        "workerSessionsJoined": sum(1 for line in workers if line["messages"]),
        "workerCwdsMissed": sum(1 for line in workers if line["artifacts"]["transcript_ref"] is None),
        "workerSessionsEmpty": sum(
            1 for line in workers if line["artifacts"]["transcript_ref"] is not None and not line["messages"]
        ),
        "proposerShotsJoined": len(proposers) - len(missed),
        "proposerShotsMissed": len(missed),
        "opencodeDbAvailable": opencode_available,
        "proposerTranscriptsEmpty": sum(
            1 for line in proposers if line not in missed and not line["messages"]
        ),
        "cellsWithoutWorkerList": sum(
            1 for line in supervisors if line["outcome"]["metrics"].get("worker_list_missing") is True
        ),
        "byGapReason": dict(
            sorted(Counter(gap_reason(run, line) for line in lines if not line["messages"]).items())
        ),
        "rewardByRole": {
            role: {"labeled": len(rewards), "mean": round(sum(rewards, 0.0) / len(rewards), 12)}
            for role, rewards in per_role(lines, lambda line: line["outcome"]["reward"]).items()
        },
        "costUsdByRole": {
            role: {"usd": round(sum(costs, 0.0), 6), "linesWithCost": len(costs)}
            for role, costs in per_role(lines, lambda line: line["cost"]["usd"]).items()
        },
    }


def per_role(lines: list[dict[str, Any]], value: Callable[[dict[str, Any]], Any]) -> dict[str, list[Any]]:
    """The non-null values of each role, in line order (roles in order of first appearance)."""
    found: dict[str, list[Any]] = {}
    for line in lines:
        if value(line) is not None:
            found.setdefault(line["role"], []).append(value(line))
    return found


def gap_reason(run: Backfilled, line: dict[str, Any]) -> str:
    """The reason of a gap line, told by comparing its gap with each exact wording of the spec."""
    gap = line["provenance"]["gap"]
    cwd = line["outcome"]["metrics"].get("worker_cwd")
    ref = line["artifacts"]["transcript_ref"]
    reasons = {
        SUPERVISOR_GAP: "supervisor_transcript_not_persisted",
        SUPERVISOR_GAP + WORKER_LIST_MISSING_SUFFIX: "supervisor_worker_list_missing",
        f"opencode store unavailable; worker cwd {cwd} unrecoverable": "opencode_store_unavailable",
        f"no opencode session found for worker cwd {cwd}": "no_opencode_session",
        f"opencode session {(ref or '').removeprefix('opencode:')} has no readable message parts": (
            "opencode_session_empty"
        ),
        f"no claude transcript matched worktree {line['artifacts']['run_dir']} in the shot's time window": (
            "no_claude_transcript"
        ),
        f"claude transcript {ref} matched the shot's time window but holds no conversation messages": (
            "claude_transcript_empty"
        ),
    }
    return reasons[gap]


@pytest.mark.parametrize("round_name", ["round-001", "round-002", "round-003"])
def test_every_stats_counter_equals_a_recount_from_the_lines(
    rounds: dict[str, Backfilled], round_name: str
) -> None:
    run = rounds[round_name]
    expected = recount(run, opencode_available=True)

    stats = run.stats.to_json()

    assert stats == expected


def test_gap_reasons_are_counted_per_reason(round_001: Backfilled) -> None:
    assert round_001.stats.to_json()["byGapReason"] == {
        "no_claude_transcript": 1,
        "no_opencode_session": 1,
        "opencode_session_empty": 2,
        "supervisor_transcript_not_persisted": 30,
    }


def test_round_001_stats_have_the_planted_counts(round_001: Backfilled) -> None:
    stats = round_001.stats.to_json()

    # Each of the 3 joined shots' transcripts holds one inline sub-agent conversation: an
    # `agent` line each, which the seed dropped.
    assert {key: stats[key] for key in SEED_STATS_KEYS} == {
        "lines": 96,
        "byRole": {"agent": 3, "supervisor": 30, "worker": 59, "proposer": 4},
        "fullTranscripts": 62,
        "gapLines": 34,
        "rewardLabeled": 92,
        "workerSessionsJoined": 56,
        "workerCwdsMissed": 1,
        "workerSessionsEmpty": 2,
        "proposerShotsJoined": 3,
        "proposerShotsMissed": 1,
        "opencodeDbAvailable": True,
    }


def test_stats_json_starts_with_the_seeds_keys_in_the_seeds_order(round_001: Backfilled) -> None:
    keys = list(round_001.stats.to_json())

    assert keys[: len(SEED_STATS_KEYS)] == SEED_STATS_KEYS
    assert keys[len(SEED_STATS_KEYS) : len(SEED_STATS_KEYS) + 2] == [
        "proposerTranscriptsEmpty",
        "cellsWithoutWorkerList",
    ]


# ---------------------------------------------------------------------------
# wall_s: JavaScript Math.round, halves up
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("elapsed_ms", "wall_s"), [(2500, 3), (2499, 2), (3500, 4), (0, 0)])
def test_a_worker_session_wall_time_rounds_half_up(tmp_path: Path, elapsed_ms: int, wall_s: int) -> None:
    out_dir = tmp_path / "round"
    run_dir = out_dir / "runs" / "c"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir))))
    write_json(run_dir / "result.json", {"recoveredSpend": {"workerCwds": ["/clones/w0"]}})
    db = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s1", "/clones/w0", time_created=10_000, time_updated=10_000 + elapsed_ms)],
        messages=[message("m1", "s1", "user")],
        parts=[part("p1", "m1", "text", text="go")],
    )

    run = backfill(out_dir, opencode_db=db, claude_projects_dir=tmp_path / "claude")

    assert run.role("worker")[0]["cost"]["wall_s"] == wall_s


@pytest.mark.parametrize(("duration_ms", "wall_s"), [(2500, 3), (2499, 2), (3500, 4), (1500.5, 2)])
def test_a_receipt_duration_rounds_half_up(tmp_path: Path, duration_ms: float, wall_s: int) -> None:
    out_dir = tmp_path / "round"
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": {"durationMs": duration_ms}})

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    assert run.role("proposer")[0]["cost"]["wall_s"] == wall_s


# ---------------------------------------------------------------------------
# Proposer usage and rewards on the demo
# ---------------------------------------------------------------------------


def test_proposer_tokens_are_the_transcript_usage_once_per_api_message(
    round_001: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["flat_receipt"]
    assert site.transcript_path is not None
    line = round_001.proposer_of_receipt(site.receipt_path)

    usage = claude_usage_once_per_message(site.transcript_path)

    assert {key: line["cost"][key] for key in usage} == usage
    assert line["cost"]["tokens_reasoning"] is None


@pytest.mark.parametrize("run_dir", ["", "runs/arm0"])
def test_a_relative_run_dir_names_no_file_and_its_workers_are_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_dir: str
) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, artifact=artifact(runDir=run_dir)))
    # Files the runDir would name from the folder the backfill runs in: never read.
    monkeypatch.chdir(tmp_path)
    for folder in (tmp_path, tmp_path / run_dir):
        write_json(folder / "result.json", {"sup_status": "FROM-CWD", "recoveredSpend": {"workerCwds": ["/w/1"]}})
        write_json(folder / "judge.json", {"from": "cwd"})

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c")

    (supervisor,) = run.lines
    assert supervisor["outcome"]["metrics"]["sup_status"] is None
    assert supervisor["outcome"]["verdict"] is None
    assert supervisor["outcome"]["metrics"]["worker_list_missing"] is True
    assert supervisor["artifacts"]["run_dir"] == run_dir  # kept verbatim, as the seed does
    assert build_manifest(out_dir).entries[0].artifact_paths == []


@pytest.mark.parametrize(
    ("run_dir", "transcript_ref"),
    [
        ("/runs/arm0/", "/runs/arm0/brain.jsonl"),
        ("/runs/./x/../arm1", "/runs/arm1/brain.jsonl"),
        ("//runs//arm2", "/runs/arm2/brain.jsonl"),
    ],
)
def test_a_supervisor_transcript_ref_is_joined_as_nodes_path_join_does(
    tmp_path: Path, run_dir: str, transcript_ref: str
) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, artifact=artifact(runDir=run_dir)))

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c")

    (supervisor,) = run.lines
    assert (supervisor["artifacts"]["run_dir"], supervisor["artifacts"]["transcript_ref"]) == (run_dir, transcript_ref)


def test_a_proposer_reward_is_its_candidate_resolved_fraction(round_001: Backfilled) -> None:
    manifest = build_manifest(round_001.out_dir)
    for line in round_001.role("proposer"):
        entry = manifest.entry_for(line["generation"], line["candidate_index"])
        assert entry is not None
        assert line["outcome"]["reward"] == entry.resolved_count / 3
        assert line["outcome"]["reward_source"] == "swe-arena-official-judge/candidate-resolved-fraction"
        assert line["outcome"]["metrics"]["instance_count"] == 3


def test_a_shot_of_a_candidate_without_campaign_has_no_reward_and_no_commit(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    write_json(out_dir / "proposer-shots" / "gen5-cand0-shot0.json", {"receipt": {"exitCode": 0}})

    (line,) = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c").role(
        "proposer"
    )

    assert (line["outcome"]["reward"], line["outcome"]["reward_source"]) == (None, None)
    assert line["outcome"]["metrics"]["resolved_count"] is None
    assert line["outcome"]["metrics"]["instance_count"] == 1
    assert (line["policy"]["profile_commit"], line["artifacts"]["patch_path"]) == (None, None)


def test_a_shot_of_a_candidate_without_any_verdict_has_no_reward_not_zero(tmp_path: Path) -> None:
    """resolvedCount is 0 for a candidate whose campaign holds no cell yet, or whose every cell
    errored; as a reward, 0 would say its patch resolved nothing. A candidate with one
    conclusive unresolved replicate does score 0. The audit derives the same rewards."""
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "a", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir), "b", cell("b__b-1", 0))
    write_cell(campaign_dir(out_dir, 0, 0), "a", cell("a__a-1", 0, artifact=None, error="arm crashed"))
    write_cell(campaign_dir(out_dir, 0, 0), "b", cell("b__b-1", 0, error="judge timed out"))
    campaign_dir(out_dir, 0, 1).mkdir(parents=True)  # no cell yet
    write_cell(campaign_dir(out_dir, 0, 2), "a", cell("a__a-1", 0, artifact=artifact(resolved=False)))
    write_cell(campaign_dir(out_dir, 0, 2), "b", cell("b__b-1", 0, artifact=artifact(resolved=None)))
    write_cell(campaign_dir(out_dir, 0, 3), "a", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 3), "b", cell("b__b-1", 0, error="judge timed out"))
    for candidate in range(4):
        write_json(out_dir / "proposer-shots" / f"gen0-cand{candidate}-shot0.json", {"receipt": {"exitCode": 0}})
    store, claude = tmp_path / "none.db", tmp_path / "claude"

    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)

    rewards = {line["candidate_id"]: (line["outcome"]["reward"], line["outcome"]["reward_source"])
               for line in run.role("proposer")}
    fraction = "swe-arena-official-judge/candidate-resolved-fraction"
    assert rewards == {"gen0-cand0": (None, None), "gen0-cand1": (None, None),
                       "gen0-cand2": (0, fraction), "gen0-cand3": (0.5, fraction)}
    assert [line["outcome"]["metrics"]["resolved_count"] for line in run.role("proposer")] == [0, 0, 0, 1]
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, run.lines)
    assert audit_inputs_match(out_dir, ledger, store, claude).passed
    # A fake 0 where there is no verdict fails the check.
    lines = list(read_ledger_dicts(ledger))
    lines[-4]["outcome"].update(reward=0, reward_source=fraction)
    write_ledger(ledger, lines)
    assert not audit_inputs_match(out_dir, ledger, store, claude).passed


def test_a_joined_transcript_that_recorded_no_usage_has_null_token_counts(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "a", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 0), "a", cell("a__a-1", 0))
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": {"exitCode": 0}})
    claude = tmp_path / "claude"
    worktree = claude / claude_project_slug(str(out_dir / "proposer-wt" / "gen0-cand0"))
    write_transcript(worktree / "s.jsonl", [user_line("go"), assistant_line("msg_1", [{"type": "text", "text": "done"}])])

    (line,) = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=claude).role("proposer")

    assert len(line["messages"]) == 2 and "gap" not in line["provenance"]
    assert line["cost"] == {"usd": None, "tokens_in": None, "tokens_out": None, "tokens_reasoning": None,
                            "cache_read": None, "cache_write": None, "wall_s": None}


def test_a_shot_of_a_round_without_baseline_cells_has_no_reward(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0))
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": {"exitCode": 0}})

    (line,) = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c").role(
        "proposer"
    )

    assert line["outcome"]["reward"] is None
    assert line["outcome"]["metrics"] == {
        "resolved_count": 0,
        "instance_count": 0,
        "exit_code": 0,
        "timed_out": None,
        "author": None,
        "max_shots": None,
        "prompt_sha256": None,
    }
    assert line["policy"]["profile_commit"] == "c0ffee0123456789"


# ---------------------------------------------------------------------------
# Every demo line is a valid ledger line
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("round_name", ["round-001", "round-002", "round-003"])
def test_every_line_of_every_demo_round_reads_back_validated(
    rounds: dict[str, Backfilled], round_name: str, tmp_path: Path
) -> None:
    run = rounds[round_name]
    ledger = tmp_path / f"{round_name}.jsonl"

    written = write_ledger(ledger, run.lines)

    assert written == len(run.lines)
    assert len(list(read_ledger(ledger))) == len(run.lines)
    assert list(read_ledger_dicts(ledger)) == run.lines


@pytest.mark.parametrize("value", [2**63, -(2**64), 2.0**64, 1e300])
def test_a_rep_beyond_64_bits_stops_the_round_and_a_seed_beyond_is_null(tmp_path: Path, value: float) -> None:
    # Neither orjson nor JavaScript reads such a number back exactly: the line would say another.
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "a", cell("a__a-1", 0, seed=value))
    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c")
    assert run.lines[0]["task"]["seed"] is None

    write_cell(campaign_dir(out_dir), "b", cell("b__b-1", value))
    with pytest.raises(RoundInputError, match="b/cached-result.json"):
        build_manifest(out_dir)


def test_a_run_dir_holding_a_lone_surrogate_names_no_file(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, artifact=artifact(runDir=f"{tmp_path}/run-\udc00")))

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "c")

    (supervisor,) = run.lines
    assert supervisor["outcome"]["metrics"]["worker_list_missing"] is True
    assert supervisor["artifacts"]["run_dir"] == f"{tmp_path}/run-\udc00"


# ---------------------------------------------------------------------------
# Field types taken from the inputs only when they are what the spec says
# ---------------------------------------------------------------------------


def test_a_model_ref_splits_at_its_first_slash(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, resolvedModel="openrouter/qwen/qwen3-coder"))

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    policy = run.role("supervisor")[0]["policy"]
    assert (policy["provider"], policy["model"]) == ("openrouter", "qwen/qwen3-coder")


@pytest.mark.parametrize(
    ("composite", "resolved", "reward"),
    [("0.5", True, 1), ("0.5", None, None), (True, False, 0), (0.25, False, 0.25)],
    ids=["a string composite: resolved", "a string composite, no resolved: null", "a boolean composite", "a number"],
)
def test_only_a_number_is_the_official_judges_composite(
    tmp_path: Path, composite: Any, resolved: bool | None, reward: float | None
) -> None:
    out_dir = tmp_path / "round"
    record = cell(
        "a__a-1", 0, artifact=artifact(resolved=resolved),
        judgeScores={"swe-arena-official-judge": {"composite": composite}},
    )  # fmt: skip
    write_cell(campaign_dir(out_dir), "c", record)

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    outcome = run.role("supervisor")[0]["outcome"]
    assert outcome["reward"] == reward and type(outcome["reward"]) is type(reward)


def test_supervisor_fields_of_the_wrong_type_are_null(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    run_dir = out_dir / "runs" / "c"
    record = cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir)), seed=3.5, costUsd="1.5")
    write_cell(campaign_dir(out_dir), "c", record)
    write_json(
        run_dir / "result.json",
        {"sup_verdict": 7, "spawned": "2", "workers": None, "settled": True, "subtasks": {"a": 1}},
    )
    write_json(run_dir / "judge.json", "{ not json")

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    line = run.role("supervisor")[0]
    metrics = line["outcome"]["metrics"]
    assert {key: metrics[key] for key in ("sup_verdict", "spawned", "workers", "settled", "subtasks")} == dict.fromkeys(
        ("sup_verdict", "spawned", "workers", "settled", "subtasks")
    )
    assert (line["task"]["seed"], line["cost"]["usd"], line["outcome"]["verdict"]) == (None, None, None)


def test_a_whole_float_seed_is_an_integer(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, seed=3.0))

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    seed = run.role("supervisor")[0]["task"]["seed"]
    assert seed == 3 and type(seed) is int


@pytest.mark.parametrize(("exit_code", "completed"), [(0, True), (0.0, True), ("0", False), (1, False)])
def test_a_shot_is_completed_only_with_a_numeric_exit_code_of_zero(
    tmp_path: Path, exit_code: Any, completed: bool
) -> None:
    out_dir = tmp_path / "round"
    write_json(
        out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": {"exitCode": exit_code, "harness": 5}}
    )

    run = backfill(out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude")

    line = run.role("proposer")[0]
    assert line["outcome"]["is_completed"] is completed
    assert line["outcome"]["metrics"]["exit_code"] == (None if isinstance(exit_code, str) else exit_code)
    assert line["policy"]["harness"] is None
