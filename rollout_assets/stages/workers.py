"""The worker_sessions stage: the worker lines of every cell row, joined from the opencode
store on every core, in ledger order; beside them a summary (the store, the counters, the
order of the lines by cell and a digest of their transcripts) that lets the ledger stage copy
them without parsing them again."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.backfill import BackfillStats, CellRow, episode_lines, line_context
from rollout_assets.backfill.lines import LineContext
from rollout_assets.backfill.losses import TranscriptDigest
from rollout_assets.backfill.parallel import CELLS_PER_UNIT, StorePerProcess, default_workers, write_units
from rollout_assets.counters import KEEP
from rollout_assets.io import file_identity
from rollout_assets.ledger import LedgerWriter, decode_record
from rollout_assets.spilled_list import SpilledList
from rollout_assets.stages.cells import ProgressLog
from rollout_assets.stages.json_file import write_json_streaming
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.manifest import stored_manifest
from rollout_assets.stages.records import identity_of, write_record


def _stored_context(outputs: RoundOutputs, captured_at: str) -> LineContext:
    return line_context(stored_manifest(outputs), captured_at)


@dataclass(frozen=True)
class RowsUnit:
    """A byte range of campaign-cells.jsonl: `rows` rows of one candidate."""

    start: int
    stop: int
    rows: int
    candidate: str


def row_units(path: Path, rows_per_unit: int) -> list[RowsUnit]:
    """Cut the cell rows into units that never span two candidates (for progress per candidate)."""
    units: list[RowsUnit] = []
    start = position = rows = 0
    candidate: str | None = None
    with open(path, "rb") as handle:
        for raw in handle:
            row_candidate = decode_record(raw)["supervisor"]["candidate_id"]
            if rows and (row_candidate != candidate or rows == rows_per_unit):
                units.append(RowsUnit(start, position, rows, candidate or ""))
                start, rows = position, 0
            candidate = row_candidate
            position += len(raw)
            rows += 1
    if rows:
        units.append(RowsUnit(start, position, rows, candidate or ""))
    return units


_CELLS_PER_LOOKUP = 64


class _WorkerSessionsProducer:
    """Worker lines of one unit of cell rows; each worker process opens its own store connection."""

    def __init__(self, cells_path: Path, stores: StorePerProcess, context: LineContext):
        self.cells_path, self.stores, self.context = cells_path, stores, context

    def __call__(self, unit: RowsUnit) -> Iterator[dict[str, Any]]:
        with open(self.cells_path, "rb") as handle:
            handle.seek(unit.start)
            chunk = handle.read(unit.stop - unit.start)
        rows = (decode_record(raw) for raw in chunk.splitlines())
        # Each worker's store is indexed by directory (StorePerProcess), so batches of cells
        # smaller than a unit cost no scan, and hold a few parsed supervisor lines at a time
        # rather than the unit's 512 (about 4 MB a worker).
        yield from episode_lines(
            (CellRow(row["supervisor"], row["worker_cwds"]) for row in rows),
            self.stores.get(),
            self.context,
            include_supervisors=False,
            cells_per_batch=_CELLS_PER_LOOKUP,
        )

    def close(self) -> None:
        self.stores.close()


@dataclass
class WorkerLinesTally(BackfillStats):
    """The worker stage's counters, plus the order of its lines: for each run of consecutive
    lines of one cell, [the supervisor's rollout_id, line count]. The ledger stage interleaves
    the lines with their supervisors by it, copying them without parsing them again.

    The fields of its own are left out of the counters' merge (KEEP) and merged by `merge`: a
    run of one cell may continue into the next part, and a digest adds modulo 2**128.
    """

    # The finished runs, in a temporary file (96,000 of them at 96,000 cells, about 16 MB as
    # lists in the run's process); the last run stays open, as the next line may continue it.
    parents: list[list[Any]] = field(default_factory=SpilledList, metadata=KEEP)
    open_run: list[Any] | None = field(default=None, metadata=KEEP)
    # The transcripts of the lines (names and sizes), for the ledger stage's loss check.
    transcripts: TranscriptDigest = field(default_factory=TranscriptDigest, metadata=KEEP)

    def observe(self, line: dict[str, Any]) -> None:
        super().observe(line)
        self._add_run(line["parent_rollout_id"], 1)
        self.transcripts.add(line)

    def merge(self, other: BackfillStats) -> None:
        super().merge(other)
        if isinstance(other, WorkerLinesTally):
            for parent, count in other.parents:
                self._add_run(parent, count)
            if other.open_run is not None:
                self._add_run(*other.open_run)
            self.transcripts.merge(other.transcripts)

    def _add_run(self, parent: str, count: int) -> None:
        if self.open_run is not None and self.open_run[0] == parent:
            self.open_run[1] += count
            return
        if self.open_run is not None:
            self.parents.append(self.open_run)
        self.open_run = [parent, count]

    def runs(self) -> list[list[Any]]:
        """Every run in order, the last one closed: the summary's `parents`, once counting is done."""
        if self.open_run is not None:
            self.parents.append(self.open_run)
            self.open_run = None
        return self.parents

    def counters(self) -> BackfillStats:
        own = ("parents", "open_run", "transcripts")
        return BackfillStats(**{name: value for name, value in vars(self).items() if name not in own})


def _progress_by_candidate(units: list[RowsUnit], log: ProgressLog | None) -> Callable[[RowsUnit], None]:
    """on_unit_done for write_units: logs each candidate once its last unit is written."""
    left: dict[str, int] = {}
    for unit in units:
        left[unit.candidate] = left.get(unit.candidate, 0) + unit.rows

    def unit_done(unit: RowsUnit) -> None:
        left[unit.candidate] -= unit.rows
        if left[unit.candidate] == 0 and log is not None:
            log(f"worker_sessions: candidate {unit.candidate} done")

    return unit_done


def write_worker_sessions(
    outputs: RoundOutputs,
    opencode_db: str | os.PathLike[str],
    captured_at: str,
    log: ProgressLog | None = None,
    workers: int | None = None,
) -> BackfillStats:
    """Worker lines of every cell, joined from the opencode store, in ledger order, on every core."""
    cells = identity_of(outputs.campaign_cells, "campaign_cells")
    units = row_units(outputs.campaign_cells, CELLS_PER_UNIT)
    with StorePerProcess.probe(opencode_db) as stores, LedgerWriter(outputs.worker_sessions) as writer:
        producer = _WorkerSessionsProducer(outputs.campaign_cells, stores, _stored_context(outputs, captured_at))
        tally = write_units(
            writer,
            units,
            producer,
            workers=workers or default_workers(),
            on_unit_done=_progress_by_candidate(units, log),
            new_tally=WorkerLinesTally,
        )
    tally.opencode_db_available = stores.available
    stats = tally.counters()
    # Encoded piece by piece: the runs are read from their file as they are written.
    write_json_streaming(
        outputs.worker_sessions_summary,
        {
            "opencodeDb": os.path.abspath(opencode_db),
            "opencodeDbAvailable": stores.available,
            # What the ledger stage needs to copy the lines without parsing them: the file
            # they belong to (size), their counters and their order.
            "bytes": outputs.worker_sessions.stat().st_size,
            "counters": dataclasses.asdict(stats),
            "parents": tally.runs(),
            "transcripts": tally.transcripts.to_json(),
        },
    )
    write_record(
        outputs,
        "worker_sessions",
        {
            "cells": cells,
            "workerLines": file_identity(outputs.worker_sessions),
            "summary": file_identity(outputs.worker_sessions_summary),
            "opencodeDb": os.path.abspath(opencode_db),
        },
    )
    return stats
