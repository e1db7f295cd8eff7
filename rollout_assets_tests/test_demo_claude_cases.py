"""The Claude Code cases of demo round-003 through the join: a sub-agent file beside two sessions,
one in a session's subagents/ folder, usage written as it streamed, two sessions tied for a shot,
sessions on the edges of a shot's window, a transcript cut mid-line, and lines written twice
(demo/planted.py).

Each test first reads what the case planted from the raw files (json only), then checks the
backfill's lines against that: no reader of this project computes an expected value here.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout, EdgeCaseSite, edge_case_sites, write_demo
from rollout_assets_tests.backfill_runs import Backfilled, backfill, parsed_or_none, rollout_uuid

ROUND_003 = DEFAULT_ROUNDS[2]
USAGE_FIELDS = {
    "tokens_in": "input_tokens",
    "tokens_out": "output_tokens",
    "cache_read": "cache_read_input_tokens",
    "cache_write": "cache_creation_input_tokens",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("claude-cases") / "root", rounds=[ROUND_003])


@pytest.fixture(scope="module")
def run(demo: DemoLayout) -> Backfilled:
    return backfill(demo.rounds[0], opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir)


@pytest.fixture(scope="module")
def sites(demo: DemoLayout) -> dict[str, EdgeCaseSite]:
    return edge_case_sites(demo.root, ROUND_003)


def raw_lines(path: Path) -> list[dict[str, Any]]:
    """The lines of a transcript file that are JSON objects (a cut line is none)."""
    parsed = [parsed_or_none(raw) for raw in path.read_text(encoding="utf-8").split("\n") if raw.strip()]
    return [line for line in parsed if isinstance(line, dict)]


def epoch_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def first_main_ms(path: Path) -> int:
    talk = [
        line for line in raw_lines(path) if line.get("type") in ("user", "assistant") and not line.get("isSidechain")
    ]
    return epoch_ms(talk[0]["timestamp"])


def final_usage(lines: list[dict[str, Any]], *, last: bool = True) -> dict[str, int]:
    """Token sums over the assistant lines given: each message id's last usage (or, `last` False,
    its first), counted once."""
    by_id: dict[str, dict[str, int]] = {}
    for line in lines:
        if line.get("type") == "assistant":
            message = line["message"]
            if last or message["id"] not in by_id:
                by_id[message["id"]] = message["usage"]
    return {field: sum(usage[name] for usage in by_id.values()) for field, name in USAGE_FIELDS.items()}


def tokens(line: dict[str, Any]) -> dict[str, int]:
    return {field: line["cost"][field] for field in USAGE_FIELDS}


def agents_after(run: Backfilled, proposer: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent lines right after `proposer` in ledger order."""
    start = run.lines.index(proposer) + 1
    found = []
    for line in run.lines[start:]:
        if line["role"] != "agent":
            break
        found.append(line)
    return found


def joined_files(run: Backfilled) -> set[str]:
    return {line["artifacts"]["transcript_ref"] for line in run.lines if line["role"] in ("proposer", "agent")}


def assert_agent_line_of(agent: dict[str, Any], proposer: dict[str, Any], path: Path, in_project: str) -> None:
    """`agent` is the line of the sub-agent conversation of the file at `path`, under `proposer`."""
    lines = raw_lines(path)
    key = f"{proposer['rollout_id']}|agent|{in_project}|{lines[0]['uuid']}"
    assert agent["rollout_id"] == rollout_uuid(key)
    assert agent["parent_rollout_id"] == proposer["rollout_id"]
    assert agent["artifacts"]["transcript_ref"] == str(path)
    assert [m["role"] for m in agent["messages"]] == ["user", "assistant"]
    assert agent["messages"][0]["content"] == lines[0]["message"]["content"]
    assert tokens(agent) == final_usage(lines)


def test_an_agent_file_beside_two_sessions_joins_the_shot_of_the_session_it_names(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["agent-file-of-another-session"]
    assert site.transcript_path is not None and site.other_path is not None and site.worktree is not None
    assert {line["sessionId"] for line in raw_lines(site.other_path)} == {site.transcript_path.stem}
    proposer = run.proposer_of_receipt(site.receipt_path)
    worktree = [line for line in run.role("proposer") if line["artifacts"]["run_dir"] == str(site.worktree)]
    others = [line for line in worktree if line is not proposer]
    joined_beside = [
        line
        for line in others
        if line["artifacts"]["transcript_ref"] is not None
        and Path(line["artifacts"]["transcript_ref"]).parent == site.transcript_path.parent
    ]
    assert joined_beside, "another shot of the worktree joins another session of the same folder"

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    [agent] = agents_after(run, proposer)
    assert_agent_line_of(agent, proposer, site.other_path, site.other_path.name)
    for other in others:
        refs = [line["artifacts"]["transcript_ref"] for line in agents_after(run, other)]
        assert str(site.other_path) not in refs
        assert all(ref == other["artifacts"]["transcript_ref"] for ref in refs)  # its inline ones only


def test_an_agent_file_in_the_sessions_subagents_folder_is_an_agent_line_of_its_shot(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["subagents-folder"]
    assert site.transcript_path is not None and site.other_path is not None
    assert site.other_path.parent == site.transcript_path.with_suffix("") / "subagents"
    assert not any(line.get("isSidechain") for line in raw_lines(site.transcript_path))

    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    [agent] = agents_after(run, proposer)
    in_project = f"{site.transcript_path.stem}/subagents/{site.other_path.name}"
    assert_agent_line_of(agent, proposer, site.other_path, in_project)


def test_streamed_usage_counts_the_last_usage_of_each_message_once(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["streamed-usage"]
    assert site.transcript_path is not None
    main = [line for line in raw_lines(site.transcript_path) if not line.get("isSidechain")]
    every_line = sum(line["message"]["usage"]["output_tokens"] for line in main if line.get("type") == "assistant")
    expected = final_usage(main)
    # Planted: some message's first line carries less than its final usage.
    assert final_usage(main, last=False)["tokens_out"] < expected["tokens_out"] < every_line

    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert tokens(proposer) == expected


def test_tied_transcripts_go_to_the_first_by_file_name_and_the_other_joins_nothing(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["tied-transcripts"]
    assert site.transcript_path is not None and site.other_path is not None
    receipt = json.loads(site.receipt_path.read_text(encoding="utf-8"))["receipt"]
    started = epoch_ms(receipt["startedAt"])
    assert first_main_ms(site.transcript_path) - started == started - first_main_ms(site.other_path) > 0
    first, second = sorted([site.transcript_path, site.other_path], key=lambda path: path.name)

    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(first)
    assert str(second) not in joined_files(run)


def test_a_transcript_on_the_windows_opening_edge_joins_and_one_a_millisecond_past_its_close_does_not(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["edge-of-window-transcript"]
    assert site.transcript_path is not None and site.other_path is not None
    receipt = json.loads(site.receipt_path.read_text(encoding="utf-8"))["receipt"]
    assert first_main_ms(site.transcript_path) == epoch_ms(receipt["startedAt"]) - 120_000
    assert first_main_ms(site.other_path) == epoch_ms(receipt["completedAt"]) + 120_001
    # ... and in the window of no other shot of the worktree either.
    candidate = site.receipt_path.name.rsplit("-shot", 1)[0]
    for path in site.receipt_path.parent.glob(f"{candidate}-shot*.json"):
        other = json.loads(path.read_text(encoding="utf-8"))["receipt"]
        low, high = epoch_ms(other["startedAt"]) - 120_000, epoch_ms(other["completedAt"]) + 120_000
        assert not low <= first_main_ms(site.other_path) <= high

    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert "gap" not in proposer["provenance"]
    assert str(site.other_path) not in joined_files(run)


def test_a_transcript_cut_mid_line_keeps_its_whole_lines_and_a_file_of_one_cut_line_is_no_candidate(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["truncated-transcript-line"]
    assert site.transcript_path is not None and site.other_path is not None
    receipt = json.loads(site.receipt_path.read_text(encoding="utf-8"))["receipt"]
    assert "startedAt" not in receipt and raw_lines(site.other_path) == []
    text = site.transcript_path.read_text(encoding="utf-8")
    assert not text.endswith("\n")
    whole = raw_lines(site.transcript_path)
    main = [line for line in whole if not line.get("isSidechain")]
    last_whole = [line for line in main if line.get("type") in ("user", "assistant")][-1]
    [result] = last_whole["message"]["content"]  # the commit's tool result; the reply to it was cut

    # Without times, a shot joins its worktree's only candidate: the file of one cut line is none.
    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    assert "gap" not in proposer["provenance"]
    assert proposer["messages"][-1]["role"] == "tool"
    assert proposer["messages"][-1]["content"] == result["content"][0]["text"]
    assert tokens(proposer) == final_usage(main)
    assert proposer["outcome"]["error"] == receipt["error"] and proposer["outcome"]["is_completed"] is False
    assert str(site.other_path) not in joined_files(run)


def test_lines_written_twice_give_their_messages_once(
    run: Backfilled, sites: dict[str, EdgeCaseSite]
) -> None:
    site = sites["repeated-transcript-lines"]
    assert site.transcript_path is not None
    main = [line for line in raw_lines(site.transcript_path) if not line.get("isSidechain")]
    talk = [line for line in main if line.get("type") in ("user", "assistant")]
    uuids = [line["uuid"] for line in talk]
    repeated = [line for n, line in enumerate(talk) if line["uuid"] in uuids[:n]]
    assert [line["type"] for line in repeated] == ["user", "assistant"]  # as planted
    [result] = repeated[0]["message"]["content"]
    [said] = repeated[1]["message"]["content"]
    results = [
        block["tool_use_id"]
        for line in talk[: len(talk) - 2]
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for block in line["message"]["content"]
        if block.get("type") == "tool_result"
    ]

    proposer = run.proposer_of_receipt(site.receipt_path)

    assert proposer["artifacts"]["transcript_ref"] == str(site.transcript_path)
    tool_ids = [m["tool_call_id"] for m in proposer["messages"] if m["role"] == "tool"]
    assert tool_ids == results and tool_ids.count(result["tool_use_id"]) == 1
    texts = [m["content"] for m in proposer["messages"] if m["role"] == "assistant" and m["content"]]
    assert sum(text.count(said["text"]) for text in texts) == 1
    assert proposer["messages"][-1] == {"role": "assistant", "content": said["text"]}
    assert tokens(proposer) == final_usage(main)
