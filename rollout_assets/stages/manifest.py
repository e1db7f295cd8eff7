"""The round_manifest stage: the round's manifest, stored as JSON with its record, and read
back by the stages after it.

manifest.json is the whole manifest, for people and tools (docs/input-formats.md §2). The
stages after it read two smaller files the stage writes beside it, so that none parses a row
of every cell (at 96,000 cells manifest.json is about 70 MB, and parsed, several times that):
- stages/manifest-head.json: the manifest without its per-cell lists (perInstance,
  artifactPaths, settledCallIds), all that the proposer and worker stages need;
- stages/manifest-cells.jsonl: one line a cell, `{"entry": e, "cell": name, "key": check}`,
  in manifest order (`e` counts the manifest's campaigns from 0, `name` is the cell's folder,
  `check` the checksum of its (scenarioId, rep) that `CampaignCells` refuses a changed cell
  by), from which campaign_cells gets its cells.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any, BinaryIO

from rollout_assets.io import file_identity, read_json_file, write_atomically, write_json_atomic
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT, round_state_digest
from rollout_assets.sources.round import (
    CELL_CACHE,
    CampaignCells,
    PackedStrings,
    RoundManifest,
    build_manifest,
    campaign_cell_names,
    manifest_from_json,
)
from rollout_assets.stages.json_file import write_json_streaming
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.records import RoundChangedError, StageMismatchError, write_record


def write_manifest(
    out_dir: Path, outputs: RoundOutputs, input_fingerprint: str | None = None
) -> RoundManifest:
    """Build the manifest (fail loud on corrupt evidence) and store its JSON, its head and its
    cells, with its record.

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
    write_json_atomic(outputs.manifest_head, manifest.to_json(per_cell=False))
    write_atomically(outputs.manifest_cells, lambda handle: _write_cells(handle, manifest))
    record: dict[str, Any] = {
        "outDir": str(manifest.out_dir),
        "inputs": inputs,
        "manifest": file_identity(outputs.manifest),
        "manifestHead": file_identity(outputs.manifest_head),
        "manifestCells": file_identity(outputs.manifest_cells),
    }
    if input_fingerprint is not None:
        record[INPUT_FINGERPRINT] = input_fingerprint
    write_record(outputs, "round_manifest", record)
    return manifest


def _write_cells(handle: BinaryIO, manifest: RoundManifest) -> None:
    for index, entry in enumerate(manifest.entries):
        assert isinstance(entry.cells, CampaignCells)  # as build_manifest gives them
        # ASCII JSON: a cell folder's name may hold a lone surrogate (an undecodable byte).
        lines = [
            json.dumps({"entry": index, "cell": name, "key": check}) + "\n"
            for name, check in entry.cells.names_and_checks()
        ]
        handle.write("".join(lines).encode("ascii"))


def _read_stored(path: Path) -> Any:
    try:
        return read_json_file(path)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{path} does not exist: materialize round_manifest again") from error


def stored_manifest(outputs: RoundOutputs) -> RoundManifest:
    """The manifest the manifest stage wrote, from its head: its entries without their cells."""
    try:
        return manifest_from_json(_read_stored(outputs.manifest_head))
    except (KeyError, TypeError) as error:
        # A file of an older version of this project lacks a key this one needs.
        raise StageMismatchError(
            f"{outputs.manifest_head} lacks {error} (written by another version?); re-materialize round_manifest"
        ) from error


def current_manifest(out_dir: Path, outputs: RoundOutputs) -> RoundManifest:
    """The stored manifest with its cells, refusing to go on if the round's cells are no longer
    the ones it lists.

    A round still being written (cells appearing or vanishing between two stages) would
    otherwise give a ledger that matches neither state of the round. Listing the campaign
    folders is enough here: each cell is read when its line is built, and a file that became
    another cell is refused then.
    """
    manifest = stored_manifest(outputs)
    _add_stored_cells(outputs, manifest)
    added, removed = _cells_changed(out_dir, manifest)
    if added or removed:
        raise RoundChangedError(
            f"round {out_dir} changed since its round_manifest was materialized: {len(added)} cell(s) added "
            f"{added[:3]}, {len(removed)} removed {removed[:3]}; materialize the round again, every stage from "
            "round_manifest on"
        )
    return manifest


def _add_stored_cells(outputs: RoundOutputs, manifest: RoundManifest) -> None:
    """Each entry's cells as manifest-cells.jsonl lists them (a few bytes a cell, no file read)."""
    names = [PackedStrings() for _ in manifest.entries]
    checks = [array("I") for _ in manifest.entries]
    try:
        with open(outputs.manifest_cells, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                entry, name, check = _stored_cell(raw, len(manifest.entries))
                if entry is None:
                    raise StageMismatchError(
                        f"{outputs.manifest_cells}:{number}: not a cell of the manifest's {len(manifest.entries)} "
                        "campaigns; re-materialize round_manifest"
                    )
                names[entry].append(name)
                checks[entry].append(check)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{error.filename} does not exist: materialize round_manifest again") from error
    for entry_of, entry_names, entry_checks in zip(manifest.entries, names, checks, strict=True):
        entry_of.cells = CampaignCells(entry_of.campaign_dir, entry_names, entry_checks)


def _stored_cell(raw: bytes, entries: int) -> tuple[int | None, str, int]:
    """(entry, cell folder name, key check) of one line; entry None when the line is no such cell."""
    try:
        cell = json.loads(raw)
    except ValueError:
        return None, "", 0
    if not isinstance(cell, dict):
        return None, "", 0
    entry, name, check = cell.get("entry"), cell.get("cell"), cell.get("key")
    # `type(...) is int`: a JSON true is no entry number.
    if type(entry) is int and 0 <= entry < entries and isinstance(name, str) and type(check) is int:
        if 0 <= check < 2**32:
            return entry, name, check
    return None, "", 0


def _cells_changed(out_dir: Path, manifest: RoundManifest) -> tuple[list[str], list[str]]:
    """The cells of the round now that the manifest does not list, and those it lists that are
    gone (their cache paths, sorted), one campaign at a time."""
    stored = {entry.campaign_dir: entry.cells for entry in manifest.entries}
    added: list[str] = []
    removed: list[str] = []
    for campaign_dir, current in campaign_cell_names(out_dir):
        cells = stored.pop(campaign_dir, None)
        listed = {name for name, _ in cells.names_and_checks()} if isinstance(cells, CampaignCells) else set()
        added += (str(campaign_dir / name / CELL_CACHE) for name in current if name not in listed)
        removed += (str(campaign_dir / name / CELL_CACHE) for name in listed.difference(current))
    for campaign_dir, cells in stored.items():  # a campaign folder that is gone
        if isinstance(cells, CampaignCells):
            removed += (str(campaign_dir / name / CELL_CACHE) for name, _ in cells.names_and_checks())
    return sorted(added), sorted(removed)
