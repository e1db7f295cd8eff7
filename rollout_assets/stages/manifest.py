"""The round_manifest stage: the round's manifest, stored as JSON with its record, and read
back by the stages after it (as stored, or with its cells once they are shown unchanged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollout_assets.io import file_identity, read_json_file
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT, round_state_digest
from rollout_assets.sources.round import RoundManifest, build_manifest, list_cell_paths, manifest_from_json
from rollout_assets.stages.json_file import write_json_streaming
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.records import RoundChangedError, StageMismatchError, write_record


def write_manifest(
    out_dir: Path, outputs: RoundOutputs, input_fingerprint: str | None = None
) -> RoundManifest:
    """Build the manifest (fail loud on corrupt evidence) and store its JSON, with its record.

    `input_fingerprint` is the round's input fingerprint, the one the round sensor compares
    (of every file the backfill reads, `fingerprint_round`), taken by the caller before this
    reads anything. It travels with the stage records to the ledger's record, so the ledger's
    stats can say which inputs it was built from (write_rollout_stats) even for a run the
    sensor did not start.
    """
    # Taken before reading: a file changed while the manifest is built shows in the next stage.
    inputs = round_state_digest(out_dir)
    manifest = build_manifest(out_dir, keep_rows=True)
    write_json_streaming(outputs.manifest, manifest.to_json())
    record: dict[str, Any] = {
        "outDir": str(manifest.out_dir),
        "inputs": inputs,
        "manifest": file_identity(outputs.manifest),
    }
    if input_fingerprint is not None:
        record[INPUT_FINGERPRINT] = input_fingerprint
    write_record(outputs, "round_manifest", record)
    return manifest


def stored_manifest(outputs: RoundOutputs) -> RoundManifest:
    """The manifest snapshot the manifest stage wrote (without cell records)."""
    return _manifest_from_file(outputs, read_json_file(outputs.manifest))


def _manifest_from_file(
    outputs: RoundOutputs, stored_json: Any, *, with_cells: bool = False
) -> RoundManifest:
    try:
        return manifest_from_json(stored_json, with_cells=with_cells)
    except (KeyError, TypeError) as error:
        # A manifest.json of an older version of this project lacks a key this one needs.
        raise StageMismatchError(
            f"{outputs.manifest} lacks {error} (written by another version?); re-materialize round_manifest"
        ) from error


def _cell_paths(manifest_json: dict[str, Any]) -> list[str]:
    return [
        row["cellPath"]
        for generation in manifest_json["generations"]
        for rollout in generation["rollouts"]
        for row in rollout["outcome"]["perInstance"]
    ]


def current_manifest(out_dir: Path, outputs: RoundOutputs) -> RoundManifest:
    """The stored manifest with its cells, refusing to go on if the round's cells are no longer
    the ones it lists.

    A round still being written (cells appearing or vanishing between two stages) would
    otherwise give a ledger that matches neither state of the round. Listing the campaign
    folders is enough here: each cell is read when its line is built, and a file that became
    another cell is refused then.
    """
    stored_json = read_json_file(outputs.manifest)
    stored = set(_cell_paths(stored_json))
    current = set(list_cell_paths(out_dir))
    if stored != current:
        added, removed = sorted(current - stored), sorted(stored - current)
        raise RoundChangedError(
            f"round {out_dir} changed since its round_manifest was materialized: {len(added)} cell(s) added "
            f"{added[:3]}, {len(removed)} removed {removed[:3]}; materialize the round again, every stage from "
            "round_manifest on"
        )
    return _manifest_from_file(outputs, stored_json, with_cells=True)
