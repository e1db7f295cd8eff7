"""Which cases a written demo round reaches, read from its files alone.

The demo is where every code path of the readers, the join and the training selection should
run, in `bash scripts/demo.sh` and through Dagster. This census says which shapes a round's
files hold (its Claude Code projects folder, its opencode sessions), which lines its ledger
has and which fates its training export gave, without the demo's plan and without the readers
it exercises: a generator change that silently stops planting a case, or a planted case the
readers no longer reach, shows up as a case missing from the census.

`CASES` names each case and what proves it; `census` returns the cases one round reaches.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# The join's window around a shot: its receipt's start and end widened by two minutes
# (docs/input-formats.md, "Proposer transcripts").
WINDOW_SLACK_MS = 120_000

CASES: dict[str, str] = {
    # Claude Code projects folder (proposer transcripts)
    "subagent_inline": "a session file holding sidechain lines beside its main-thread lines",
    "subagent_beside": "an agent-*.jsonl of sidechain lines beside the session files",
    "subagent_in_subagents_folder": "an agent-*.jsonl under <session id>/subagents/",
    "agent_file_of_another_session": "a project folder of two or more sessions with an agent file beside them",
    "streamed_partial_usage": "an API message whose lines carry different usage (streamed, 1.0.x)",
    "tied_transcripts": "two sessions of one worktree equally far from a shot's start",
    "edge_of_window_transcript": "a session starting within 1 ms of a shot's window edge",
    "transcript_outside_window": "a session of a shot's worktree starting outside every window",
    "truncated_transcript_line": "a transcript file whose last line is cut mid-write",
    "repeated_transcript_line": "a transcript file holding the same uuid twice",
    "empty_transcript": "a session file with no text of user or assistant",
    "synthetic_message": "an assistant line of model <synthetic>",
    "proposer_system_or_thinking": "an assistant line with a thinking block",
    # opencode store (worker sessions)
    "system_prompt": "an assistant message carrying its system prompt",
    "ignored_part": "a text part marked ignored",
    "multi_tool_step": "one assistant step with two or more tool parts",
    "ids_and_times_disagree": "a session whose message ids do not sort in time order",
    "subagent_session": "a session whose parent_id names another session of the round",
    "session_without_messages": "a session row without message rows",
    "malformed_message": "a message row whose data is not JSON",
    "malformed_part": "a part row whose data is not JSON",
    "non_string_tool_output": "a tool part whose output is not a string",
    # the ledger
    "supervisor_line": "a supervisor line",
    "worker_line": "a worker line",
    "proposer_line": "a proposer line",
    "agent_line_with_usage": "an agent line whose tokens were counted",
    "gap_line": "a line whose transcript could not be recovered",
    "errored_line": "a line with an error",
    "truncated_line": "a line marked truncated",
    "null_reward": "a line whose reward is null",
    # the training export (default filter)
    **{
        f"fate_{fate}": f"a line whose training fate is {fate}"
        for fate in (
            "gap",
            "role_excluded",
            "error",
            "incomplete",
            "truncated",
            "no_reward",
            "below_min_reward",
            "duplicate",
            "per_instance_cap",
            "unpaired",
            "group_too_small",
            "prompt_mismatch",
        )
    },
    "preference_pair": "a preference pair",
    "bucket_of_several_pairs": "two or more pairs from one (role, instance, prompt) bucket",
    "grpo_group_of_three_or_more": "a GRPO group of three or more completions",
}

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def slug(path: str) -> str:
    """Claude Code's project-folder name of a working folder."""
    return _SLUG_UNSAFE.sub("-", path)


@dataclass
class TranscriptFile:
    """One .jsonl file as written: its parsed lines, and whether its last line is cut."""

    path: Path
    lines: list[dict[str, Any]] = field(default_factory=list)
    cut_last_line: bool = False

    @property
    def main_lines(self) -> list[dict[str, Any]]:
        return [
            line for line in self.lines if line.get("type") in ("user", "assistant") and not line.get("isSidechain")
        ]

    @property
    def first_time_ms(self) -> int | None:
        for line in self.main_lines:
            if isinstance(line.get("timestamp"), str):
                return iso_ms(line["timestamp"])
        return None


def iso_ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def read_transcript_file(path: Path) -> TranscriptFile:
    raw = path.read_bytes()
    found = TranscriptFile(path)
    rows = raw.split(b"\n")
    for index, row in enumerate(rows):
        if not row.strip():
            continue
        try:
            value = json.loads(row)
        except ValueError:
            found.cut_last_line = found.cut_last_line or index == len(rows) - 1
            continue
        if isinstance(value, dict):
            found.lines.append(value)
    return found


def census(root: Path, round_name: str, ledger: Path | None = None, training: Path | None = None) -> set[str]:
    """The cases of `CASES` that round `round_name` of the demo at `root` reaches: its inputs,
    and its ledger and training folder when given."""
    reached = claude_cases(root, round_name) | opencode_cases(root, round_name)
    if ledger is not None:
        reached |= ledger_cases(ledger)
    if training is not None:
        reached |= training_cases(training)
    return reached


# ---------------------------------------------------------------------------
# Claude Code projects folder
# ---------------------------------------------------------------------------


def _round_folders(root: Path, round_name: str) -> list[Path]:
    prefix = slug(str(root / "rounds" / round_name / "proposer-wt")) + "-"
    projects = root / "claude-projects"
    return sorted(p for p in projects.iterdir() if p.is_dir() and p.name.startswith(prefix))


def _receipts(root: Path, round_name: str) -> Iterator[dict[str, Any]]:
    for path in sorted((root / "rounds" / round_name / "proposer-shots").rglob("*.json")):
        try:
            receipt = json.loads(path.read_text(encoding="utf-8")).get("receipt")
        except ValueError:
            continue
        if isinstance(receipt, dict) and isinstance(receipt.get("worktree"), str):
            yield receipt


def claude_cases(root: Path, round_name: str) -> set[str]:
    reached: set[str] = set()
    sessions_by_folder: dict[str, list[TranscriptFile]] = {}
    for folder in _round_folders(root, round_name):
        sessions = [read_transcript_file(p) for p in sorted(folder.glob("*.jsonl")) if not p.name.startswith("agent-")]
        beside = [read_transcript_file(p) for p in sorted(folder.glob("agent-*.jsonl"))]
        nested = [read_transcript_file(p) for p in sorted(folder.glob("*/subagents/agent-*.jsonl"))]
        sessions_by_folder[folder.name] = sessions
        if beside:
            reached.add("subagent_beside")
            if len(sessions) >= 2:
                reached.add("agent_file_of_another_session")
        if nested:
            reached.add("subagent_in_subagents_folder")
        for transcript in sessions + beside + nested:
            reached |= _file_cases(transcript)
            if transcript in sessions and transcript.main_lines and any(
                line.get("isSidechain") is True for line in transcript.lines
            ):
                reached.add("subagent_inline")
    reached |= _window_cases(root, round_name, sessions_by_folder)
    return reached


def _file_cases(transcript: TranscriptFile) -> set[str]:
    reached: set[str] = set()
    if transcript.cut_last_line:
        reached.add("truncated_transcript_line")
    uuids = Counter(line["uuid"] for line in transcript.lines if isinstance(line.get("uuid"), str))
    if any(count > 1 for count in uuids.values()):
        reached.add("repeated_transcript_line")
    usages: dict[str, set[str]] = {}
    spoken = False
    for line in transcript.lines:
        message = line.get("message") if isinstance(line.get("message"), dict) else {}
        content = message.get("content")
        if isinstance(content, str) or any(
            isinstance(b, dict) and b.get("type") in ("text", "tool_use", "tool_result") for b in content or []
        ):
            spoken = True
        if line.get("type") != "assistant":
            continue
        if message.get("model") == "<synthetic>":
            reached.add("synthetic_message")
        if any(isinstance(b, dict) and b.get("type") == "thinking" for b in content or []):
            reached.add("proposer_system_or_thinking")
        if isinstance(message.get("id"), str):
            usages.setdefault(message["id"], set()).add(json.dumps(message.get("usage"), sort_keys=True))
    if any(len(seen) > 1 for seen in usages.values()):
        reached.add("streamed_partial_usage")
    if transcript.main_lines and not spoken:
        reached.add("empty_transcript")
    return reached


def _window_cases(root: Path, round_name: str, sessions_by_folder: dict[str, list[TranscriptFile]]) -> set[str]:
    """Ties, window edges and late sessions, against every receipt with both times."""
    reached: set[str] = set()
    in_some_window: set[Path] = set()
    for receipt in _receipts(root, round_name):
        sessions = [s for s in sessions_by_folder.get(slug(receipt["worktree"]), []) if s.first_time_ms is not None]
        if not (isinstance(receipt.get("startedAt"), str) and isinstance(receipt.get("completedAt"), str)):
            in_some_window.update(s.path for s in sessions)
            continue
        started, completed = iso_ms(receipt["startedAt"]), iso_ms(receipt["completedAt"])
        low, high = started - WINDOW_SLACK_MS, completed + WINDOW_SLACK_MS
        distances = Counter()
        for session in sessions:
            start = session.first_time_ms
            assert start is not None
            if abs(start - low) <= 1 or abs(start - high) <= 1:
                reached.add("edge_of_window_transcript")
            if low <= start <= high:
                in_some_window.add(session.path)
                distances[abs(start - started)] += 1
        if any(count > 1 for count in distances.values()):
            reached.add("tied_transcripts")
    every_session = [s.path for sessions in sessions_by_folder.values() for s in sessions if s.first_time_ms]
    if any(path not in in_some_window for path in every_session):
        reached.add("transcript_outside_window")
    return reached


# ---------------------------------------------------------------------------
# opencode store
# ---------------------------------------------------------------------------


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def opencode_cases(root: Path, round_name: str) -> set[str]:
    reached: set[str] = set()
    clones = f"{root / 'worker-clones' / round_name}/"
    db = sqlite3.connect(f"file:{root / 'opencode.db'}?mode=ro", uri=True)
    try:
        sessions = db.execute(
            "SELECT id, parent_id FROM session WHERE substr(directory, 1, ?) = ?", (len(clones), clones)
        ).fetchall()
        ids = {session_id for session_id, _ in sessions}
        for session_id, parent_id in sessions:
            if parent_id in ids:
                reached.add("subagent_session")
            messages = db.execute(
                "SELECT id, time_created, data FROM message WHERE session_id = ?", (session_id,)
            ).fetchall()
            if not messages:
                reached.add("session_without_messages")
            by_id = [m[0] for m in sorted(messages, key=lambda m: m[0])]
            by_time = [m[0] for m in sorted(messages, key=lambda m: (m[1], m[0]))]
            if by_id != by_time:
                reached.add("ids_and_times_disagree")
            for _, _, data in messages:
                value = _json_or_none(data)
                if value is None:
                    reached.add("malformed_message")
                elif isinstance(value, dict) and value.get("role") == "assistant" and value.get("system"):
                    reached.add("system_prompt")
            parts = db.execute(
                "SELECT message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id", (session_id,)
            ).fetchall()
            reached |= _part_cases(parts)
    finally:
        db.close()
    return reached


def _part_cases(parts: list[tuple[str, str]]) -> set[str]:
    reached: set[str] = set()
    tools_in_step: Counter[tuple[str, int]] = Counter()
    step: dict[str, int] = {}
    for message_id, data in parts:
        part = _json_or_none(data)
        if not isinstance(part, dict):
            reached.add("malformed_part")
            continue
        kind = part.get("type")
        if kind == "step-start":
            step[message_id] = step.get(message_id, 0) + 1
        elif kind == "tool":
            tools_in_step[(message_id, step.get(message_id, 0))] += 1
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            if "output" in state and not isinstance(state["output"], str):
                reached.add("non_string_tool_output")
        elif kind == "text" and part.get("ignored") is True:
            reached.add("ignored_part")
    if any(count >= 2 for count in tools_in_step.values()):
        reached.add("multi_tool_step")
    return reached


# ---------------------------------------------------------------------------
# ledger and training export
# ---------------------------------------------------------------------------


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(row) for row in path.read_text(encoding="utf-8").splitlines() if row.strip()]


def ledger_cases(ledger: Path) -> set[str]:
    reached: set[str] = set()
    for line in _jsonl(ledger):
        role = line["role"]
        if role in ("supervisor", "worker", "proposer"):
            reached.add(f"{role}_line")
        if role == "agent" and line["cost"]["tokens_out"] is not None:
            reached.add("agent_line_with_usage")
        if line["provenance"].get("gap") is not None:
            reached.add("gap_line")
        outcome = line["outcome"]
        if outcome["error"] is not None:
            reached.add("errored_line")
        if outcome["is_truncated"]:
            reached.add("truncated_line")
        if outcome["reward"] is None:
            reached.add("null_reward")
    return reached


def training_cases(folder: Path) -> set[str]:
    reached: set[str] = set()
    for dataset in ("sft", "preference-pairs", "grpo-groups"):
        for entry in _jsonl(folder / f"{dataset}.accounting.jsonl"):
            if f"fate_{entry['fate']}" in CASES:
                reached.add(f"fate_{entry['fate']}")
    pairs = _parquet_rows(folder / "preference-pairs.parquet")
    if pairs:
        reached.add("preference_pair")
        buckets = Counter(
            (row["metadata"]["role"], row["metadata"]["instance_id"], json.dumps(row["prompt"], sort_keys=True))
            for row in pairs
        )
        if any(count >= 2 for count in buckets.values()):
            reached.add("bucket_of_several_pairs")
    groups = _parquet_rows(folder / "grpo-groups.parquet")
    if any(len(row.get("completions") or []) >= 3 for row in groups):
        reached.add("grpo_group_of_three_or_more")
    return reached


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
