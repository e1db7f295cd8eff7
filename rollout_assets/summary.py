"""The cross-round overview: one row per round, read from every round's stored stats.

No Dagster here; `rollout_assets.defs.summary` wraps it as the `rounds_summary` asset.
pandas is imported when a summary is built, not with the definitions: every process that loads
them (each run, the code server, the sensor) would otherwise pay for importing it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

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


def summary_row(round_key: str, stats: dict) -> dict:
    """One round's row. Cost is the episode receipts plus the proposer receipts: worker
    session costs are part of their episode's receipt, so adding them would count twice."""
    lines = stats["lines"]
    by_role = stats["byRole"]
    rewards = stats.get("rewardByRole", {})
    costs = stats.get("costUsdByRole", {})
    recorded = [costs[role]["usd"] for role in ("supervisor", "proposer") if role in costs]
    return {
        "round": round_key,
        "lines": lines,
        **{f"lines_{role}": by_role.get(role, 0) for role in ROLES},
        "gap_lines": stats["gapLines"],
        "gap_rate": stats["gapLines"] / lines if lines else None,
        "reward_labeled_share": stats["rewardLabeled"] / lines if lines else None,
        **{f"mean_reward_{role}": rewards[role]["mean"] if role in rewards else None for role in ROLES},
        "cost_usd": sum(recorded) if recorded else None,
        "opencode_db_available": stats["opencodeDbAvailable"],
    }


def build_rounds_summary(outputs_by_round: Iterable[tuple[str, RoundOutputs]]) -> tuple[pd.DataFrame, list[str]]:
    """(the summary table, rounds skipped because they have no stats yet)."""
    rows, skipped = [], []
    for round_key, outputs in outputs_by_round:
        if not outputs.stats.is_file():
            skipped.append(round_key)
            continue
        rows.append(summary_row(round_key, json.loads(outputs.stats.read_text(encoding="utf-8"))))
    import pandas as pd

    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    return frame, skipped


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.tmp"
    try:
        frame.to_parquet(temp, index=False)
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)


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
