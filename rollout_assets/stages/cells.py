"""The campaign_cells stage: one row per campaign cell, its supervisor line (validated) and
its distinct worker cwds, written on every core; and the rows read back in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.backfill import CellRow, cell_rows, line_context
from rollout_assets.backfill.lines import LineContext
from rollout_assets.backfill.parallel import (
    CellUnit,
    default_workers,
    round_units,
    unit_manifest,
    write_units,
)
from rollout_assets.counters import merge_counters
from rollout_assets.io import file_identity
from rollout_assets.ledger import AtomicJsonlWriter, iter_jsonl, validate_line
from rollout_assets.sources.round import RoundManifest
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.manifest import current_manifest
from rollout_assets.stages.records import manifest_as_recorded, unchanged_round, write_record

ProgressLog = Callable[[str], None]


@dataclass
class CellsSummary:
    """Counters of the cell rows written (summed over the units of the stage)."""

    cells: int = 0
    worker_cwds: int = 0
    reward_labeled: int = 0
    cells_without_worker_list: int = 0
    by_candidate: dict[str, int] = field(default_factory=dict)

    def observe(self, row: dict[str, Any]) -> None:
        supervisor = row["supervisor"]
        self.cells += 1
        self.worker_cwds += len(row["worker_cwds"])
        self.reward_labeled += supervisor["outcome"]["reward"] is not None
        self.cells_without_worker_list += supervisor["outcome"]["metrics"].get("worker_list_missing") is True
        candidate = supervisor["candidate_id"]
        self.by_candidate[candidate] = self.by_candidate.get(candidate, 0) + 1

    def merge(self, other: CellsSummary) -> None:
        merge_counters(self, other)


class _CellRowsProducer:
    """The cell rows of one unit of cells (run in a forked worker)."""

    def __init__(self, manifest: RoundManifest, context: LineContext):
        self.manifest, self.context = manifest, context

    def __call__(self, unit: CellUnit) -> Iterator[dict[str, Any]]:
        for row in cell_rows(unit_manifest(self.manifest, unit), self.context):
            # Each line is validated by the stage that first writes it; the ledger stage
            # then assembles already-valid lines.
            validate_line(row.supervisor)
            yield {"supervisor": row.supervisor, "worker_cwds": row.worker_cwds}


def write_campaign_cells(
    out_dir: Path,
    outputs: RoundOutputs,
    captured_at: str,
    log: ProgressLog | None = None,
    workers: int | None = None,
) -> CellsSummary:
    """One row per campaign cell: its supervisor line and its distinct worker cwds, on every core."""
    manifest_as_recorded(outputs)  # one clear sentence when round_manifest never ran or was changed
    manifest = current_manifest(out_dir, outputs)  # names the cells added or removed, if any
    built_from = unchanged_round(out_dir, outputs)  # any other change
    units = [unit for unit in round_units(manifest) if isinstance(unit, CellUnit)]
    left = {index: len(entry.cells) for index, entry in enumerate(manifest.entries)}

    def unit_done(unit: CellUnit) -> None:
        left[unit.entry] -= unit.stop - unit.start
        entry = manifest.entries[unit.entry]
        if left[unit.entry] == 0 and log is not None:
            log(f"campaign_cells: candidate {entry.candidate_id} done ({len(entry.cells)} lines)")

    producer = _CellRowsProducer(manifest, line_context(manifest, captured_at))
    with AtomicJsonlWriter(outputs.campaign_cells) as writer:
        summary = write_units(
            writer,
            units,
            producer,
            workers=workers or default_workers(),
            on_unit_done=unit_done,
            new_tally=CellsSummary,
        )
    write_record(
        outputs,
        "campaign_cells",
        {"manifest": built_from["manifest"], "cells": file_identity(outputs.campaign_cells)},
    )
    return summary


def read_cell_rows(outputs: RoundOutputs) -> Iterator[CellRow]:
    for record in iter_jsonl(outputs.campaign_cells):
        yield CellRow(supervisor=record["supervisor"], worker_cwds=record["worker_cwds"])
