"""Real input files for reader tests: round cells, opencode databases, Claude transcripts.

Every builder writes an actual file (JSON, SQLite, JSONL) the readers open as they would
in production; nothing is faked. Each returns the path it wrote. Values given as `str` or
`bytes` are written verbatim, so a test can plant malformed content exactly where it wants.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------
# Round outDir
# ---------------------------------------------------------------------------


def write_json(path: Path, value: Any) -> Path:
    """`value` as JSON at `path` (a `str`/`bytes` value is written verbatim); parents are created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, bytes):
        path.write_bytes(value)
    elif isinstance(value, str):
        path.write_text(value, encoding="utf-8")
    else:
        path.write_text(json.dumps(value), encoding="utf-8")
    return path


def campaign_dir(out_dir: Path, generation: int | None = None, candidate: int | None = None) -> Path:
    """`improve-run/baseline` without coordinates, else `improve-run/gen-<g>/candidate-<i>`."""
    if generation is None or candidate is None:
        return out_dir / "improve-run" / "baseline"
    return out_dir / "improve-run" / f"gen-{generation}" / f"candidate-{candidate}"


def artifact(
    *, commit: str | None = "c0ffee0123456789", resolved: bool | None = True, **fields: Any
) -> dict[str, Any]:
    """A `swe-arena` artifact; keyword fields (`runDir`, `spentUsd`, ...) are added verbatim."""
    record: dict[str, Any] = {"kind": "swe-arm"}
    if commit is not None:
        record["commit"] = commit
    if resolved is not None:
        record["resolved"] = resolved
    record.update(fields)
    return record


def cell(scenario_id: str, rep: int, **fields: Any) -> dict[str, Any]:
    """A valid cell record; `artifact` defaults to a resolved one, other fields are added verbatim."""
    record: dict[str, Any] = {"cellId": f"{scenario_id}#{rep}", "scenarioId": scenario_id, "rep": rep}
    record["artifact"] = fields.pop("artifact", artifact())
    record.update(fields)
    return record


def write_cell(campaign: Path, name: str, record: Any) -> Path:
    """`<campaign>/<name>/cached-result.json` holding `record` (`str`/`bytes` verbatim)."""
    return write_json(campaign / name / "cached-result.json", record)


def write_cost_ledger(out_dir: Path, lines: Iterable[Any]) -> Path:
    """`improve-run/cost-ledger.jsonl`, one line per item (dicts as JSON, strings verbatim)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    return write_json(out_dir / "improve-run" / "cost-ledger.jsonl", text)


def cost_receipt(
    call_id: Any, run_dir: Any, *, status: str = "settled", cost_usd: float = 0.5
) -> dict[str, Any]:
    """One cost-ledger line."""
    return {
        "version": 1,
        "record": {
            "status": status,
            "callId": call_id,
            "channel": "api",
            "phase": "campaign",
            "costUsd": cost_usd,
            "tags": {"runDir": run_dir, "cellId": "x"},
        },
    }


# ---------------------------------------------------------------------------
# opencode store
# ---------------------------------------------------------------------------

SESSION_COLUMNS = (
    "id",
    "parent_id",
    "directory",
    "agent",
    "model",
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
    "time_created",
    "time_updated",
)
# An older opencode store: no cost or token columns.
LEGACY_SESSION_COLUMNS = ("id", "parent_id", "directory", "agent", "model", "time_created", "time_updated")


def session(session_id: str, directory: str, time_created: int = 1_000, **fields: Any) -> dict[str, Any]:
    """A session row (column name → value); `model` may be a dict (stored as JSON) or raw text."""
    row: dict[str, Any] = {
        "id": session_id,
        "parent_id": None,
        "directory": directory,
        "agent": "build",
        "model": {"id": "gpt-5", "providerID": "openai"},
        "cost": 0.25,
        "tokens_input": 100,
        "tokens_output": 20,
        "tokens_reasoning": 5,
        "tokens_cache_read": 40,
        "tokens_cache_write": 8,
        "time_created": time_created,
        "time_updated": time_created + 60_000,
    }
    row.update(fields)
    return row


def message(
    message_id: str, session_id: str, role: str, time_created: int = 1_000, **data: Any
) -> dict[str, Any]:
    """A message row; its `data` JSON holds `role` plus `data` (pass `raw_data` for verbatim text)."""
    raw = data.pop("raw_data", None)
    body = raw if raw is not None else {"role": role, **data}
    return {"id": message_id, "session_id": session_id, "time_created": time_created, "data": body}


def part(part_id: str, message_id: str, part_type: str | None = None, **data: Any) -> dict[str, Any]:
    """A part row; its `data` JSON holds `type` plus `data` (pass `raw_data` for verbatim text)."""
    raw = data.pop("raw_data", None)
    body = raw if raw is not None else {"type": part_type, **data}
    return {"id": part_id, "message_id": message_id, "data": body}


def tool_part(
    part_id: str, message_id: str, call_id: str, tool: str | None = "bash", **state: Any
) -> dict[str, Any]:
    """A `tool` part; `state` keywords (`input`, `output`, `status`) form its state object."""
    data: dict[str, Any] = {"callID": call_id, "state": {"status": "completed", **state}}
    if tool is not None:
        data["tool"] = tool
    return part(part_id, message_id, "tool", **data)


def _db_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def create_opencode_schema(
    connection: sqlite3.Connection, session_columns: tuple[str, ...] = SESSION_COLUMNS
) -> None:
    columns = ", ".join(f"{name} TEXT PRIMARY KEY" if name == "id" else name for name in session_columns)
    connection.execute(f"CREATE TABLE session ({columns})")
    connection.execute(
        "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, data TEXT)"
    )
    connection.execute("CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, data TEXT)")


def insert_rows(connection: sqlite3.Connection, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    for row in rows:
        names = list(row)
        connection.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
            [_db_value(row[name]) for name in names],
        )


def write_opencode_db(
    path: Path,
    *,
    sessions: Iterable[Mapping[str, Any]] = (),
    messages: Iterable[Mapping[str, Any]] = (),
    parts: Iterable[Mapping[str, Any]] = (),
    session_columns: tuple[str, ...] = SESSION_COLUMNS,
    encoding: str = "UTF-8",
) -> Path:
    """A real opencode SQLite store (rollback journal), closed when this returns.

    Session rows are trimmed to `session_columns`, so the same rows fill a legacy table.
    `encoding` is the database's text encoding (SQLite's `PRAGMA encoding`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.execute(f"PRAGMA encoding = '{encoding}'")
        create_opencode_schema(connection, session_columns)
        insert_rows(
            connection,
            "session",
            ({k: v for k, v in row.items() if k in session_columns} for row in sessions),
        )
        insert_rows(connection, "message", messages)
        insert_rows(connection, "part", parts)
        connection.commit()
    finally:
        connection.close()
    return path


# ---------------------------------------------------------------------------
# Claude Code transcripts
# ---------------------------------------------------------------------------


def write_transcript(path: Path, lines: Iterable[Any], *, final_newline: bool = True) -> Path:
    """A JSONL transcript: dicts as JSON, `str` and `bytes` items verbatim, one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    encoded = [
        line
        if isinstance(line, bytes)
        else (line if isinstance(line, str) else json.dumps(line)).encode("utf-8")
        for line in lines
    ]
    body = b"\n".join(encoded)
    path.write_bytes(body + b"\n" if final_newline and encoded else body)
    return path


def user_line(
    content: Any, timestamp: str | None = "2025-01-01T10:00:00.000Z", **fields: Any
) -> dict[str, Any]:
    """A main-thread `user` line; `content` is a string or a list of blocks."""
    line: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": content}}
    if timestamp is not None:
        line["timestamp"] = timestamp
    line.update(fields)
    return line


def assistant_line(
    message_id: str | None,
    blocks: list[dict[str, Any]],
    *,
    usage: dict[str, Any] | None = None,
    model: str | None = "claude-sonnet-4-5",
    timestamp: str | None = "2025-01-01T10:00:01.000Z",
    **fields: Any,
) -> dict[str, Any]:
    """One block line of an assistant API message, as Claude Code writes it."""
    body: dict[str, Any] = {"role": "assistant", "content": blocks}
    if message_id is not None:
        body["id"] = message_id
    if model is not None:
        body["model"] = model
    if usage is not None:
        body["usage"] = usage
    line: dict[str, Any] = {"type": "assistant", "message": body}
    if timestamp is not None:
        line["timestamp"] = timestamp
    line.update(fields)
    return line


def usage(
    input_tokens: int = 0, output_tokens: int = 0, cache_read: int = 0, cache_write: int = 0
) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
