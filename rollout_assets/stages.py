"""The backfill as stored stages: what each Dagster asset of a round computes and writes.

Owns the on-disk layout of one round's outputs under the ledger root and the functions that
produce each file from the one before. No Dagster here: the asset bodies call these and
attach metadata, and the functions can be run and benchmarked alone.

    <ledger root>/<round>/
      manifest.json                          round_manifest
      stages/campaign-cells.jsonl            campaign_cells: {"supervisor": line, "worker_cwds": [...]}
      stages/worker-sessions.jsonl           worker_sessions: worker lines in ledger order
      stages/worker-sessions.json            worker_sessions: store summary, counters, line order
      stages/proposer-transcripts.jsonl      proposer_transcripts: proposer lines in ledger order
      rollout-ledger.jsonl                   rollout_ledger: the validated tangle.rollout.v1 ledger
      stages/rollout-ledger-stats.json       rollout_ledger: the counters of that file
      stages/built-from/<stage>.json         what each stage was built from (see "Stage records")
      rollout-stats.json                     rollout_stats: the counters (rollout_ledger removes them
                                             before it replaces the ledger)

Every file is written atomically (temp file + rename), so a failed stage leaves the previous
file intact. Stage files are JSON, never pickles, and every stage streams: no stage holds a
round's transcripts in memory.
"""

from __future__ import annotations

from rollout_assets.errors import RoundError
import dataclasses
import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from rollout_assets.backfill import (
    BackfillStats,
    CellRow,
    cell_rows,
    episode_lines,
    line_context,
    proposer_lines,
)
from rollout_assets.backfill.lines import LineContext
from rollout_assets.backfill.losses import LostTranscript, TranscriptDigest, lost_transcripts
from rollout_assets.backfill.parallel import (
    CELLS_PER_UNIT,
    CellUnit,
    StorePerProcess,
    default_workers,
    round_units,
    unit_manifest,
    write_units,
)
from rollout_assets.ledger import AtomicJsonlWriter, LedgerWriter, decode_record, iter_jsonl, validate_line
from rollout_assets.io import to_indented_json
from rollout_assets.sources.round import (
    RoundInputError,
    RoundManifest,
    build_manifest,
    list_cell_paths,
    manifest_from_json,
    round_inputs_fingerprint,
)

ProgressLog = Callable[[str], None]


class RoundChangedError(RoundError, RuntimeError):
    """The round's files changed between two stages of one materialization."""


class StageMismatchError(RoundError, RuntimeError):
    """Two stage files of one round do not fit together (a stage is stale or damaged)."""


class TranscriptLossError(RoundError, RuntimeError):
    """The rebuilt ledger would drop or shorten transcripts the current one holds (see
    backfill/losses.py); `lost` lists them all."""

    def __init__(self, message: str, lost: list[LostTranscript]):
        super().__init__(message)
        self.lost = lost


@dataclass(frozen=True)
class RoundOutputs:
    """Where the outputs of one round live under the ledger root."""

    folder: Path

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"

    @property
    def campaign_cells(self) -> Path:
        return self.folder / "stages" / "campaign-cells.jsonl"

    @property
    def worker_sessions(self) -> Path:
        return self.folder / "stages" / "worker-sessions.jsonl"

    @property
    def worker_sessions_summary(self) -> Path:
        return self.folder / "stages" / "worker-sessions.json"

    @property
    def proposer_transcripts(self) -> Path:
        return self.folder / "stages" / "proposer-transcripts.jsonl"

    @property
    def ledger(self) -> Path:
        return self.folder / "rollout-ledger.jsonl"

    @property
    def ledger_stats(self) -> Path:
        return self.folder / "stages" / "rollout-ledger-stats.json"

    @property
    def stats(self) -> Path:
        return self.folder / "rollout-stats.json"

    def built_from(self, stage: str) -> Path:
        return self.folder / "stages" / "built-from" / f"{stage}.json"


def write_json_atomic(path: Path, value: Any) -> None:
    """One JSON document, replaced atomically like every other output.

    Non-ASCII text is kept, unless the document holds a lone surrogate (a torn escape in an
    input): UTF-8 cannot carry one, so that document is written with ASCII escapes, as a
    ledger line is. The JSON value is the same either way.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    data = to_indented_json(value, allow_nan=False).encode("utf-8")
    try:
        with open(temp, "wb") as handle:
            handle.write(data + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# ---------------------------------------------------------------------------
# Stage records: what each stage was built from
# ---------------------------------------------------------------------------
#
# Stages can be materialized one by one, at different times. A ledger assembled from stages
# that saw different states of the round (a cell cache rewritten between two of them), or
# that were built from another upstream file (round_manifest run again, campaign_cells not),
# or from another store, would mix two moments in one ledger, and the checks, which recount
# ids and rewards, could not tell. So each stage records, beside its output, the fingerprint
# of the round it saw (round_inputs_fingerprint), the files it was built from and wrote (their
# identity: inode, size, mtime) and the store it read; the stages that read the round check
# it has not changed since round_manifest, and the ledger stage checks that every record
# names the files on disk now and one state of the round.


def _identity_of(path: Path, stage: str) -> list[int]:
    try:
        return file_identity(path)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{path} does not exist: materialize {stage} first") from error


def _write_record(outputs: RoundOutputs, stage: str, record: dict[str, Any]) -> None:
    write_json_atomic(outputs.built_from(stage), record)


def _read_record(outputs: RoundOutputs, stage: str) -> dict[str, Any]:
    path = outputs.built_from(stage)
    try:
        record = read_json(path)
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


def _unchanged_round(out_dir: Path, outputs: RoundOutputs) -> dict[str, Any]:
    """The round_manifest record, once the round's files are shown to be those it saw."""
    record = _read_record(outputs, "round_manifest")
    if record.get("manifest") != _identity_of(outputs.manifest, "round_manifest"):
        raise StageMismatchError(
            f"{outputs.manifest} is not the file round_manifest recorded writing: materialize round_manifest again"
        )
    if record.get("inputs") != round_inputs_fingerprint(out_dir):
        raise RoundChangedError(
            f"round {out_dir} changed since its round_manifest was materialized (a cell, receipt, cost ledger, "
            "provenance or candidate patch was added, removed or rewritten): materialize the round again, every "
            "stage from round_manifest on"
        )
    return record


def _check(stage: str, consistent: bool, why: str) -> None:
    if not consistent:
        raise StageMismatchError(f"{stage} is out of date ({why}): materialize it and the stages after it again")


def check_stages_agree(
    outputs: RoundOutputs, opencode_db: str | os.PathLike[str], claude_projects_dir: str | os.PathLike[str]
) -> dict[str, Any]:
    """Raise unless the stage files on disk were built from one state of the round, from each
    other and from the stores configured now (see "Stage records"); return round_manifest's record."""
    manifest = _unchanged_round(Path(_read_record(outputs, "round_manifest").get("outDir", "")), outputs)
    cells = _read_record(outputs, "campaign_cells")
    workers = _read_record(outputs, "worker_sessions")
    proposers = _read_record(outputs, "proposer_transcripts")
    _check("campaign_cells", cells.get("manifest") == manifest["manifest"], "built from another manifest.json")
    _check(
        "campaign_cells",
        cells.get("cells") == _identity_of(outputs.campaign_cells, "campaign_cells"),
        f"{outputs.campaign_cells} is not the file it recorded writing",
    )
    _check("worker_sessions", workers.get("cells") == cells["cells"], "built from another campaign-cells.jsonl")
    _check(
        "worker_sessions",
        workers.get("workerLines") == _identity_of(outputs.worker_sessions, "worker_sessions")
        and workers.get("summary") == _identity_of(outputs.worker_sessions_summary, "worker_sessions"),
        f"{outputs.worker_sessions} or its summary is not the file it recorded writing",
    )
    _check(
        "worker_sessions",
        workers.get("opencodeDb") == os.path.abspath(opencode_db),
        f"read the opencode store {workers.get('opencodeDb')}, and the store configured now is {os.path.abspath(opencode_db)}",
    )
    _check("proposer_transcripts", proposers.get("manifest") == manifest["manifest"], "built from another manifest.json")
    _check(
        "proposer_transcripts",
        proposers.get("proposerLines") == _identity_of(outputs.proposer_transcripts, "proposer_transcripts"),
        f"{outputs.proposer_transcripts} is not the file it recorded writing",
    )
    _check(
        "proposer_transcripts",
        proposers.get("claudeProjects") == os.path.abspath(claude_projects_dir),
        f"read the Claude projects folder {proposers.get('claudeProjects')}, and the folder configured now is "
        f"{os.path.abspath(claude_projects_dir)}",
    )
    return manifest


# ---------------------------------------------------------------------------
# round_manifest
# ---------------------------------------------------------------------------


def write_manifest(out_dir: Path, outputs: RoundOutputs, sensor_fingerprint: str | None = None) -> RoundManifest:
    """Build the manifest (fail loud on corrupt evidence) and store its JSON, with its record.

    `sensor_fingerprint` is the fingerprint the round sensor compares (of every file the
    backfill reads), taken by the caller before this reads anything. It travels with the stage
    records to the ledger's record, so the ledger's stats can say which inputs it was built
    from (write_rollout_stats) even for a run the sensor did not start.
    """
    # Taken before reading: a file changed while the manifest is built shows in the next stage.
    inputs = round_inputs_fingerprint(out_dir)
    manifest = build_manifest(out_dir, keep_rows=True)
    write_json_atomic(outputs.manifest, manifest.to_json())
    record: dict[str, Any] = {"outDir": str(manifest.out_dir), "inputs": inputs, "manifest": file_identity(outputs.manifest)}
    if sensor_fingerprint is not None:
        record["sensorFingerprint"] = sensor_fingerprint
    _write_record(outputs, "round_manifest", record)
    return manifest


def stored_manifest(outputs: RoundOutputs) -> RoundManifest:
    """The manifest snapshot the manifest stage wrote (without cell records)."""
    return _manifest_from_file(outputs, read_json(outputs.manifest))


def _manifest_from_file(outputs: RoundOutputs, stored_json: Any, *, with_cells: bool = False) -> RoundManifest:
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
    stored_json = read_json(outputs.manifest)
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


# ---------------------------------------------------------------------------
# campaign_cells
# ---------------------------------------------------------------------------


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
        self.cells += other.cells
        self.worker_cwds += other.worker_cwds
        self.reward_labeled += other.reward_labeled
        self.cells_without_worker_list += other.cells_without_worker_list
        for candidate, count in other.by_candidate.items():
            self.by_candidate[candidate] = self.by_candidate.get(candidate, 0) + count


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
    _read_record(outputs, "round_manifest")  # one clear sentence when round_manifest never ran
    manifest = current_manifest(out_dir, outputs)  # names the cells added or removed, if any
    built_from = _unchanged_round(out_dir, outputs)  # any other change
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
            writer, units, producer, workers=workers or default_workers(), on_unit_done=unit_done, new_tally=CellsSummary
        )
    _write_record(
        outputs,
        "campaign_cells",
        {"manifest": built_from["manifest"], "cells": file_identity(outputs.campaign_cells)},
    )
    return summary


def read_cell_rows(outputs: RoundOutputs) -> Iterator[CellRow]:
    for record in iter_jsonl(outputs.campaign_cells):
        yield CellRow(supervisor=record["supervisor"], worker_cwds=record["worker_cwds"])


# ---------------------------------------------------------------------------
# worker_sessions
# ---------------------------------------------------------------------------


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


class _WorkerSessionsProducer:
    """Worker lines of one unit of cell rows; each worker process opens its own store connection."""

    def __init__(self, cells_path: Path, stores: StorePerProcess, context: LineContext):
        self.cells_path, self.stores, self.context = cells_path, stores, context

    def __call__(self, unit: RowsUnit) -> Iterator[dict[str, Any]]:
        with open(self.cells_path, "rb") as handle:
            handle.seek(unit.start)
            chunk = handle.read(unit.stop - unit.start)
        rows = [decode_record(raw) for raw in chunk.splitlines()]
        yield from episode_lines(
            (CellRow(row["supervisor"], row["worker_cwds"]) for row in rows),
            self.stores.get(),
            self.context,
            include_supervisors=False,
        )

    def close(self) -> None:
        self.stores.close()


@dataclass
class WorkerLinesTally(BackfillStats):
    """The worker stage's counters, plus the order of its lines: for each run of consecutive
    lines of one cell, [the supervisor's rollout_id, line count]. The ledger stage interleaves
    the lines with their supervisors by it, copying them without parsing them again."""

    parents: list[list[Any]] = field(default_factory=list)
    # The transcripts of the lines (names and sizes), for the ledger stage's loss check.
    transcripts: TranscriptDigest = field(default_factory=TranscriptDigest)

    def observe(self, line: dict[str, Any]) -> None:
        super().observe(line)
        self._add_run(line["parent_rollout_id"], 1)
        self.transcripts.add(line)

    def merge(self, other: BackfillStats) -> None:
        super().merge(other)
        for parent, count in getattr(other, "parents", []):
            self._add_run(parent, count)
        if isinstance(other, WorkerLinesTally):
            self.transcripts.merge(other.transcripts)

    def _add_run(self, parent: str, count: int) -> None:
        if self.parents and self.parents[-1][0] == parent:
            self.parents[-1][1] += count
        else:
            self.parents.append([parent, count])

    def counters(self) -> BackfillStats:
        state = {name: value for name, value in vars(self).items() if name not in ("parents", "transcripts")}
        return BackfillStats(**state)


def write_worker_sessions(
    outputs: RoundOutputs,
    opencode_db: str | os.PathLike[str],
    captured_at: str,
    log: ProgressLog | None = None,
    workers: int | None = None,
) -> BackfillStats:
    """Worker lines of every cell, joined from the opencode store, in ledger order, on every core."""
    cells = _identity_of(outputs.campaign_cells, "campaign_cells")
    stores = StorePerProcess.probe(opencode_db)
    units = row_units(outputs.campaign_cells, CELLS_PER_UNIT)
    left = {}
    for unit in units:
        left[unit.candidate] = left.get(unit.candidate, 0) + unit.rows

    def unit_done(unit: RowsUnit) -> None:
        left[unit.candidate] -= unit.rows
        if left[unit.candidate] == 0 and log is not None:
            log(f"worker_sessions: candidate {unit.candidate} done")

    producer = _WorkerSessionsProducer(outputs.campaign_cells, stores, _stored_context(outputs, captured_at))
    with LedgerWriter(outputs.worker_sessions) as writer:
        tally = write_units(
            writer, units, producer, workers=workers or default_workers(), on_unit_done=unit_done,
            new_tally=WorkerLinesTally,
        )
    tally.opencode_db_available = stores.available
    stats = tally.counters()
    write_json_atomic(
        outputs.worker_sessions_summary,
        {
            "opencodeDb": os.path.abspath(opencode_db),
            "opencodeDbAvailable": stores.available,
            # What the ledger stage needs to copy the lines without parsing them: the file
            # they belong to (size), their counters and their order.
            "bytes": outputs.worker_sessions.stat().st_size,
            "counters": dataclasses.asdict(stats),
            "parents": tally.parents,
            "transcripts": tally.transcripts.to_json(),
        },
    )
    _write_record(
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


# ---------------------------------------------------------------------------
# proposer_transcripts
# ---------------------------------------------------------------------------


def write_proposer_transcripts(
    outputs: RoundOutputs, claude_projects_dir: str | os.PathLike[str], captured_at: str
) -> BackfillStats:
    """Proposer lines of every shot receipt, joined to Claude transcripts, in ledger order."""
    out_dir = Path(_read_record(outputs, "round_manifest").get("outDir", ""))
    if not out_dir.is_dir():
        # Its receipts would list as none: an empty stage, not a round without shots.
        raise RoundInputError(f"{out_dir}: round outDir does not exist or is not a directory")
    built_from = _unchanged_round(out_dir, outputs)
    manifest = stored_manifest(outputs)
    stats = BackfillStats()
    with LedgerWriter(outputs.proposer_transcripts) as writer:
        for line in proposer_lines(manifest, line_context(manifest, captured_at), claude_projects_dir):
            stats.observe(line)
            writer.write(line)
    _write_record(
        outputs,
        "proposer_transcripts",
        {
            "manifest": built_from["manifest"],
            "proposerLines": file_identity(outputs.proposer_transcripts),
            "claudeProjects": os.path.abspath(claude_projects_dir),
        },
    )
    return stats


# ---------------------------------------------------------------------------
# rollout_ledger and rollout_stats
# ---------------------------------------------------------------------------


def _encoded_lines(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """(the line as stored, the line parsed) of a stage file of ledger lines."""
    with open(path, "rb") as handle:
        for raw in handle:
            yield raw, decode_record(raw)


class WorkerLineRuns:
    """The worker stage's file, handed out a run of whole lines at a time, as byte ranges.

    Line ends are searched in blocks read one after the other, so neither the lines nor the
    file become Python objects (nor pages of this process: a memory map of the file would
    count in its resident memory); the ranges are then copied file to file.
    """

    BLOCK = 1 << 20

    def __init__(self, path: Path):
        self.path = path
        self.position = 0  # where the next line starts
        self._block, self._block_start = b"", 0

    def __enter__(self) -> Self:
        self.file = open(self.path, "rb")
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def _line_end(self, at: int) -> int:
        """Offset of the first newline at or after `at`; -1 when the file has none."""
        if not self._block_start <= at <= self._block_start + len(self._block):
            self._block, self._block_start = b"", at
        searched_from = at - self._block_start
        while True:
            found = self._block.find(b"\n", searched_from)
            if found >= 0:
                return self._block_start + found
            # No line end from `at` to the end of the block: read the next one.
            self._block_start += len(self._block)
            self._block, searched_from = os.pread(self.file.fileno(), self.BLOCK, self._block_start), 0
            if not self._block:
                return -1

    def next_lines(self, count: int) -> tuple[int, int]:
        """(start, stop) of the next `count` lines; stop is -1 when the file ends before them."""
        start = stop = self.position
        for _ in range(count):
            end = self._line_end(stop)
            if end < 0:
                return start, -1
            stop = end + 1
        self.position = stop
        return start, stop

    def at_end(self) -> bool:
        return self.position == os.fstat(self.file.fileno()).st_size


def file_identity(path: Path) -> list[int]:
    """Which file is at `path` now: a rewritten ledger has another inode, size or mtime."""
    stat = path.stat()
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns]


def write_rollout_ledger(
    outputs: RoundOutputs, opencode_db: str | os.PathLike[str], claude_projects_dir: str | os.PathLike[str]
) -> BackfillStats:
    """Assemble the round's ledger from the stage files, atomically; returns its counters.

    Every line was validated by the stage that wrote it; here they are merged in ledger
    order (each supervisor, then its workers; then the proposers), worker and proposer lines
    copied as stored, so the file is the same the one-process backfill writes. The worker
    lines are placed by the order their stage recorded, not parsed again: each cell's run of
    them is found by counting line ends, and the kernel copies it. The stage files must agree
    with each other, with the round as it is and with the stores configured now
    (check_stages_agree).
    """
    manifest_record = check_stages_agree(outputs, opencode_db, claude_projects_dir)
    summary = read_json(outputs.worker_sessions_summary)
    if outputs.worker_sessions.stat().st_size != summary["bytes"]:
        raise StageMismatchError(
            f"{outputs.worker_sessions} is not the file {outputs.worker_sessions_summary} describes; "
            "re-materialize worker_sessions"
        )
    stats = BackfillStats(**summary["counters"])
    # None: a worker stage file of an older version (or damaged), whose transcripts are not known.
    transcripts = TranscriptDigest.from_json(summary.get("transcripts"))
    runs = iter(summary["parents"])
    pending = next(runs, None)
    with WorkerLineRuns(outputs.worker_sessions) as workers, AtomicJsonlWriter(outputs.ledger) as writer:
        for row in read_cell_rows(outputs):
            supervisor = row.supervisor
            writer.write(supervisor)
            stats.observe(supervisor)
            if pending is not None and pending[0] == supervisor["rollout_id"]:
                start, stop = workers.next_lines(pending[1])
                if stop < 0:
                    break  # fewer lines than recorded: reported below
                writer.append_range(workers.file, start, stop - start, pending[1])
                pending = next(runs, None)
        if pending is not None or not workers.at_end():
            raise StageMismatchError(
                f"{outputs.worker_sessions}: worker lines of {pending[0] if pending else 'some cell'} follow no "
                f"supervisor of {outputs.campaign_cells} in order; re-materialize worker_sessions"
            )
        for raw, line in _encoded_lines(outputs.proposer_transcripts):
            writer.write_encoded(raw)
            stats.observe(line)
            if transcripts is not None:
                transcripts.add(line)
        # Before the ledger is renamed into place: the stage must not fail after it replaced it.
        counters = dataclasses.asdict(stats)
        _refuse_to_lose_transcripts(outputs, transcripts)
        # The stats describe the ledger beside them. rollout_stats runs only once the new ledger
        # passes its blocking checks, so old stats left here would outlive a ledger that failed
        # them. Removed only now: a stage that fails before this keeps the ledger and its stats.
        outputs.stats.unlink(missing_ok=True)
    # The counters of exactly this file (its identity: inode, size, mtime), for rollout_stats,
    # which runs only once the checks passed and refuses a ledger this record does not name.
    # The new ledger is in place already: failing to write the record must not fail the stage
    # (rollout_stats then asks for the ledger to be materialized again).
    record: dict[str, Any] = {"ledger": file_identity(outputs.ledger), "counters": counters}
    if transcripts is not None:
        record["transcripts"] = transcripts.to_json()
    if isinstance(manifest_record.get("sensorFingerprint"), str):
        record["sensorFingerprint"] = manifest_record["sensorFingerprint"]
    try:
        write_json_atomic(outputs.ledger_stats, record)
    except OSError:
        pass
    return stats


def _refuse_to_lose_transcripts(outputs: RoundOutputs, transcripts: TranscriptDigest | None) -> None:
    """Raise TranscriptLossError when the ledger being written would drop or shorten a
    transcript the round's current ledger holds (see backfill/losses.py); the current ledger
    then stays.

    The current ledger is read only when its recorded digest differs from the new one's, or
    when it has none (a ledger the ledger stage did not write, or written by an older version).
    """
    if not outputs.ledger.exists():
        return
    try:
        recorded = read_json(outputs.ledger_stats)
    except (OSError, ValueError):
        recorded = None
    if (
        transcripts is not None
        and isinstance(recorded, dict)
        and recorded.get("ledger") == file_identity(outputs.ledger)
        and recorded.get("transcripts") == transcripts.to_json()
    ):
        return
    # Supervisor lines hold no transcript.
    new_lines = itertools.chain(iter_jsonl(outputs.worker_sessions), iter_jsonl(outputs.proposer_transcripts))
    lost = lost_transcripts(outputs.ledger, new_lines)
    if lost:
        examples = "; ".join(transcript.describe() for transcript in lost[:3])
        raise TranscriptLossError(
            f"{outputs.ledger}: the rebuilt ledger would drop or shorten {len(lost)} transcript(s) this ledger "
            "holds (gone from the stores or unreadable there, no longer reached from the round's inputs, or "
            f"converted differently by this version), among them {examples}. The ledger is kept as it is. "
            "To replace it anyway, move it aside (it keeps those transcripts) and materialize rollout_ledger again.",
            lost,
        )


def write_rollout_stats(outputs: RoundOutputs) -> tuple[BackfillStats, str | None]:
    """Store the counters the ledger stage counted next to the ledger, refusing a ledger that
    is no longer the file the ledger stage wrote: the checks that let this stage run judged
    that file, not one changed or replaced after it. Returns the counters and the sensor's
    fingerprint of the inputs the ledger was built from, as round_manifest took it (None when
    its run recorded none)."""
    try:
        counted = read_json(outputs.ledger_stats)
    except (OSError, ValueError) as error:
        raise StageMismatchError(
            f"{outputs.ledger_stats} cannot be read ({error}), so {outputs.ledger} cannot be told to be the "
            "ledger rollout_ledger wrote and its checks judged; re-materialize rollout_ledger"
        ) from error
    try:
        identity = file_identity(outputs.ledger)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{outputs.ledger} does not exist; materialize rollout_ledger") from error
    if not isinstance(counted, dict) or counted.get("ledger") != identity:
        raise StageMismatchError(
            f"{outputs.ledger} changed after rollout_ledger wrote it and its checks judged it; "
            "re-materialize rollout_ledger"
        )
    try:
        stats = BackfillStats(**counted["counters"])
    except (KeyError, TypeError) as error:
        raise StageMismatchError(
            f"{outputs.ledger_stats} does not hold the ledger's counters ({error!r}); re-materialize rollout_ledger"
        ) from error
    write_json_atomic(outputs.stats, stats.to_json())
    fingerprint = counted.get("sensorFingerprint")
    return stats, fingerprint if isinstance(fingerprint, str) else None
