"""The cross-round overview: one row per round, read from every round's stored stats.

No Dagster here; `rollout_assets.defs.summary` wraps it as the `rounds_summary` asset.
pandas is imported when a summary is built, not with the definitions: every process that loads
them (each run, the code server, the sensor) would otherwise pay for importing it.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_assets.sources.jsonfiles import finite_or_none
from rollout_assets.stages import RoundOutputs

if TYPE_CHECKING:
    import pandas as pd

ROLES = ("supervisor", "worker", "proposer")

SUMMARY_COLUMNS = [
    "round",
    "lines",
    *(f"lines_{role}" for role in ROLES),
    "gap_lines",
    "gap_rate",
    "reward_labeled_share",
    *(f"mean_reward_{role}" for role in ROLES),
    "cost_usd",
    "opencode_db_available",
]


class StatsFileError(ValueError):
    """A round's stats file cannot be read as stats; the message names it."""


def summary_row(round_key: str, stats: dict) -> dict:
    """One round's row. Cost is the episode receipts plus the proposer receipts: worker
    session costs are part of their episode's receipt, so adding them would count twice."""
    lines = stats["lines"]
    by_role = stats["byRole"]
    rewards = stats.get("rewardByRole", {})
    costs = stats.get("costUsdByRole", {})
    # A sum that overflowed is stored as null: the round's cost is then unknown, not 0.
    recorded = [costs[role]["usd"] for role in ("supervisor", "proposer") if role in costs]
    cost = finite_or_none(sum(recorded)) if recorded and None not in recorded else None
    return {
        "round": round_key,
        "lines": lines,
        **{f"lines_{role}": by_role.get(role, 0) for role in ROLES},
        "gap_lines": stats["gapLines"],
        "gap_rate": stats["gapLines"] / lines if lines else None,
        "reward_labeled_share": stats["rewardLabeled"] / lines if lines else None,
        **{f"mean_reward_{role}": rewards[role]["mean"] if role in rewards else None for role in ROLES},
        "cost_usd": cost,
        "opencode_db_available": stats["opencodeDbAvailable"],
    }


def build_rounds_summary(outputs_by_round: Iterable[tuple[str, RoundOutputs]]) -> tuple[pd.DataFrame, list[str]]:
    """(the summary table, rounds skipped because they have no stats yet)."""
    rows, skipped = [], []
    for round_key, outputs in outputs_by_round:
        if not outputs.stats.is_file():
            skipped.append(round_key)
            continue
        try:
            rows.append(summary_row(round_key, json.loads(outputs.stats.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise StatsFileError(
                f"{outputs.stats} cannot be read as the stats of round {round_key} "
                f"({type(error).__name__}: {error}); materialize rollout_stats for that round again"
            ) from error
    import pandas as pd

    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    return frame, skipped


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` to a temp file of this writer's own beside `path`, fsync it, rename it onto
    `path` and fsync the folder: two summaries built at once never share a temp file, and a
    reader sees one whole file or the other (the last rename wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_files(path)
    temp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
    try:
        frame.to_parquet(temp, index=False)
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


# A summary is written in seconds; a temp file this old was left by a killed writer.
_STALE_TEMP_SECONDS = 3600


def _remove_stale_temp_files(path: Path) -> None:
    now = time.time()
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if now - temp.stat().st_mtime > _STALE_TEMP_SECONDS:
                temp.unlink()
        except OSError:  # removed by another writer meanwhile
            continue


def markdown_table(frame: pd.DataFrame) -> str:
    """The summary as a Markdown table (pandas' to_markdown needs tabulate; this does not)."""
    def cell(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])
