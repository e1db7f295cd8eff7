"""The proposer_transcripts stage: the proposer line of every shot receipt, joined to its
Claude transcript, in ledger order."""

from __future__ import annotations

import os
from pathlib import Path

from rollout_assets.backfill import BackfillStats, line_context, proposer_lines
from rollout_assets.io import file_identity
from rollout_assets.ledger import LedgerWriter
from rollout_assets.sources.round import RoundInputError
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.manifest import stored_manifest
from rollout_assets.stages.records import read_record, unchanged_round, write_record


def write_proposer_transcripts(
    outputs: RoundOutputs, claude_projects_dir: str | os.PathLike[str], captured_at: str
) -> BackfillStats:
    """Proposer lines of every shot receipt, joined to Claude transcripts, in ledger order."""
    out_dir = Path(read_record(outputs, "round_manifest").get("outDir", ""))
    if not out_dir.is_dir():
        # Its receipts would list as none: an empty stage, not a round without shots.
        raise RoundInputError(f"{out_dir}: round outDir does not exist or is not a directory")
    built_from = unchanged_round(out_dir, outputs)
    manifest = stored_manifest(outputs)
    stats = BackfillStats()
    with LedgerWriter(outputs.proposer_transcripts) as writer:
        for line in proposer_lines(manifest, line_context(manifest, captured_at), claude_projects_dir):
            stats.observe(line)
            writer.write(line)
    write_record(
        outputs,
        "proposer_transcripts",
        {
            "manifest": built_from["manifest"],
            "proposerLines": file_identity(outputs.proposer_transcripts),
            "claudeProjects": os.path.abspath(claude_projects_dir),
        },
    )
    return stats
