"""Ledgers for the tests of the Inspect logs: the demo's three rounds backfilled for real, and a
small ledger written with the project's ledger writer holding the lines the demo has none of."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollout_assets.backfill import RoundBackfill
from rollout_assets.demo import DEFAULT_ROUNDS, write_demo
from rollout_assets.ledger import read_ledger_dicts, write_ledger
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line

# A lone UTF-16 surrogate (a torn emoji in a tool output), which UTF-8 cannot carry.
TORN_EMOJI = "torn \ud83d emoji"


def demo_ledgers(root: Path) -> dict[str, Path]:
    """The ledgers of the demo's rounds (round-001: every edge case; round-002: larger; round-003:
    the seed's fixed cases), by round name, as the command-line backfill writes them."""
    layout = write_demo(root / "demo", DEFAULT_ROUNDS)
    ledgers = {}
    for out_dir in layout.rounds:
        ledger = root / "ledgers" / out_dir.name / "rollout-ledger.jsonl"
        ledger.parent.mkdir(parents=True)
        with RoundBackfill(
            out_dir, opencode_db=layout.opencode_db, claude_projects_dir=layout.claude_projects_dir
        ) as backfill:
            write_ledger(ledger, backfill.lines())
        ledgers[out_dir.name] = ledger
    return ledgers


def odd_lines_ledger(path: Path) -> Path:
    """Lines the demo has none of: a null reward, a lone surrogate in a tool output, tool-call
    arguments that are no JSON object, an error the session ended in, and a candidate id that is
    no plain file name."""
    torn = sample_worker_line(rollout_id="00000000-0000-5000-8000-000000000001")
    torn["messages"][2]["content"] = TORN_EMOJI
    torn["messages"][1]["tool_calls"][0]["function"]["arguments"] = "[1, 2"
    torn["outcome"].update(reward=None, reward_source=None, error="APIError: Overloaded", is_completed=False)
    odd_candidate = sample_line(rollout_id="00000000-0000-5000-8000-000000000002", candidate_id="gen0/cand 1")
    write_ledger(path, [sample_line(), torn, odd_candidate])
    return path


def ledger_lines(ledger: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, line) of every ledger line, read strictly."""
    yield from enumerate(read_ledger_dicts(ledger), start=1)


def rewrite_line(ledger: Path, line_number: int, text: str) -> None:
    """Put `text` (no newline) in place of one line: how a damaged ledger looks on disk."""
    lines = ledger.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[line_number - 1] = text + "\n"
    ledger.write_text("".join(lines), encoding="utf-8")


def with_field(ledger: Path, line_number: int, dotted: str, value: Any) -> str:
    """The JSON text of one ledger line with one field set (no validation)."""
    line = json.loads(ledger.read_text(encoding="utf-8").splitlines()[line_number - 1])
    *parents, last = dotted.split(".")
    target = line
    for key in parents:
        target = target[key]
    target[last] = value
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))
