"""The round's manifest: its own files joined into one record per campaign
(docs/input-formats.md §2), built from the round or read back from its JSON."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.io import NotJson, is_record, parse_json
from rollout_assets.sources.round.campaign_tally import read_campaign
from rollout_assets.sources.round.cells import (
    CampaignCells,
    CellRecord,
    cell_artifact_paths,
    per_instance_row,
)
from rollout_assets.sources.round.costs import read_cost_ledger
from rollout_assets.sources.round.errors import RoundInputError
from rollout_assets.sources.round.layout import (
    BASELINE_GENERATION,
    candidate_id,
    discover_campaigns,
    open_if_there,
    resolve_out_dir,
)
from rollout_assets.sources.round.receipts import ShotReceiptFile, list_shot_receipts


@dataclass
class CampaignEntry:
    """One manifest entry: the baseline or one `gen-<g>/candidate-<i>` campaign."""

    generation: int
    candidate_index: int
    campaign_dir: Path
    cells: Sequence[CellRecord]
    commit: str | None
    diff_path: str | None
    shot_receipt_paths: list[str]
    reps: int
    resolved_count: int
    # Of the round's instances, those with a conclusive replicate here (see judged_count).
    judged_count: int
    cells_cached: int
    # `cost` without its settled calls, which a real round has one of per cell (packed).
    cost_sums: dict[str, Any]
    settled_calls: Sequence[str]
    # The artifact files as a stored manifest lists them; None: found from the cells when asked
    # (kept, they would be up to three paths per cell).
    stored_artifact_paths: list[str] | None = None
    # The cells' per-instance rows as read by the manifest (build_manifest(keep_rows=True)) or
    # stored; None: read from the cells when asked.
    stored_per_instance: list[dict[str, Any]] | None = None

    @property
    def candidate_id(self) -> str:
        return candidate_id(self.generation, self.candidate_index)

    @property
    def is_baseline(self) -> bool:
        return self.generation == BASELINE_GENERATION

    @property
    def cost(self) -> dict[str, Any]:
        return {**self.cost_sums, "settledCallIds": list(self.settled_calls)}

    @property
    def artifact_paths(self) -> list[str]:
        """The cells' result.json, judge.json and patch files that exist, in cell order."""
        if self.stored_artifact_paths is not None:
            return self.stored_artifact_paths
        return [path for cell in self.cells for path in cell_artifact_paths(cell)]

    def to_json(self, *, per_cell: bool = True) -> dict[str, Any]:
        """The manifest's entry; without `per_cell`, its head: no perInstance, artifactPaths
        or settledCallIds, the lists that grow with the campaign's cells."""
        per_instance, artifact_paths = self._per_cell_lists() if per_cell else ([], [])
        entry = {
            "candidateId": self.candidate_id,
            "state": {
                "generation": self.generation,
                "candidateIndex": self.candidate_index,
                "campaignDir": str(self.campaign_dir),
                "commit": self.commit,
            },
            "action": {"diffPath": self.diff_path, "shotReceiptPaths": self.shot_receipt_paths},
            "outcome": {
                "perInstance": per_instance,
                "reps": self.reps,
                "resolvedCount": self.resolved_count,
                "judgedCount": self.judged_count,
                "cellsCached": self.cells_cached,
            },
            "cost": self.cost if per_cell else self.cost_sums,
            "artifactPaths": artifact_paths,
        }
        if not per_cell:
            del entry["outcome"]["perInstance"], entry["artifactPaths"]
        return entry

    def _per_cell_lists(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The per-instance rows and artifact paths, as kept, else from one pass over the cells
        (each file read once)."""
        if self.stored_per_instance is not None and self.stored_artifact_paths is not None:
            return self.stored_per_instance, self.stored_artifact_paths
        per_instance: list[dict[str, Any]] = []
        artifact_paths: list[str] = []
        for cell in self.cells:
            per_instance.append(per_instance_row(cell))
            artifact_paths += cell_artifact_paths(cell)
        if self.stored_artifact_paths is not None:
            artifact_paths = self.stored_artifact_paths
        return per_instance, artifact_paths


@dataclass
class RoundManifest:
    """The join of one round's own files (docs/input-formats.md §2)."""

    out_dir: Path
    provenance: Any
    instances: list[str]
    entries: list[CampaignEntry]
    cost_ledger_lines: int = 0
    cost_ledger_skipped: int = 0
    settled_call_ids: int = 0

    @property
    def run_id(self) -> str:
        run_id = self.provenance.get("runId") if is_record(self.provenance) else None
        # An empty runId names no run (and a line's run_id may not be empty): the outDir does.
        return run_id if isinstance(run_id, str) and run_id else str(self.out_dir)

    def entry_for(self, generation: int, candidate_index: int) -> CampaignEntry | None:
        for entry in self.entries:
            if (entry.generation, entry.candidate_index) == (generation, candidate_index):
                return entry
        return None

    def cell_paths(self) -> Iterator[str]:
        """Every cell's `cached-result.json`, as `to_json` lists them, without reading any."""
        for entry in self.entries:
            cells = entry.cells
            if isinstance(cells, CampaignCells):
                yield from (str(cells.cell_path(index)) for index in range(len(cells)))
            else:
                yield from (str(cell.path) for cell in cells)

    def to_json(self, *, per_cell: bool = True) -> dict[str, Any]:
        """The manifest's JSON; without `per_cell`, its head (see CampaignEntry.to_json), all
        the stages after the manifest's read but the cells."""
        return {
            "outDir": str(self.out_dir),
            "runId": self.run_id,
            "provenance": self.provenance,
            "instances": self.instances,
            "generations": _generations_json(self.entries, per_cell=per_cell),
            "costLedger": {
                "lines": self.cost_ledger_lines,
                "skipped": self.cost_ledger_skipped,
                "settledCalls": self.settled_call_ids,
            },
        }


def manifest_from_json(data: dict[str, Any]) -> RoundManifest:
    """A manifest back from its `to_json()` form, or from its head (`to_json(per_cell=False)`),
    without its cells (`cells` is empty, `stored_artifact_paths` None for a head): enough for
    every line that does not read cells (proposer lines, line context). The stages after the
    manifest's add the cells from the manifest's cell list (stages/manifest.py), so that every
    stage works from the same snapshot as the manifest stage.
    """
    entries = []
    for generation in data["generations"]:
        for rollout in generation["rollouts"]:
            state, action, outcome = rollout["state"], rollout["action"], rollout["outcome"]
            cost_sums = {key: value for key, value in rollout["cost"].items() if key != "settledCallIds"}
            artifact_paths = rollout.get("artifactPaths")
            entries.append(
                CampaignEntry(
                    generation=state["generation"],
                    candidate_index=state["candidateIndex"],
                    campaign_dir=Path(state["campaignDir"]),
                    cells=[],
                    commit=state["commit"],
                    diff_path=action["diffPath"],
                    shot_receipt_paths=list(action["shotReceiptPaths"]),
                    reps=outcome["reps"],
                    resolved_count=outcome["resolvedCount"],
                    judged_count=outcome["judgedCount"],
                    cells_cached=outcome["cellsCached"],
                    cost_sums=cost_sums,
                    settled_calls=list(rollout["cost"].get("settledCallIds", [])),
                    stored_artifact_paths=None if artifact_paths is None else list(artifact_paths),
                )
            )
    cost_ledger = data.get("costLedger", {})
    return RoundManifest(
        out_dir=Path(data["outDir"]),
        provenance=data["provenance"],
        instances=list(data["instances"]),
        entries=entries,
        cost_ledger_lines=cost_ledger.get("lines", 0),
        cost_ledger_skipped=cost_ledger.get("skipped", 0),
        settled_call_ids=cost_ledger.get("settledCalls", 0),
    )


def _generations_json(entries: list[CampaignEntry], *, per_cell: bool) -> list[dict[str, Any]]:
    generations: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        generations.setdefault(entry.generation, []).append(entry.to_json(per_cell=per_cell))
    return [{"generation": g, "rollouts": rollouts} for g, rollouts in generations.items()]


def read_provenance(out_dir: Path) -> Any:
    """`improve-run/loop-provenance.json`, parsed; None when there is none. One that is there
    but cannot be read or parsed stops the round: its `runId` names every line
    (docs/input-formats.md §1), and reading it as absent would give every rollout id of the
    round another value unseen."""
    path = out_dir / "improve-run" / "loop-provenance.json"
    handle = open_if_there(path, "loop provenance")
    if handle is None:
        return None
    with handle:
        raw = handle.read()
    try:
        return parse_json(raw)
    except NotJson as error:
        raise RoundInputError(f"{path}: loop provenance is not valid JSON ({error})") from error


def build_manifest(out_dir: str | os.PathLike[str], *, keep_rows: bool = False) -> RoundManifest:
    """Join the round's own files into its manifest; RoundInputError on corrupt evidence.

    Its size does not grow with the round's cells beyond a few bytes each (CampaignCells,
    PackedStrings): cells are read again when iterated. `keep_rows` keeps each cell's
    per-instance row and artifact paths as well (for writing the manifest's JSON without
    reading every cell a second time), in a temporary file (SpilledList), read once a walk.
    """
    out_dir = resolve_out_dir(out_dir)
    if not out_dir.is_dir():
        raise RoundInputError(f"{out_dir}: round outDir does not exist or is not a directory")
    provenance = read_provenance(out_dir)
    cost_ledger = read_cost_ledger(out_dir)
    receipts = list_shot_receipts(out_dir)
    entries: list[CampaignEntry] = []
    instances: list[str] = []
    baseline_instances: frozenset[str] = frozenset()
    for generation, candidate_index, campaign_dir in discover_campaigns(out_dir):
        is_baseline = generation == BASELINE_GENERATION
        cells, tally = read_campaign(campaign_dir, is_baseline=is_baseline, keep_rows=keep_rows)
        if is_baseline:
            if not cells:
                continue
            instances = tally.instances
            baseline_instances = frozenset(instances)
        commit = tally.commit(campaign_dir)
        reps = tally.max_rep + 1
        entries.append(
            CampaignEntry(
                generation=generation,
                candidate_index=candidate_index,
                campaign_dir=campaign_dir,
                cells=cells,
                commit=commit,
                diff_path=None if is_baseline else _candidate_diff_path(out_dir, commit),
                shot_receipt_paths=[] if is_baseline else _receipts_of(receipts, generation, candidate_index),
                reps=reps,
                resolved_count=tally.resolved_count(reps, baseline_instances),
                judged_count=tally.judged_count(baseline_instances),
                cells_cached=tally.cached,
                cost_sums=tally.cost_json(),
                settled_calls=cost_ledger.settled_calls_for(campaign_dir),
                stored_artifact_paths=tally.artifact_paths,
                stored_per_instance=tally.rows,
            )
        )
    return RoundManifest(
        out_dir=out_dir,
        provenance=provenance,
        instances=instances,
        entries=entries,
        cost_ledger_lines=cost_ledger.lines,
        cost_ledger_skipped=cost_ledger.skipped,
        settled_call_ids=sum(len(calls) for calls in cost_ledger.settled_by_run_dir.values()),
    )


def _candidate_diff_path(out_dir: Path, commit: str | None) -> str | None:
    if commit is None:
        return None
    patch = out_dir / "candidates" / f"{commit[:10]}.patch"
    return str(patch) if patch.is_file() else None


def _receipts_of(receipts: list[ShotReceiptFile], generation: int, candidate_index: int) -> list[str]:
    """The candidate's receipts, by the numbers in their names, as its proposer lines join them:
    `gen00-cand0-shot0.json` is generation 0's (a prefix `gen0-cand0-` would miss it)."""
    return sorted(
        r.path for r in receipts if (r.generation, r.candidate_index) == (generation, candidate_index)
    )
