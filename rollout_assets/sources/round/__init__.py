"""The round reader: one outDir's own files, joined into a manifest.

Owns: campaign discovery (`improve-run/baseline`, `improve-run/gen-<g>/candidate-<i>`), the
campaign cells (`cached-result.json`), the supervisor's `result.json`, the cost-ledger
receipts and the proposer shot receipts (docs/input-formats.md §1-3). Does not own: the
harness stores (opencode, Claude Code) or the ledger lines built from all of this.

    layout.py          the outDir, campaign discovery, the folder-listing rules
    cells.py           one cell (CellRecord), a campaign's cells (CampaignCells)
    campaign_tally.py  one campaign read and summed for the manifest
    run_dirs.py        a cell's run directory: result.json, judge.json, worker cwds
    costs.py           the cost ledger's settled receipts
    receipts.py        the proposer shot receipts
    manifest.py        the manifest: built from the round, or read back from its JSON
    packed.py          the compact string list the manifest keeps per cell

Corrupt evidence stops the round (`RoundInputError`, naming the file and the problem);
missing optional files are returned as `None` for the join to turn into gap lines.
Nothing here writes anywhere.
"""

from rollout_assets.sources.round.cells import (
    CELL_CACHE,
    CampaignCells,
    CellRecord,
    artifact_of,
    campaign_cell_names,
    read_cell,
)
from rollout_assets.sources.round.costs import CostLedger, read_cost_ledger
from rollout_assets.sources.round.errors import RoundInputError
from rollout_assets.sources.round.layout import (
    BASELINE_CANDIDATE_INDEX,
    BASELINE_GENERATION,
    candidate_id,
    discover_campaigns,
    resolve_out_dir,
)
from rollout_assets.sources.round.manifest import (
    CampaignEntry,
    RoundManifest,
    build_manifest,
    manifest_from_json,
    read_provenance,
)
from rollout_assets.sources.round.packed import PackedStrings
from rollout_assets.sources.round.receipts import ShotReceiptFile, list_shot_receipts, read_shot_receipt
from rollout_assets.sources.round.run_dirs import (
    read_judge_verdict,
    read_result_and_verdict,
    read_supervisor_result,
    reports_unlisted_workers,
    run_dir_file,
    worker_cwds_of,
)

__all__ = [
    "BASELINE_CANDIDATE_INDEX",
    "BASELINE_GENERATION",
    "CELL_CACHE",
    "CampaignCells",
    "CampaignEntry",
    "CellRecord",
    "CostLedger",
    "PackedStrings",
    "RoundInputError",
    "RoundManifest",
    "ShotReceiptFile",
    "artifact_of",
    "build_manifest",
    "candidate_id",
    "discover_campaigns",
    "campaign_cell_names",
    "list_shot_receipts",
    "manifest_from_json",
    "read_cell",
    "read_cost_ledger",
    "read_judge_verdict",
    "read_result_and_verdict",
    "read_provenance",
    "read_shot_receipt",
    "read_supervisor_result",
    "reports_unlisted_workers",
    "resolve_out_dir",
    "run_dir_file",
    "worker_cwds_of",
]
