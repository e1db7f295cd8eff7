"""The opencode worker cases and the training drop reasons that round-003 of the demo plants,
through the real join and the training export: each handled as docs/input-formats.md §4 and
docs/training.md say.

What each line should hold is read from the opencode store and the receipts with sqlite3 and
json, never from the readers under test.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout, EdgeCaseSite, edge_case_sites, write_demo
from rollout_assets.ledger import write_ledger
from rollout_assets.training.export import export_training
from rollout_assets.training.files import DATASETS
from rollout_assets_tests.backfill_runs import Backfilled, backfill

ROUND_003 = DEFAULT_ROUNDS[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("demo") / "root", (ROUND_003,))


@pytest.fixture(scope="module")
def run(demo: DemoLayout) -> Backfilled:
    [out_dir] = demo.rounds
    return backfill(out_dir, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir)


@pytest.fixture(scope="module")
def fates(run: Backfilled, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """dataset -> rollout_id -> fate, from the accounting of the default export."""
    folder = tmp_path_factory.mktemp("export")
    ledger = folder / "rollout-ledger.jsonl"
    write_ledger(ledger, run.lines)
    files = export_training(ledger, folder / "training", ROUND_003.name).files
    return {
        dataset: {row["rollout_id"]: row["fate"] for row in map(json.loads, files.accounting(dataset).open())}
        for dataset in DATASETS
    }


def site(demo: DemoLayout, case: str) -> EdgeCaseSite:
    return edge_case_sites(demo.root, ROUND_003)[case]


def store_rows(demo: DemoLayout, query: str, *args: Any) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{demo.opencode_db}?mode=ro", uri=True)
    try:
        return connection.execute(query, args).fetchall()
    finally:
        connection.close()


def worker_line(run: Backfilled, cwd: str | None) -> dict[str, Any]:
    assert cwd is not None
    [line] = run.worker_lines_of_cwd(cwd)
    return line


def session_of(line: dict[str, Any]) -> str:
    return line["artifacts"]["transcript_ref"].removeprefix("opencode:")


def messages_by_time(demo: DemoLayout, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    query = "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
    rows = store_rows(demo, query, session_id)
    return [(message_id, json.loads(data)) for message_id, data in rows]


def parts_of(demo: DemoLayout, message_id: str) -> list[dict[str, Any]]:
    rows = store_rows(demo, "SELECT data FROM part WHERE message_id = ? ORDER BY id", message_id)
    return [json.loads(data) for (data,) in rows]


def test_the_system_prompt_kept_on_the_assistant_messages_opens_the_transcript(
    demo: DemoLayout, run: Backfilled
) -> None:
    line = worker_line(run, site(demo, "system-prompt").worker_cwd)
    assistant = [data for _, data in messages_by_time(demo, session_of(line)) if data["role"] == "assistant"]

    assert line["messages"][0] == {"role": "system", "content": "\n".join(assistant[-1]["system"])}
    assert [m["role"] for m in line["messages"][1:]].count("system") == 0
    assert line["messages"][1]["role"] == "user" and line["provenance"].get("gap") is None


def test_ignored_text_and_a_text_file_part_are_left_out_of_the_transcript(
    demo: DemoLayout, run: Backfilled
) -> None:
    line = worker_line(run, site(demo, "ignored-parts").worker_cwd)
    messages = messages_by_time(demo, session_of(line))
    users = [message_id for message_id, data in messages if data["role"] == "user"]
    prompt, status = parts_of(demo, users[0]), parts_of(demo, users[1])
    sent = "\n".join(p["text"] for p in prompt if p["type"] == "text")

    assert [m["role"] for m in line["messages"]].count("user") == 1  # the status message adds nothing
    assert line["messages"][0] == {"role": "user", "content": sent}  # the synthetic Read texts are sent
    assert status[0]["ignored"] is True and status[0]["text"] not in json.dumps(line["messages"])
    assert "attachments" not in line["outcome"]["metrics"]  # the text/plain file is not sent as a file
    assert line["outcome"]["is_completed"] is True


def test_two_tool_parts_of_one_step_are_one_assistant_turn_then_two_tool_messages(
    demo: DemoLayout, run: Backfilled
) -> None:
    line = worker_line(run, site(demo, "multi-tool-step").worker_cwd)
    messages = messages_by_time(demo, session_of(line))
    parts = parts_of(demo, next(message_id for message_id, data in messages if data["role"] == "assistant"))
    kinds = [p["type"] for p in parts]
    tools = [p for p in parts[: kinds.index("step-finish")] if p["type"] == "tool"]
    turn, *results = line["messages"][1:4]

    assert [call["id"] for call in turn["tool_calls"]] == [tool["callID"] for tool in tools]
    assert [call["function"]["name"] for call in turn["tool_calls"]] == [tool["tool"] for tool in tools]
    assert [(r["role"], r["tool_call_id"], r["content"]) for r in results] == [
        ("tool", tool["callID"], tool["state"]["output"]) for tool in tools
    ]


def test_messages_are_read_in_time_order_when_their_ids_disagree(demo: DemoLayout, run: Backfilled) -> None:
    line = worker_line(run, site(demo, "ids-times-disagree").worker_cwd)
    by_time = messages_by_time(demo, session_of(line))
    prompt_id, prompt = by_time[0]
    [first_part, *_] = parts_of(demo, prompt_id)

    assert sorted(message_id for message_id, _ in by_time).index(prompt_id) > 0  # its id sorts later
    assert line["messages"][0]["role"] == "user"
    assert line["messages"][0]["content"].startswith(first_part["text"])
    assert prompt["role"] == "user" and [m["role"] for m in line["messages"]].count("user") == 1


def test_two_identical_worker_answers_are_one_row_and_one_duplicate(
    demo: DemoLayout, run: Backfilled, fates: dict[str, dict[str, str]]
) -> None:
    planted = site(demo, "duplicate-transcripts")
    supervisor = run.supervisor_of_cell(planted.cell_dir)
    first, second = run.workers_of(supervisor)

    assert supervisor["outcome"]["reward"] == 1.0
    assert first["outcome"]["metrics"]["worker_cwd"] == planted.worker_cwd
    assert first["messages"] != second["messages"]  # the same but for the clone and the worker's name
    assert [fates["sft_rows"][line["rollout_id"]] for line in (first, second)] == ["row", "duplicate"]


def test_a_shot_its_deadline_stopped_that_exited_zero_is_dropped_as_truncated(
    demo: DemoLayout, run: Backfilled, fates: dict[str, dict[str, str]]
) -> None:
    planted = site(demo, "timed-out-exit-zero")
    receipt = json.loads(Path(planted.receipt_path).read_text(encoding="utf-8"))["receipt"]
    line = run.proposer_of_receipt(planted.receipt_path)
    outcome = line["outcome"]

    assert receipt["timedOut"] is True and receipt["exitCode"] == 0 and isinstance(receipt["error"], dict)
    assert (outcome["is_completed"], outcome["is_truncated"], outcome["error"]) == (True, True, None)
    assert line["messages"] and line["provenance"].get("gap") is None
    assert {fates[dataset][line["rollout_id"]] for dataset in DATASETS} == {"truncated"}
