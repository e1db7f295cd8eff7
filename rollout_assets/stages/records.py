"""Stage records: what each stage of a round was built from, and the checks that the stages
on disk fit together.

Stages can be materialized one by one, at different times. A ledger assembled from stages
that saw different states of the round (a cell cache rewritten between two of them), or
that were built from another upstream file (round_manifest run again, campaign_cells not),
or from another store, would mix two moments in one ledger, and the checks, which recount
ids and rewards, could not tell. So each stage records, beside its output
(`RoundOutputs.built_from`), the state of the round's files it saw (`round_state_digest`, key
"inputs"), the files it was built from and wrote (their identity: inode, size, mtime) and the
store it read; the stages that read the round check it has not changed since round_manifest,
and the ledger stage checks that every record names the files on disk now and one state of
the round.

The records also carry the round's input fingerprint (key INPUT_FINGERPRINT, see
sources/fingerprint.py) from round_manifest through the ledger's record to rollout_stats.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rollout_assets.errors import RoundError
from rollout_assets.io import file_identity, read_json_file, write_json_atomic
from rollout_assets.sources.fingerprint import round_state_digest
from rollout_assets.stages.layout import RoundOutputs


class RoundChangedError(RoundError, RuntimeError):
    """The round's files changed between two stages of one materialization."""


class StageMismatchError(RoundError, RuntimeError):
    """Two stage files of one round do not fit together (a stage is stale or damaged)."""


def identity_of(path: Path, stage: str) -> list[int]:
    """The identity of a file `stage` wrote; StageMismatchError when it is not there."""
    try:
        return file_identity(path)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{path} does not exist: materialize {stage} first") from error


def write_record(outputs: RoundOutputs, stage: str, record: dict[str, Any]) -> None:
    write_json_atomic(outputs.built_from(stage), record)


def read_record(outputs: RoundOutputs, stage: str) -> dict[str, Any]:
    path = outputs.built_from(stage)
    try:
        record = read_json_file(path)
    except FileNotFoundError as error:
        raise StageMismatchError(
            f"{stage} has no record of what it was built from ({path}; not materialized yet, or by an older "
            f"version): materialize {stage}"
        ) from error
    except ValueError as error:
        raise StageMismatchError(f"{path} cannot be read ({error}): materialize {stage} again") from error
    if not isinstance(record, dict):
        raise StageMismatchError(f"{path} is not a stage record: materialize {stage} again")
    return record


def manifest_as_recorded(outputs: RoundOutputs) -> dict[str, Any]:
    """The round_manifest record, once the files it wrote are shown to be those on disk."""
    record = read_record(outputs, "round_manifest")
    written = {
        "manifest": outputs.manifest,
        "manifestHead": outputs.manifest_head,
        "manifestCells": outputs.manifest_cells,
    }
    for key, path in written.items():
        if record.get(key) != identity_of(path, "round_manifest"):
            raise StageMismatchError(
                f"{path} is not the file round_manifest recorded writing: materialize round_manifest again"
            )
    return record


def unchanged_round(out_dir: Path, outputs: RoundOutputs) -> dict[str, Any]:
    """The round_manifest record, once the round's files are shown to be those it saw."""
    record = manifest_as_recorded(outputs)
    if record.get("inputs") != round_state_digest(out_dir):
        raise RoundChangedError(
            f"round {out_dir} changed since its round_manifest was materialized (a cell, receipt, cost ledger, "
            "provenance or candidate patch was added, removed or rewritten): materialize the round again, every "
            "stage from round_manifest on"
        )
    return record


def _check(stage: str, consistent: bool, why: str) -> None:
    if not consistent:
        raise StageMismatchError(
            f"{stage} is out of date ({why}): materialize it and the stages after it again"
        )


def check_stages_agree(
    outputs: RoundOutputs, opencode_db: str | os.PathLike[str], claude_projects_dir: str | os.PathLike[str]
) -> dict[str, Any]:
    """Raise unless the stage files on disk were built from one state of the round, from each
    other and from the stores configured now; return round_manifest's record."""
    manifest = unchanged_round(Path(read_record(outputs, "round_manifest").get("outDir", "")), outputs)
    # Every record is read before any is judged: a stage never materialized is named first.
    cells = read_record(outputs, "campaign_cells")
    workers = read_record(outputs, "worker_sessions")
    proposers = read_record(outputs, "proposer_transcripts")
    _check(
        "campaign_cells", cells.get("manifest") == manifest["manifest"], "built from another manifest.json"
    )
    _check(
        "campaign_cells",
        cells.get("cells") == identity_of(outputs.campaign_cells, "campaign_cells"),
        f"{outputs.campaign_cells} is not the file it recorded writing",
    )
    _check_worker_sessions(outputs, workers, cells, opencode_db)
    _check_proposer_transcripts(outputs, proposers, manifest, claude_projects_dir)
    return manifest


def _check_worker_sessions(
    outputs: RoundOutputs, workers: dict[str, Any], cells: dict[str, Any], opencode_db: str | os.PathLike[str]
) -> None:
    _check(
        "worker_sessions", workers.get("cells") == cells["cells"], "built from another campaign-cells.jsonl"
    )
    _check(
        "worker_sessions",
        workers.get("workerLines") == identity_of(outputs.worker_sessions, "worker_sessions")
        and workers.get("summary") == identity_of(outputs.worker_sessions_summary, "worker_sessions"),
        f"{outputs.worker_sessions} or its summary is not the file it recorded writing",
    )
    _check(
        "worker_sessions",
        workers.get("opencodeDb") == os.path.abspath(opencode_db),
        f"read the opencode store {workers.get('opencodeDb')}, and the store configured now is {os.path.abspath(opencode_db)}",
    )


def _check_proposer_transcripts(
    outputs: RoundOutputs,
    proposers: dict[str, Any],
    manifest: dict[str, Any],
    claude_projects_dir: str | os.PathLike[str],
) -> None:
    _check(
        "proposer_transcripts",
        proposers.get("manifest") == manifest["manifest"],
        "built from another manifest.json",
    )
    _check(
        "proposer_transcripts",
        proposers.get("proposerLines") == identity_of(outputs.proposer_transcripts, "proposer_transcripts"),
        f"{outputs.proposer_transcripts} is not the file it recorded writing",
    )
    _check(
        "proposer_transcripts",
        proposers.get("claudeProjects") == os.path.abspath(claude_projects_dir),
        f"read the Claude projects folder {proposers.get('claudeProjects')}, and the folder configured now is "
        f"{os.path.abspath(claude_projects_dir)}",
    )
