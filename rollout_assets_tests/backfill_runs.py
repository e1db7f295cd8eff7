"""Shared helpers of the backfill tests: run the real join on a round, and find lines in it.

The id rule is recomputed here from docs/line-format.md ("Ids"), never imported from the package,
so a test that compares ids checks the code against the spec and not against itself.
"""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.backfill import BackfillStats, RoundBackfill

CAPTURED_AT = "2026-12-01T12:00:00.000Z"
ROLLOUT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1")
SUPERVISOR_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"
WORKER_LIST_MISSING_SUFFIX = "; result.json missing: this cell's worker sessions cannot be listed"
SEED_STATS_KEYS = [
    "lines",
    "byRole",
    "fullTranscripts",
    "gapLines",
    "rewardLabeled",
    "workerSessionsJoined",
    "workerCwdsMissed",
    "workerSessionsEmpty",
    "proposerShotsJoined",
    "proposerShotsMissed",
    "opencodeDbAvailable",
]


def rollout_uuid(name: str) -> str:
    """uuid5(uuid5(NAMESPACE_URL, "tangle.rollout.v1"), name), as docs/line-format.md defines ids."""
    return str(uuid.uuid5(ROLLOUT_NAMESPACE, name))


@dataclass
class Backfilled:
    """One finished backfill: its lines in ledger order and its stats."""

    out_dir: Path
    lines: list[dict[str, Any]]
    stats: BackfillStats

    def role(self, role: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["role"] == role]

    def workers_of(self, supervisor: dict[str, Any]) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["parent_rollout_id"] == supervisor["rollout_id"]]

    def supervisor_of_cell(self, cell_dir: Path) -> dict[str, Any]:
        """The supervisor line of the cell stored in `cell_dir` (by candidate, scenarioId and rep)."""
        record = json.loads((cell_dir / "cached-result.json").read_text(encoding="utf-8"))
        key = (candidate_of_campaign(cell_dir.parent), record["scenarioId"], record["rep"])
        found = [
            line
            for line in self.role("supervisor")
            if (line["candidate_id"], line["task"]["instance_id"], line["task"]["rep"]) == key
        ]
        assert len(found) == 1, f"{len(found)} supervisor lines for {key}"
        return found[0]

    def proposer_of_receipt(self, receipt_path: Path) -> dict[str, Any]:
        """The proposer line of one receipt file (by its worktree and shot number)."""
        match = re.fullmatch(r"gen(\d+)-cand(\d+)-shot(\d+)\.json", receipt_path.name)
        assert match is not None, receipt_path
        author = None if receipt_path.parent.name == "proposer-shots" else receipt_path.parent.name
        worktree = f"gen{match[1]}-cand{match[2]}" + ("" if author is None else f"-{author}")
        found = [
            line
            for line in self.role("proposer")
            if line["artifacts"]["run_dir"] == str(self.out_dir / "proposer-wt" / worktree)
            and line["task"]["rep"] == int(match[3])
        ]
        assert len(found) == 1, f"{len(found)} proposer lines for {receipt_path}"
        return found[0]

    def worker_lines_of_cwd(self, worker_cwd: str) -> list[dict[str, Any]]:
        return [
            line for line in self.role("worker") if line["outcome"]["metrics"]["worker_cwd"] == worker_cwd
        ]


def candidate_of_campaign(campaign_dir: Path) -> str:
    if campaign_dir.name == "baseline":
        return "baseline"
    generation = campaign_dir.parent.name.removeprefix("gen-")
    candidate = campaign_dir.name.removeprefix("candidate-")
    return f"gen{generation}-cand{candidate}"


def backfill(
    out_dir: str | Path,
    *,
    opencode_db: str | Path,
    claude_projects_dir: str | Path,
    captured_at: str | None = CAPTURED_AT,
) -> Backfilled:
    """Run the whole join of one round, as the command line does, and keep everything."""
    with RoundBackfill(
        out_dir, opencode_db=opencode_db, claude_projects_dir=claude_projects_dir, captured_at=captured_at
    ) as run:
        lines = list(run.lines())
        return Backfilled(out_dir=run.out_dir, lines=lines, stats=run.stats)


def session_rows(opencode_db: Path, directory: str) -> list[dict[str, Any]]:
    """The opencode session rows of one directory, read straight from SQLite, oldest first."""
    connection = sqlite3.connect(f"file:{opencode_db}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        rows = connection.execute(
            "SELECT * FROM session WHERE directory = ? ORDER BY time_created", (directory,)
        ).fetchall()
    finally:
        connection.close()
    return [dict(row) for row in rows]


def session_parts(opencode_db: Path, session_id: str) -> list[str]:
    """The raw `data` text of every part of a session's messages, in part-id order."""
    connection = sqlite3.connect(f"file:{opencode_db}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT p.data FROM part AS p JOIN message AS m ON m.id = p.message_id "
            "WHERE m.session_id = ? ORDER BY p.id",
            (session_id,),
        ).fetchall()
    finally:
        connection.close()
    return [row[0] for row in rows]


def session_message_data(opencode_db: Path, session_id: str) -> list[str]:
    """The raw `data` text of every message row of a session."""
    connection = sqlite3.connect(f"file:{opencode_db}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT data FROM message WHERE session_id = ? ORDER BY time_created, id", (session_id,)
        ).fetchall()
    finally:
        connection.close()
    return [row[0] for row in rows]


def parsed_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def claude_usage_once_per_message(transcript: Path) -> dict[str, int]:
    """Token usage of a Claude transcript recounted from the raw file: once per API message id,
    main-thread assistant lines only."""
    totals = {"tokens_in": 0, "tokens_out": 0, "cache_read": 0, "cache_write": 0}
    seen: set[str] = set()
    for raw in transcript.read_text(encoding="utf-8").splitlines():
        entry = parsed_or_none(raw)
        if (
            not isinstance(entry, dict)
            or entry.get("type") != "assistant"
            or entry.get("isSidechain") is True
        ):
            continue
        message = entry["message"]
        if message["id"] in seen:
            continue
        seen.add(message["id"])
        usage = message["usage"]
        totals["tokens_in"] += usage["input_tokens"]
        totals["tokens_out"] += usage["output_tokens"]
        totals["cache_read"] += usage["cache_read_input_tokens"]
        totals["cache_write"] += usage["cache_creation_input_tokens"]
    return totals


def without_captured_at(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stripped = []
    for line in lines:
        copy = json.loads(json.dumps(line))
        del copy["provenance"]["captured_at"]
        stripped.append(copy)
    return stripped
