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
from collections.abc import Container, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout_assets.io import finite_or_none
from rollout_assets.stages import RoundOutputs

if TYPE_CHECKING:
    import pandas as pd

# The roles a round yields; `agent` lines are the proposers' sub-agent conversations.
ROLES = ("supervisor", "worker", "proposer", "agent")

# The columns and their types (pandas and pyarrow read the same names), fixed: a type
# inferred from the values would change with the data (a column null in every round, or a
# summary of no rounds, would be of type null), and summaries written on different days
# could not be read as one dataset. Counts are integers; rates, means and costs are doubles,
# null when unknown.
SUMMARY_TYPES = {
    "round": "string",
    "lines": "int64",
    **{f"lines_{role}": "int64" for role in ROLES},
    "gap_lines": "int64",
    "gap_rate": "float64",
    "reward_labeled_share": "float64",
    **{f"mean_reward_{role}": "float64" for role in ROLES},
    "cost_usd": "float64",
    "cost_usd_recorded": "float64",
    "opencode_db_available": "bool",
    # False for a round whose directory is gone from the rounds root (renamed or removed): its
    # ledger stays, and a renamed round has a second row under its new name. Null when the
    # rounds root could not be listed: then nothing is known of any round's directory.
    "round_dir_present": "boolean",
}
SUMMARY_COLUMNS = list(SUMMARY_TYPES)


class StatsFileError(ValueError):
    """A round's stats file cannot be read as stats; the message names it."""


def _episode_cost(stats: dict) -> tuple[float | None, float | None]:
    """(the round's cost, the sum of the costs recorded): the episode receipts plus the
    proposer receipts. Worker session costs are part of their episode's receipt, so adding
    them would count twice. The cost is null unless every supervisor and proposer line
    recorded one: a sum with receipts missing is not the round's cost."""
    by_role = stats["byRole"]
    costs = stats.get("costUsdByRole", {})
    recorded = [costs[role]["usd"] for role in ("supervisor", "proposer") if role in costs]
    # A sum that overflowed is stored as null: the sum is then unknown, not 0.
    total = finite_or_none(sum(recorded)) if recorded and None not in recorded else None
    complete = all(
        (costs[role]["linesWithCost"] if role in costs else 0) == by_role.get(role, 0)
        for role in ("supervisor", "proposer")
    )
    return (total if complete else None), total


def summary_row(round_key: str, stats: dict, round_dir_present: bool | None) -> dict:
    """One round's row (columns: SUMMARY_TYPES)."""
    lines = stats["lines"]
    by_role = stats["byRole"]
    rewards = stats.get("rewardByRole", {})
    cost, cost_recorded = _episode_cost(stats)
    return {
        "round": round_key,
        "lines": lines,
        **{f"lines_{role}": by_role.get(role, 0) for role in ROLES},
        "gap_lines": stats["gapLines"],
        "gap_rate": stats["gapLines"] / lines if lines else None,
        "reward_labeled_share": stats["rewardLabeled"] / lines if lines else None,
        **{f"mean_reward_{role}": rewards[role]["mean"] if role in rewards else None for role in ROLES},
        "cost_usd": cost,
        "cost_usd_recorded": cost_recorded,
        "opencode_db_available": stats["opencodeDbAvailable"],
        "round_dir_present": round_dir_present,
    }


def build_rounds_summary(
    outputs_by_round: Iterable[tuple[str, RoundOutputs]], *, present: Container[str] | None
) -> tuple[pd.DataFrame, list[str]]:
    """(the summary table, rounds skipped because they have no stats yet); `present` holds the
    rounds whose directory is in the rounds root, None when that cannot be told."""
    rows, skipped = [], []
    for round_key, outputs in outputs_by_round:
        if not outputs.stats.is_file():
            skipped.append(round_key)
            continue
        try:
            stats = json.loads(outputs.stats.read_text(encoding="utf-8"))
            rows.append(summary_row(round_key, stats, None if present is None else round_key in present))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise StatsFileError(
                f"{outputs.stats} cannot be read as the stats of round {round_key} "
                f"({type(error).__name__}: {error}); materialize rollout_stats for that round again"
            ) from error
    import pandas as pd

    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS).astype(SUMMARY_TYPES)
    return frame, skipped


def write_parquet_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` to a temp file of this writer's own beside `path`, fsync it, rename it onto
    `path` and fsync the folder: two summaries built at once never share a temp file, and a
    reader sees one whole file or the other (the last rename wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_files(path)
    temp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
    try:
        frame.to_parquet(temp, index=False, schema=_parquet_schema())
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


def _parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(type_name)) for name, type_name in SUMMARY_TYPES.items()])


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
    import pandas as pd

    def cell(value) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])
