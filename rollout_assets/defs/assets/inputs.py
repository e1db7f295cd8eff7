"""The external inputs of the round assets: shown in lineage, never materialized here."""

from dagster import AssetSpec

from rollout_assets.defs.constants import OWNERS, ROUND_OUTDIR, SOURCES_GROUP
from rollout_assets.defs.partitions import ROUNDS

round_outdir = AssetSpec(
    ROUND_OUTDIR,
    description="A round's outDir under the rounds root, as the improvement loop wrote it.",
    partitions_def=ROUNDS,
    group_name=SOURCES_GROUP,
    kinds={"file"},
    owners=OWNERS,
)
opencode_db = AssetSpec(
    "opencode_db",
    description="The opencode SQLite store holding worker sessions (read-only).",
    group_name=SOURCES_GROUP,
    kinds={"sqlite"},
    owners=OWNERS,
)
claude_projects = AssetSpec(
    "claude_projects",
    description="The Claude Code projects folder holding proposer transcripts (read-only).",
    group_name=SOURCES_GROUP,
    kinds={"file"},
    owners=OWNERS,
)

EXTERNAL_INPUTS = [round_outdir, opencode_db, claude_projects]
