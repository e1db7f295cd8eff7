"""The backfill as stored stages: what each Dagster asset of a round computes and writes.

Owns the on-disk layout of one round's outputs under the ledger root (layout.py), the
records that tie each stage to what it was built from (records.py), one module per stage
and the policy that keeps a rebuilt ledger from losing transcripts (loss_guard.py). No
Dagster here: the asset bodies call these and attach metadata, and the functions can be run
and benchmarked alone.

    <ledger root>/<round>/
      manifest.json                          round_manifest (manifest.py): the whole manifest
      stages/manifest-head.json              round_manifest: the manifest without its per-cell lists
      stages/manifest-cells.jsonl            round_manifest: {"entry", "cell", "key"} a cell
      stages/campaign-cells.jsonl            campaign_cells (cells.py): {"supervisor": line, "worker_cwds": [...]}
      stages/worker-sessions.jsonl           worker_sessions (workers.py): worker lines in ledger order
      stages/worker-sessions.json            worker_sessions: store summary, counters, line order
      stages/proposer-transcripts.jsonl      proposer_transcripts (proposers.py): proposer lines in ledger order
      rollout-ledger.jsonl                   rollout_ledger (ledger.py): the validated tangle.rollout.v1 ledger
      stages/rollout-ledger-stats.json       rollout_ledger: the counters of that file
      stages/built-from/<stage>.json         what each stage was built from (records.py)
      rollout-stats.json                     rollout_stats (stats.py): the counters (rollout_ledger removes
                                             them before it replaces the ledger)

Every file is written atomically (temp file + rename), so a failed stage leaves the previous
file intact. Stage files are JSON, never pickles, and every stage streams: no stage holds a
round's transcripts in memory.
"""

from rollout_assets.io import LineRuns, file_identity
from rollout_assets.stages.cells import CellsSummary, ProgressLog, read_cell_rows, write_campaign_cells
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.ledger import write_rollout_ledger
from rollout_assets.stages.loss_guard import TranscriptLossError, refuse_to_lose_transcripts
from rollout_assets.stages.manifest import current_manifest, stored_manifest, write_manifest
from rollout_assets.stages.proposers import write_proposer_transcripts
from rollout_assets.stages.records import RoundChangedError, StageMismatchError, check_stages_agree
from rollout_assets.stages.stats import write_rollout_stats
from rollout_assets.stages.workers import RowsUnit, WorkerLinesTally, row_units, write_worker_sessions

# The worker stage's file read as runs of lines: the name this class had here before it moved
# to rollout_assets.io, kept for the code that imports it from the stages.
WorkerLineRuns = LineRuns

__all__ = [
    "CellsSummary",
    "ProgressLog",
    "RoundChangedError",
    "RoundOutputs",
    "RowsUnit",
    "StageMismatchError",
    "TranscriptLossError",
    "WorkerLineRuns",
    "WorkerLinesTally",
    "check_stages_agree",
    "current_manifest",
    "file_identity",
    "read_cell_rows",
    "refuse_to_lose_transcripts",
    "row_units",
    "stored_manifest",
    "write_campaign_cells",
    "write_manifest",
    "write_proposer_transcripts",
    "write_rollout_ledger",
    "write_rollout_stats",
    "write_worker_sessions",
]
