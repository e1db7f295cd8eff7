"""The assets of one round (one `rounds` partition each), one module per stage, and the
external inputs they read.

Each body is a few lines: resolve the round's folders (`RoundLocations`), call the stage in
`rollout_assets.stages`, attach metadata; a `RoundError` fails the step with its one sentence
(`rollout_assets.defs.failures`). Stages pass data by path (files under the ledger root), so no
transcript is ever pickled or held by Dagster.
"""

from rollout_assets.defs.assets.cells import campaign_cells
from rollout_assets.defs.assets.inputs import EXTERNAL_INPUTS, claude_projects, opencode_db, round_outdir
from rollout_assets.defs.assets.ledger import rollout_ledger
from rollout_assets.defs.assets.manifest import round_manifest
from rollout_assets.defs.assets.proposers import proposer_transcripts
from rollout_assets.defs.assets.stats import rollout_stats
from rollout_assets.defs.assets.workers import worker_sessions

ROUND_ASSETS = [
    round_manifest,
    campaign_cells,
    worker_sessions,
    proposer_transcripts,
    rollout_ledger,
    rollout_stats,
]

__all__ = [
    "EXTERNAL_INPUTS",
    "ROUND_ASSETS",
    "campaign_cells",
    "claude_projects",
    "opencode_db",
    "proposer_transcripts",
    "rollout_ledger",
    "rollout_stats",
    "round_manifest",
    "round_outdir",
    "worker_sessions",
]
