"""The backfill: the seed's join from round sources to `tangle.rollout.v1` lines and stats.

Pure functions of what the readers in `rollout_assets.sources` return; no Dagster here.
"""

from rollout_assets.backfill.join import (
    CellRow,
    RoundBackfill,
    cell_rows,
    choose_transcript,
    episode_lines,
    line_context,
    proposer_lines,
    utc_now_iso,
)
from rollout_assets.backfill.stats import BackfillStats

__all__ = [
    "BackfillStats",
    "CellRow",
    "RoundBackfill",
    "cell_rows",
    "choose_transcript",
    "episode_lines",
    "line_context",
    "proposer_lines",
    "utc_now_iso",
]
