"""Worker lines from opencode stores at several points of opencode's migration history, and
from sessions its JSON-to-SQLite import wrote, on real SQLite files and a real round.

The tables are made the way opencode's published migrations made them: the first SQLite
schema, then its later ALTERs (the session's workspace and path; its agent and model; its cost
and token columns, added as `DEFAULT 0 NOT NULL`). Rows hold what opencode wrote at that point:
message and part JSON without their ids, an assistant message recording its model, spend and
(in the older message format) the system prompt it was produced under.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rollout_assets_tests.backfill_runs import backfill
from rollout_assets_tests.builders import artifact, campaign_dir, cell, write_cell, write_json

CWD = "/clones/worker-0"
SESSION = "ses_0a1b2c3d4e5fHistory"
SYSTEM = [
    "You are opencode, an interactive CLI tool.",
    "<env>\n  Working directory: /clones/worker-0\n</env>",
]

FIRST_SCHEMA = [
    "CREATE TABLE project (id text PRIMARY KEY, worktree text NOT NULL, vcs text, name text, icon_url text, "
    "icon_color text, time_created integer NOT NULL, time_updated integer NOT NULL, time_initialized integer, "
    "sandboxes text NOT NULL)",
    "CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text, slug text NOT NULL, "
    "directory text NOT NULL, title text NOT NULL, version text NOT NULL, share_url text, summary_additions integer, "
    "summary_deletions integer, summary_files integer, summary_diffs text, revert text, permission text, "
    "time_created integer NOT NULL, time_updated integer NOT NULL, time_compacting integer, time_archived integer)",
    "CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL, "
    "time_updated integer NOT NULL, data text NOT NULL)",
    "CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL, "
    "time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL)",
]
# Later migrations touching the session table, in order (name: statements).
LATER = {
    "add_session_workspace_id": ["ALTER TABLE session ADD workspace_id text"],
    "add_session_path": ["ALTER TABLE session ADD path text"],
    "next_venus": ["ALTER TABLE session ADD agent text", "ALTER TABLE session ADD model text"],
    "session_usage": [
        "ALTER TABLE session ADD cost real DEFAULT 0 NOT NULL",
        *(
            f"ALTER TABLE session ADD {column} integer DEFAULT 0 NOT NULL"
            for column in (
                "tokens_input",
                "tokens_output",
                "tokens_reasoning",
                "tokens_cache_read",
                "tokens_cache_write",
            )
        ),
    ],
}
POINTS = ["first_schema", *LATER]


def create_store(path: Path, point: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path)
    for statement in FIRST_SCHEMA:
        connection.execute(statement)
    for name, statements in LATER.items():
        if POINTS.index(name) > POINTS.index(point):
            break
        for statement in statements:
            connection.execute(statement)
    connection.execute(
        "INSERT INTO project VALUES ('prj_1', '/clones', 'git', NULL, NULL, NULL, 1, 1, NULL, '[]')"
    )
    return connection


def insert(connection: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    names = list(row)
    values = [json.dumps(value) if isinstance(value, dict) else value for value in row.values()]
    connection.execute(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values
    )


def session_row(**columns: Any) -> dict[str, Any]:
    return {
        "id": SESSION,
        "project_id": "prj_1",
        "slug": "quiet-river",
        "directory": CWD,
        "title": "Fix the failing test",
        "version": "1.2.0",
        "time_created": 1_000,
        "time_updated": 61_000,
        **columns,
    }


def assistant(turn: int, *, cost: float, tokens_in: int, tokens_out: int, **fields: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "time": {"created": 1_000 + 2 * turn, "completed": 1_001 + 2 * turn},
        "parentID": f"msg_user_{turn}",
        "modelID": "claude-sonnet-4-5",
        "providerID": "anthropic",
        "mode": "build",
        "agent": "build",
        "path": {"cwd": CWD, "root": CWD},
        "cost": cost,
        "tokens": {
            "input": tokens_in,
            "output": tokens_out,
            "reasoning": 0,
            "cache": {"read": 100, "write": 10},
        },
        "finish": "stop",
        **fields,
    }


def user(turn: int) -> dict[str, Any]:
    return {
        "role": "user",
        "time": {"created": 999 + 2 * turn},
        "agent": "build",
        "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"},
    }


def add_conversation(connection: sqlite3.Connection, assistants: list[dict[str, Any]]) -> None:
    """One user message and one assistant reply (a text part each) per item of `assistants`."""
    for turn, reply in enumerate(assistants):
        for message_id, data, text in (
            (f"msg_user_{turn}", user(turn), f"ask {turn}"),
            (f"msg_asst_{turn}", reply, f"answer {turn}"),
        ):
            created = data["time"]["created"]
            insert(
                connection,
                "message",
                {
                    "id": message_id,
                    "session_id": SESSION,
                    "time_created": created,
                    "time_updated": created,
                    "data": data,
                },
            )
            insert(
                connection,
                "part",
                {
                    "id": f"prt_{message_id}",
                    "message_id": message_id,
                    "session_id": SESSION,
                    "time_created": created,
                    "time_updated": created,
                    "data": {"type": "text", "text": text},
                },
            )


def round_with_one_worker(root: Path) -> Path:
    out_dir = root / "round"
    run_dir = root / "runs" / "cell-0"
    write_cell(
        campaign_dir(out_dir), "a__a-1__rep0", cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir)))
    )
    write_json(run_dir / "result.json", {"sup_status": "done", "recoveredSpend": {"workerCwds": [CWD]}})
    return out_dir


def worker_of(root: Path, store: Path) -> dict[str, Any]:
    run = backfill(round_with_one_worker(root), opencode_db=store, claude_projects_dir=root / "claude")
    (worker,) = run.role("worker")
    return worker


REPLIES = [
    assistant(0, cost=0.5, tokens_in=1_000, tokens_out=200),
    assistant(1, cost=0.25, tokens_in=2_000, tokens_out=50),
]
FROM_MESSAGES = {
    "usd": 0.75,
    "tokens_in": 3_000,
    "tokens_out": 250,
    "tokens_reasoning": 0,
    "cache_read": 200,
    "cache_write": 20,
    "wall_s": 60,
}


@pytest.mark.parametrize("point", POINTS)
def test_a_session_of_every_schema_has_the_model_and_spend_its_messages_record(
    tmp_path: Path, point: str
) -> None:
    """Before `next_venus` the session has no model column, before `session_usage` no spend
    columns; once added, the columns of a session that was already there are NULL and 0."""
    connection = create_store(tmp_path / "opencode.db", point)
    insert(connection, "session", session_row())
    add_conversation(connection, REPLIES)
    connection.commit()
    connection.close()

    worker = worker_of(tmp_path, tmp_path / "opencode.db")

    assert (worker["policy"]["model"], worker["policy"]["provider"]) == ("claude-sonnet-4-5", "anthropic")
    assert worker["cost"] == FROM_MESSAGES
    assert [message["role"] for message in worker["messages"]] == ["user", "assistant", "user", "assistant"]


def test_a_session_that_records_its_model_and_spend_keeps_them(tmp_path: Path) -> None:
    connection = create_store(tmp_path / "opencode.db", "session_usage")
    insert(
        connection,
        "session",
        session_row(
            agent="build",
            model={"id": "gpt-5", "providerID": "openai"},
            cost=1.5,
            tokens_input=7,
            tokens_output=8,
            tokens_reasoning=9,
            tokens_cache_read=10,
            tokens_cache_write=11,
        ),
    )
    add_conversation(connection, REPLIES)
    connection.commit()
    connection.close()

    worker = worker_of(tmp_path, tmp_path / "opencode.db")

    assert (worker["policy"]["model"], worker["policy"]["provider"]) == ("gpt-5", "openai")
    assert worker["cost"] == {
        "usd": 1.5,
        "tokens_in": 7,
        "tokens_out": 8,
        "tokens_reasoning": 9,
        "cache_read": 10,
        "cache_write": 11,
        "wall_s": 60,
    }


def test_a_session_imported_from_opencodes_json_files(tmp_path: Path) -> None:
    """opencode's JSON-to-SQLite import writes 0 for the session's spend and no model, and keeps
    each message's JSON as it was: here the older format, whose assistant messages kept the
    system prompt they were produced under."""
    connection = create_store(tmp_path / "opencode.db", "session_usage")
    insert(
        connection,
        "session",
        session_row(
            cost=0,
            tokens_input=0,
            tokens_output=0,
            tokens_reasoning=0,
            tokens_cache_read=0,
            tokens_cache_write=0,
        ),
    )
    add_conversation(connection, [{**reply, "system": SYSTEM} for reply in REPLIES])
    connection.commit()
    connection.close()

    worker = worker_of(tmp_path, tmp_path / "opencode.db")

    assert worker["messages"][0] == {"role": "system", "content": "\n".join(SYSTEM)}
    assert [message["role"] for message in worker["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert (worker["policy"]["model"], worker["policy"]["provider"]) == ("claude-sonnet-4-5", "anthropic")
    assert worker["cost"] == FROM_MESSAGES  # not a "measured" 0


def test_a_session_that_ended_in_a_provider_error_says_so(tmp_path: Path) -> None:
    error = {"name": "APIError", "data": {"message": "Overloaded", "statusCode": 529, "isRetryable": True}}
    connection = create_store(tmp_path / "opencode.db", "session_usage")
    insert(connection, "session", session_row(model={"id": "claude-sonnet-4-5", "providerID": "anthropic"}))
    add_conversation(connection, [REPLIES[0], {**REPLIES[1], "error": error}])
    connection.commit()
    connection.close()

    worker = worker_of(tmp_path, tmp_path / "opencode.db")

    # The errored reply was never handed back to the model: opencode leaves it out.
    assert [message["role"] for message in worker["messages"]] == ["user", "assistant", "user"]
    assert (worker["outcome"]["error"], worker["outcome"]["is_completed"]) == ("APIError: Overloaded", False)
    assert "gap" not in worker["provenance"]


def test_files_handed_to_the_worker_are_counted_in_its_metrics(tmp_path: Path) -> None:
    connection = create_store(tmp_path / "opencode.db", "session_usage")
    insert(connection, "session", session_row(model={"id": "claude-sonnet-4-5", "providerID": "anthropic"}))
    add_conversation(connection, REPLIES[:1])
    insert(
        connection,
        "part",
        {
            "id": "prt_msg_user_0_file",
            "message_id": "msg_user_0",
            "session_id": SESSION,
            "time_created": 999,
            "time_updated": 999,
            "data": {
                "type": "file",
                "mime": "image/png",
                "filename": "screenshot.png",
                "url": "data:image/png;base64,AA",
            },
        },
    )
    connection.commit()
    connection.close()

    worker = worker_of(tmp_path, tmp_path / "opencode.db")

    assert worker["outcome"]["metrics"]["attachments"] == {"image/png": 1}
    assert worker["outcome"]["is_completed"] is True
