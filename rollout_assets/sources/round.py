"""The round reader: one outDir's own files, joined into a manifest.

Owns: campaign discovery (`improve-run/baseline`, `improve-run/gen-<g>/candidate-<i>`), the
campaign cells (`cached-result.json`), the supervisor's `result.json`, the cost-ledger
receipts and the proposer shot receipts (inputs.md §1-3). Does not own: the harness stores
(opencode, Claude Code) or the ledger lines built from all of this.

Corrupt evidence stops the round (`RoundInputError`, naming the file and the problem);
missing optional files are returned as `None` for the join to turn into gap lines.
Nothing here writes anywhere.
"""

from __future__ import annotations

from rollout_assets.errors import RoundError
import errno
import itertools
import os
import re
import stat
import zlib
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, overload

from rollout_assets.io import (
    NotJson,
    finite_or_none,
    integer_or_none,
    is_number,
    is_record,
    open_regular_file,
    parse_json,
    read_json_or_none,
    read_regular_file,
)

BASELINE_GENERATION = -1
BASELINE_CANDIDATE_INDEX = -1

# As the seed's JavaScript patterns: ASCII digits only (re.ASCII), and the name must end at
# the end (`\Z`; Python's `$` would also match before a trailing newline).
_GENERATION_DIR = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CANDIDATE_DIR = re.compile(r"^candidate-(\d+)\Z", re.ASCII)
_SHOT_RECEIPT_NAME = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)


class RoundInputError(RoundError, ValueError):
    """A round's evidence is corrupt: the message names the file and what is wrong with it."""


def candidate_id(generation: int, candidate_index: int) -> str:
    """`baseline` for generation -1 / candidate -1, else `gen<g>-cand<i>`."""
    if generation == BASELINE_GENERATION and candidate_index == BASELINE_CANDIDATE_INDEX:
        return "baseline"
    return f"gen{generation}-cand{candidate_index}"


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------


CELL_CACHE = "cached-result.json"

# The numbers of a cell the manifest sums per campaign (inputs.md §2, `cost`).
_COST_FIELDS = ("costUsd", "tokenInput", "tokenOutput", "spentUsd", "spentTokens", "wallS", "judgeWallS")


@dataclass(frozen=True, slots=True)
class CellRecord:
    """One campaign cell (instance x rep x candidate): what the manifest needs of it.

    The manifest keeps none of these (see CampaignCells): each is made when its cell is
    reached, with the file as parsed then in `parsed`, so a line is built from one read.
    """

    path: Path
    scenario_id: str
    rep: int
    has_artifact: bool
    run_dir: str | None
    commit: str | None
    # artifact.resolved verbatim (None without an artifact); `resolved` is the boolean test.
    resolved_value: Any
    error: Any
    cached: bool
    patch_path: str | None
    costs: tuple[Any, ...]
    # The whole cell cache as parsed with this record; None when it was not kept.
    parsed: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def resolved(self) -> bool:
        """Resolved beyond doubt: an artifact that says so, and no error beside it. A cell
        with an error is an inconclusive replicate, as the line's `is_completed` says too."""
        return self.has_artifact and self.error is None and self.resolved_value is True

    @property
    def conclusive(self) -> bool:
        """A replicate with a verdict: an artifact whose `resolved` is a boolean, and no error."""
        return self.has_artifact and self.error is None and isinstance(self.resolved_value, bool)

    @property
    def record(self) -> dict[str, Any]:
        """The cell cache verbatim: as parsed with this record, else read again from disk (and
        refused if the file changed into another cell meanwhile)."""
        if self.parsed is not None:
            return self.parsed
        record = _read_cell_record(self.path)
        if (record["scenarioId"], integer_or_none(record["rep"])) != (self.scenario_id, self.rep):
            raise RoundInputError(f"{self.path}: cell cache changed while the round was being read")
        return record


def artifact_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """The cell's artifact, normalized to record-or-None, so `artifact is not None` guards
    cannot be handed a string or list that passes them."""
    artifact = record.get("artifact")
    return artifact if is_record(artifact) else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _read_cell_record(path: Path) -> dict[str, Any]:
    """Parse one `cached-result.json`; fail loud when it cannot be a campaign cell."""
    try:
        raw = read_regular_file(path)
    except OSError as error:
        raise RoundInputError(f"{path}: cannot read cell cache ({error.strerror or error})") from error
    try:
        record = parse_json(raw)
    except NotJson as error:
        raise RoundInputError(f"{path}: cell cache is not valid JSON ({error})") from error
    if not is_record(record):
        raise RoundInputError(f"{path}: cell cache is not a JSON object")
    if not isinstance(record.get("scenarioId"), str):
        raise RoundInputError(f"{path}: cell cache has no string scenarioId")
    rep_value = record.get("rep")
    if not is_number(rep_value):
        raise RoundInputError(f"{path}: cell cache has no numeric rep")
    if integer_or_none(rep_value) is None:
        raise RoundInputError(f"{path}: cell cache rep {rep_value!r} is not a whole number")
    return record


def read_cell(path: Path, *, keep_parsed: bool = False) -> CellRecord:
    """Read one `cached-result.json` into a CellRecord; fail loud when it cannot be a campaign cell."""
    record = _read_cell_record(path)
    artifact = artifact_of(record)
    artifact_or_empty = artifact or {}
    token_usage = record.get("tokenUsage") if is_record(record.get("tokenUsage")) else {}
    return CellRecord(
        path=path,
        scenario_id=record["scenarioId"],
        rep=integer_or_none(record["rep"]),  # type: ignore[arg-type]
        has_artifact=artifact is not None,
        run_dir=_string(artifact_or_empty.get("runDir")),
        commit=_string(artifact_or_empty.get("commit")),
        resolved_value=artifact_or_empty.get("resolved"),
        error=record.get("error"),
        cached=record.get("cached") is True,
        patch_path=_string(artifact_or_empty.get("patchPath")),
        costs=(
            record.get("costUsd"),
            token_usage.get("input"),
            token_usage.get("output"),
            artifact_or_empty.get("spentUsd"),
            artifact_or_empty.get("spentTokens"),
            artifact_or_empty.get("wallS"),
            artifact_or_empty.get("judgeWallS"),
        ),
        parsed=record if keep_parsed else None,
    )


class PackedStrings(Sequence[str]):
    """A list of strings kept as one buffer of their UTF-8 bytes and an array of end offsets.

    A round lists one cell name and one settled call per cell: as str objects (~80 bytes
    each) the manifest grew with the round, and every forked worker that touched a page of
    them copied it. Packed, each costs its bytes plus an 8-byte offset, in two objects.
    """

    __slots__ = ("_data", "_ends")

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._data = bytearray()
        self._ends = array("Q")
        for string in strings:
            self.append(string)

    def append(self, string: str) -> None:
        # surrogatepass: file names and JSON strings may hold lone surrogates.
        self._data += string.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._data))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> PackedStrings: ...

    def __getitem__(self, index: int | slice) -> str | PackedStrings:
        if isinstance(index, slice):
            return PackedStrings(self[i] for i in range(*index.indices(len(self))))
        index = range(len(self))[index]  # negative indexes; IndexError past the end
        start = self._ends[index - 1] if index else 0
        return self._data[start : self._ends[index]].decode("utf-8", "surrogatepass")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedStrings):
            return (self._data, self._ends) == (other._data, other._ends)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedStrings({list(self)!r})"


def _key_check(scenario_id: str, rep: int) -> int:
    """A 32-bit checksum of a cell's (scenarioId, rep): enough to notice a file that became another cell."""
    return zlib.crc32(f"{rep}\0{scenario_id}".encode("utf-8", "surrogatepass"))


class CampaignCells(Sequence[CellRecord]):
    """The cells of one campaign in (scenarioId, rep) order, each read from disk when reached.

    Kept per cell: its directory name and a checksum of its (scenarioId, rep), in flat
    buffers (about 45 bytes a cell); a CellRecord per cell made the manifest grow by about
    1.7 KB a cell. A cell whose file changed into another cell since the manifest was read
    is refused, as `CellRecord.record` does.
    """

    __slots__ = ("_key_checks", "_names", "directory")

    def __init__(self, directory: Path, names: PackedStrings, key_checks: array) -> None:
        self.directory, self._names, self._key_checks = directory, names, key_checks

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> CellRecord: ...

    @overload
    def __getitem__(self, index: slice) -> CampaignCells: ...

    def __getitem__(self, index: int | slice) -> CellRecord | CampaignCells:
        if isinstance(index, slice):
            return CampaignCells(self.directory, self._names[index], self._key_checks[index])
        index = range(len(self))[index]
        path = self.cell_path(index)
        cell = read_cell(path, keep_parsed=True)
        if _key_check(cell.scenario_id, cell.rep) != self._key_checks[index]:
            raise RoundInputError(f"{path}: cell cache changed while the round was being read")
        return cell

    def __iter__(self) -> Iterator[CellRecord]:
        for index in range(len(self)):
            yield self[index]

    def cell_path(self, index: int) -> Path:
        """The `cached-result.json` of a cell, without reading it."""
        return self.directory / self._names[index] / CELL_CACHE

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CampaignCells):
            return (self.directory, self._names, self._key_checks) == (
                other.directory,
                other._names,
                other._key_checks,
            )
        if isinstance(other, list):  # as the list of its records (reads every cell)
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CampaignCells({str(self.directory)!r}, {len(self)} cells)"


class _CampaignTally:
    """A campaign's cells as the manifest sums them, added one at a time in (scenarioId, rep) order.

    Everything but the packed names and checks is of fixed size, whatever the campaign's size
    (`instances` holds one id per instance, which the manifest lists).
    """

    def __init__(self, *, collect_commits: bool, keep_rows: bool = False) -> None:
        self.names = PackedStrings()
        # The manifest's per-cell lists, only when asked for (the manifest stage writes them).
        self.rows: list[dict[str, Any]] | None = [] if keep_rows else None
        self.artifact_paths: list[str] | None = [] if keep_rows else None
        self.key_checks = array("I")
        self.cached = 0
        self.max_rep = -1
        self.first_commit: str | None = None
        # Distinct commits, only where more than one is an error (a candidate's cells).
        self.commits: set[str] | None = set() if collect_commits else None
        self.cost_sums: list[int | float] = [0] * len(_COST_FIELDS)
        self.instances: list[str] = []  # distinct scenarioIds, in order, so sorted
        # The instance being added (the last of `instances`): its cells, and whether all resolved.
        self._instance_cells = 0
        self._instance_resolved = True
        # Instances whose every cell resolved, with their number of cells.
        self._resolved_instance_cells: dict[str, int] = {}
        # Instances with at least one conclusive replicate (a verdict, resolved or not).
        self._judged_instances: set[str] = set()

    def add(self, name: str, cell: CellRecord) -> None:
        self.names.append(name)
        if self.rows is not None and self.artifact_paths is not None:
            self.rows.append(_per_instance_row(cell))
            self.artifact_paths += _artifact_paths(cell)
        self.key_checks.append(_key_check(cell.scenario_id, cell.rep))
        if not self.instances or self.instances[-1] != cell.scenario_id:
            self._close_instance()
            self.instances.append(cell.scenario_id)
        self._instance_cells += 1
        self._instance_resolved = self._instance_resolved and cell.resolved
        if cell.conclusive:
            self._judged_instances.add(cell.scenario_id)
        self.cached += cell.cached
        self.max_rep = max(self.max_rep, cell.rep)
        if cell.commit is not None:
            if self.first_commit is None:
                self.first_commit = cell.commit
            if self.commits is not None:
                self.commits.add(cell.commit)
        # In cell order, one addition at a time: the same float sums as summing the list.
        for index, value in enumerate(cell.costs):
            if is_number(value):
                self.cost_sums[index] = self.cost_sums[index] + value

    def _close_instance(self) -> None:
        cells = self._instance_cells
        if cells and self._instance_resolved:
            self._resolved_instance_cells[self.instances[-1]] = cells
        self._instance_cells, self._instance_resolved = 0, True

    def resolved_count(self, reps: int, instances: Collection[str]) -> int:
        """Of the round's `instances` (the baseline's), those whose every one of `reps`
        replicates resolved here (an errored cell is never resolved). An instance the baseline
        did not run is not counted: the count is the numerator of a fraction of `instances`."""
        self._close_instance()
        return sum(
            1
            for instance, cells in self._resolved_instance_cells.items()
            if cells == reps and instance in instances
        )

    def judged_count(self, instances: Collection[str]) -> int:
        """Of the round's `instances`, those with at least one conclusive replicate here. With
        none, the campaign has no verdict at all: its resolvedCount of 0 is no evidence."""
        return len(self._judged_instances.intersection(instances))

    def commit(self, campaign_dir: Path) -> str | None:
        if self.commits is not None and len(self.commits) > 1:
            commits = ", ".join(sorted(self.commits))
            raise RoundInputError(f"{campaign_dir}: candidate cells name more than one commit: {commits}")
        # The baseline takes its first cell's commit, in (scenarioId, rep) order, so the
        # answer does not depend on the order the file system lists directories in.
        return self.first_commit

    def cost_json(self) -> dict[str, Any]:
        """The manifest's `cost` of the campaign, but for its settled calls."""
        totals = dict(zip(_COST_FIELDS, map(finite_or_none, self.cost_sums), strict=True))
        return {
            "costUsd": totals["costUsd"],
            "tokenUsage": {"input": totals["tokenInput"], "output": totals["tokenOutput"]},
            "spentUsd": totals["spentUsd"],
            "spentTokens": totals["spentTokens"],
            "wallS": totals["wallS"],
            "judgeWallS": totals["judgeWallS"],
        }


def _number_in_name(digits: str, path: Path) -> int:
    """A generation, candidate or shot number read from a folder or file name. Beyond 64 bits
    it would not read back as the integer the line says (see integer_or_none)."""
    number = integer_or_none(int(digits))
    if number is None:
        raise RoundInputError(f"{path}: the number {digits} in its name is too large (more than 64 bits)")
    return number


def _sorted_names(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries)
    except OSError as error:
        raise RoundInputError(f"{directory}: cannot list directory ({error.strerror or error})") from error


def _sub_directories(directory: Path) -> list[Path]:
    return [directory / name for name in _sorted_names(directory)]


def _cell_names(campaign_dir: Path) -> list[str]:
    # Plain string paths: at tens of thousands of cells, building two Path objects per cell
    # cost three times the stat calls themselves.
    folder = str(campaign_dir)
    return [name for name in _sorted_names(campaign_dir) if _holds_a_cell_cache(os.path.join(folder, name))]


def _holds_a_cell_cache(entry: str) -> bool:
    """Whether a campaign entry is a cell: a folder holding a regular `cached-result.json`.

    A sub-directory without one is skipped (inputs.md), and so is a plain file or a symlink
    loop among the entries. But an entry the process may not search is not known to lack one,
    and a `cached-result.json` that is there but no file (a folder, a FIFO, a symlink to
    nothing or a loop) is a cell whose cache cannot be read: skipping either would drop a cell
    without a trace, so the round stops naming it.
    """
    cache = os.path.join(entry, CELL_CACHE)
    try:
        mode = os.stat(cache).st_mode
    except OSError as error:
        if not isinstance(error, (FileNotFoundError, NotADirectoryError)) and error.errno != errno.ELOOP:
            raise RoundInputError(
                f"{entry}: cannot tell whether it holds a {CELL_CACHE} ({error.strerror or error})"
            ) from error
        if not os.path.lexists(cache) or not _is_folder(entry):
            return False  # no cache yet (an arm still running), or an entry that is no folder
        why = "a symlink loop" if error.errno == errno.ELOOP else "a symlink to nothing"
        raise RoundInputError(f"{cache}: cannot read cell cache ({why})") from error
    if not stat.S_ISREG(mode):
        kind = "it is a folder" if stat.S_ISDIR(mode) else "it is not a regular file"
        raise RoundInputError(f"{cache}: cannot read cell cache ({kind})")
    return True


def _is_folder(path: str | Path) -> bool:
    """Whether `path` is a folder (following links); a path the process may not look at stops the round."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:
            return False
        raise RoundInputError(f"{path}: cannot tell whether it is a folder ({error.strerror or error})") from error


def _read_campaign(
    campaign_dir: Path, *, is_baseline: bool, keep_rows: bool = False
) -> tuple[CampaignCells, _CampaignTally]:
    """Every cell of one campaign directory, sorted by (scenarioId, rep) in code-point order,
    and their tally; each cell file is read once, and none is kept.

    Cell directories are usually named so that their order is the cells' order; a campaign
    whose names are not (or that holds a duplicate) is read again and sorted in memory.
    """
    tally = _CampaignTally(collect_commits=not is_baseline, keep_rows=keep_rows)
    names = _cell_names(campaign_dir)
    previous: tuple[str, int] | None = None
    for name in names:
        cell = read_cell(campaign_dir / name / CELL_CACHE)
        key = (cell.scenario_id, cell.rep)
        if previous is not None and key <= previous:
            return _read_campaign_sorting(campaign_dir, names, is_baseline=is_baseline, keep_rows=keep_rows)
        previous = key
        tally.add(name, cell)
    return CampaignCells(campaign_dir, tally.names, tally.key_checks), tally


def _read_campaign_sorting(
    campaign_dir: Path, names: list[str], *, is_baseline: bool, keep_rows: bool
) -> tuple[CampaignCells, _CampaignTally]:
    """`_read_campaign` for names out of cell order: holds the campaign's records while sorting them."""
    named = [(name, read_cell(campaign_dir / name / CELL_CACHE)) for name in names]
    named.sort(key=lambda item: (item[1].scenario_id, item[1].rep, str(item[1].path)))
    for (_, previous), (_, cell) in itertools.pairwise(named):
        if (previous.scenario_id, previous.rep) == (cell.scenario_id, cell.rep):
            raise RoundInputError(
                f"{cell.path}: duplicates cell {cell.scenario_id} rep {cell.rep} of {previous.path}"
            )
    tally = _CampaignTally(collect_commits=not is_baseline, keep_rows=keep_rows)
    for name, cell in named:
        tally.add(name, cell)
    return CampaignCells(campaign_dir, tally.names, tally.key_checks), tally


# ---------------------------------------------------------------------------
# Campaigns and the manifest
# ---------------------------------------------------------------------------


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
        return [path for cell in self.cells for path in _artifact_paths(cell)]

    def to_json(self) -> dict[str, Any]:
        # One pass over the cells (each file read once) for both per-cell lists.
        per_instance: list[dict[str, Any]] = []
        artifact_paths: list[str] = []
        if self.stored_per_instance is not None and self.stored_artifact_paths is not None:
            per_instance, artifact_paths = self.stored_per_instance, self.stored_artifact_paths
        else:
            for cell in self.cells:
                per_instance.append(_per_instance_row(cell))
                artifact_paths += _artifact_paths(cell)
        if self.stored_artifact_paths is not None:
            artifact_paths = self.stored_artifact_paths
        return {
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
            "cost": self.cost,
            "artifactPaths": artifact_paths,
        }


def _per_instance_row(cell: CellRecord) -> dict[str, Any]:
    return {
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "resolved": cell.resolved_value,
        "error": cell.error if isinstance(cell.error, str) else None,
        "cellPath": str(cell.path),
    }


def _artifact_paths(cell: CellRecord) -> list[str]:
    paths: list[str] = []
    for name in ("result.json", "judge.json"):
        path = run_dir_file(cell.run_dir, name)
        if path is not None and os.path.isfile(path):
            paths.append(path)
    # An absolute patchPath only, as for runDir: a relative one would be looked up in the
    # folder the backfill runs in.
    if cell.patch_path is not None and os.path.isabs(cell.patch_path) and os.path.isfile(cell.patch_path):
        paths.append(cell.patch_path)
    return paths


@dataclass
class RoundManifest:
    """The join of one round's own files (inputs.md §2)."""

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

    def to_json(self) -> dict[str, Any]:
        return {
            "outDir": str(self.out_dir),
            "runId": self.run_id,
            "provenance": self.provenance,
            "instances": self.instances,
            "generations": _generations_json(self.entries),
            "costLedger": {
                "lines": self.cost_ledger_lines,
                "skipped": self.cost_ledger_skipped,
                "settledCalls": self.settled_call_ids,
            },
        }


def _cells_from_rows(campaign_dir: Path, rows: list[dict[str, Any]]) -> CampaignCells:
    """A campaign's cells as its stored per-instance rows list them, without reading any."""
    names, checks = PackedStrings(), array("I")
    for row in rows:
        path = Path(row["cellPath"])
        if path.parent.parent != campaign_dir or path.name != CELL_CACHE:
            raise RoundInputError(f"{path}: stored manifest lists a cell outside its campaign {campaign_dir}")
        names.append(path.parent.name)
        checks.append(_key_check(row["scenarioId"], row["rep"]))
    return CampaignCells(campaign_dir, names, checks)


def manifest_from_json(data: dict[str, Any], *, with_cells: bool = False) -> RoundManifest:
    """A manifest back from its `to_json()` form.

    Without `with_cells`, `cells` is empty: enough for every line that does not read cells
    (proposer lines, line context). With it, each campaign's cells are those its rows list,
    read from disk when iterated (and refused if a file became another cell). Either way a
    later stage works from the same snapshot as the manifest stage.
    """
    entries = []
    for generation in data["generations"]:
        for rollout in generation["rollouts"]:
            state, action, outcome = rollout["state"], rollout["action"], rollout["outcome"]
            cost_sums = {key: value for key, value in rollout["cost"].items() if key != "settledCallIds"}
            campaign_dir = Path(state["campaignDir"])
            entries.append(
                CampaignEntry(
                    generation=state["generation"],
                    candidate_index=state["candidateIndex"],
                    campaign_dir=campaign_dir,
                    cells=_cells_from_rows(campaign_dir, outcome["perInstance"]) if with_cells else [],
                    commit=state["commit"],
                    diff_path=action["diffPath"],
                    shot_receipt_paths=list(action["shotReceiptPaths"]),
                    reps=outcome["reps"],
                    resolved_count=outcome["resolvedCount"],
                    judged_count=outcome["judgedCount"],
                    cells_cached=outcome["cellsCached"],
                    cost_sums=cost_sums,
                    settled_calls=list(rollout["cost"].get("settledCallIds", [])),
                    stored_artifact_paths=list(rollout["artifactPaths"]),
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


def _generations_json(entries: list[CampaignEntry]) -> list[dict[str, Any]]:
    generations: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        generations.setdefault(entry.generation, []).append(entry.to_json())
    return [{"generation": g, "rollouts": rollouts} for g, rollouts in generations.items()]


def resolve_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """The outDir as an absolute path (not its real path: symlinked rounds keep their name)."""
    return Path(os.path.abspath(os.fspath(out_dir)))


def discover_campaigns(out_dir: Path) -> list[tuple[int, int, Path]]:
    """(generation, candidate index, campaign dir) of the baseline and every candidate, in order."""
    improve_run = out_dir / "improve-run"
    campaigns: list[tuple[int, int, Path]] = []
    if _is_folder(improve_run / "baseline"):
        campaigns.append((BASELINE_GENERATION, BASELINE_CANDIDATE_INDEX, improve_run / "baseline"))
    if not _is_folder(improve_run):
        return campaigns
    candidates: list[tuple[int, int, Path]] = []
    for generation_dir in _sub_directories(improve_run):
        generation_match = _GENERATION_DIR.match(generation_dir.name)
        if generation_match is None or not _is_folder(generation_dir):
            continue
        for candidate_dir in _sub_directories(generation_dir):
            candidate_match = _CANDIDATE_DIR.match(candidate_dir.name)
            if candidate_match is None or not _is_folder(candidate_dir):
                continue
            candidates.append(
                (
                    _number_in_name(generation_match[1], generation_dir),
                    _number_in_name(candidate_match[1], candidate_dir),
                    candidate_dir,
                )
            )
    candidates.sort(key=lambda c: (c[0], c[1], c[2].name))
    # `gen-1` and `gen-01` name the same generation: two campaigns of one candidate would give
    # their lines the same rollout ids, and a shot could not say which one it proposed.
    for (generation, index, first), (next_generation, next_index, second) in itertools.pairwise(candidates):
        if (generation, index) == (next_generation, next_index):
            raise RoundInputError(
                f"{first} and {second}: two campaign directories of generation {generation}, candidate {index}"
            )
    return campaigns + candidates


@dataclass
class CostLedger:
    """Settled cost-ledger receipts of a round, grouped by the campaign dir they were tagged with."""

    settled_by_run_dir: dict[str, PackedStrings] = field(default_factory=dict)
    lines: int = 0
    skipped: int = 0

    def settled_calls_for(self, campaign_dir: Path) -> PackedStrings:
        keys = {str(campaign_dir), os.path.realpath(campaign_dir)}
        found = [self.settled_by_run_dir[key] for key in sorted(keys) if key in self.settled_by_run_dir]
        if len(found) == 1:
            return found[0]
        return PackedStrings(call for calls in found for call in calls)


def _open_if_there(path: Path, what: str) -> BinaryIO | None:
    """An optional file of the round, open; None when there is none. One that is there but
    cannot be read (a FIFO, a folder, no permission) stops the round: reading it as absent
    would change the lines unseen."""
    try:
        return open_regular_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise RoundInputError(f"{path}: cannot read the {what} ({error.strerror or error})") from error


def read_cost_ledger(out_dir: Path) -> CostLedger:
    """`improve-run/cost-ledger.jsonl`: only settled receipts with a string callId count; garbage is skipped."""
    ledger = CostLedger()
    handle = _open_if_there(out_dir / "improve-run" / "cost-ledger.jsonl", "cost ledger")
    if handle is None:
        return ledger
    with handle:
        for raw_line in handle:
            if not raw_line.strip():
                continue
            ledger.lines += 1
            try:
                entry = parse_json(raw_line)
            except NotJson:
                ledger.skipped += 1
                continue
            record = entry.get("record") if is_record(entry) else None
            if not is_record(record) or record.get("status") != "settled":
                continue
            call_id = record.get("callId")
            tags = record.get("tags")
            run_dir = tags.get("runDir") if is_record(tags) else None
            if isinstance(call_id, str) and isinstance(run_dir, str):
                ledger.settled_by_run_dir.setdefault(run_dir, PackedStrings()).append(call_id)
    return ledger


def read_provenance(out_dir: Path) -> Any:
    """`improve-run/loop-provenance.json`, parsed; None when there is none. One that is there
    but cannot be read or parsed stops the round: its `runId` names every line (inputs.md),
    and reading it as absent would give every rollout id of the round another value unseen."""
    path = out_dir / "improve-run" / "loop-provenance.json"
    handle = _open_if_there(path, "loop provenance")
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
    reading every cell a second time), at about 0.5 KB a cell.
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
        cells, tally = _read_campaign(campaign_dir, is_baseline=is_baseline, keep_rows=keep_rows)
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


def list_cell_paths(out_dir: str | os.PathLike[str]) -> Iterator[str]:
    """The `cached-result.json` of every cell of the round, as the manifest lists them, found by
    listing the campaign folders only (no file is read)."""
    for _, _, campaign_dir in discover_campaigns(resolve_out_dir(out_dir)):
        for name in _cell_names(campaign_dir):
            yield str(campaign_dir / name / CELL_CACHE)


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


# ---------------------------------------------------------------------------
# Supervisor result and proposer shot receipts
# ---------------------------------------------------------------------------


def run_dir_file(run_dir: str | None, name: str) -> str | None:
    """`<runDir>/<name>`, for an absolute runDir only (inputs.md: "absolute path of the arm's run
    directory"). An empty or relative runDir would name a file under whatever folder the
    backfill runs in, so the same round would give another ledger from another folder; its
    files are unknown instead (the cell then says its workers cannot be listed)."""
    if run_dir is None or not os.path.isabs(run_dir):
        return None
    if "\0" in run_dir:  # no file name can hold a NUL
        return None
    try:
        os.fsencode(run_dir)
    except UnicodeEncodeError:  # a lone surrogate: no file name on this system can hold it
        return None
    return os.path.join(run_dir, name)


def read_supervisor_result(run_dir: str | None) -> dict[str, Any] | None:
    """`<runDir>/result.json` as an object, or None when absent, unreadable or not an object."""
    path = run_dir_file(run_dir, "result.json")
    if path is None:
        return None
    result = read_json_or_none(path)
    return result if is_record(result) else None


def read_judge_verdict(run_dir: str | None) -> Any:
    """`<runDir>/judge.json` verbatim, or None when absent or unreadable."""
    path = run_dir_file(run_dir, "judge.json")
    return read_json_or_none(path) if path is not None else None


def reports_unlisted_workers(result: dict[str, Any]) -> bool:
    """True when result.json says workers ran (`spawned` or `workers` above 0) but names no
    worker cwd (no `recoveredSpend.workerCwds` list, an empty one, or one without a string):
    they existed, yet none can be joined."""
    if worker_cwds_of(result):
        return False
    return any(is_number(result.get(key)) and result[key] > 0 for key in ("spawned", "workers"))


def worker_cwds_of(result: dict[str, Any] | None) -> list[str]:
    """Distinct worker cwds in first-occurrence order.

    A respawned worker reuses its clone cwd, so the recovered list can name the same
    directory twice; joining it twice would mint two rollout ids over one opencode
    session (duplicate training signal, inflated worker counts).
    """
    recovered = result.get("recoveredSpend") if result is not None else None
    listed = recovered.get("workerCwds") if is_record(recovered) else None
    if not isinstance(listed, list):
        return []
    return list(dict.fromkeys(cwd for cwd in listed if isinstance(cwd, str)))


@dataclass(frozen=True)
class ShotReceiptFile:
    """A proposer shot receipt's place: `proposer-shots/[<author>/]gen<g>-cand<i>-shot<s>.json`."""

    path: str
    author: str | None
    generation: int
    candidate_index: int
    shot: int

    def relative_path(self, out_dir: Path) -> str:
        return Path(os.path.relpath(self.path, out_dir)).as_posix()

    def worktree_cwd(self, out_dir: Path) -> str:
        """The proposer worktree the arena dispatched this shot into."""
        name = f"gen{self.generation}-cand{self.candidate_index}"
        if self.author is not None:
            name = f"{name}-{self.author}"
        return os.path.join(out_dir, "proposer-wt", name)


def list_shot_receipts(out_dir: Path) -> list[ShotReceiptFile]:
    """Flat and per-author receipts, sorted by path in code-point order; other names are ignored."""
    shot_dir = out_dir / "proposer-shots"
    found: list[ShotReceiptFile] = []

    def collect(name: str, author: str | None, path: str) -> None:
        match = _SHOT_RECEIPT_NAME.match(name)
        if match is not None:
            generation, index, shot = (_number_in_name(match[group], Path(path)) for group in (1, 2, 3))
            found.append(ShotReceiptFile(path, author, generation, index, shot))

    for entry in _scan(shot_dir):
        # Like the seed's readdir(withFileTypes): a symlink is not followed, so a link
        # to a directory (or a symlink loop) is read as a file name, never descended into.
        if _is_real_directory(entry):
            if _SHOT_RECEIPT_NAME.match(entry.name):
                # Read as an author folder (the seed's rule), its shot would vanish.
                raise RoundInputError(f"{entry.path}: a folder named like a shot receipt")
            for name in sorted(e.name for e in _scan(Path(entry.path))):
                collect(name, entry.name, os.path.join(entry.path, name))
        else:
            collect(entry.name, None, entry.path)
    found.sort(key=lambda receipt: receipt.path)
    return found


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of a receipts folder; none when it does not exist. One that exists but cannot
    be listed, or is a file, stops the round (the seed read it as empty, dropping its shots unseen)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except NotADirectoryError as error:  # a file where the folder belongs: its shots are unknown
        raise RoundInputError(f"{directory}: not a folder, so its shot receipts cannot be listed") from error
    except OSError as error:
        raise RoundInputError(f"{directory}: cannot list directory ({error.strerror or error})") from error


def _is_real_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def read_shot_receipt(receipt: ShotReceiptFile) -> dict[str, Any] | None:
    """The `receipt` object of a shot receipt file, or None when missing or malformed."""
    parsed = read_json_or_none(receipt.path)
    inner = parsed.get("receipt") if is_record(parsed) else None
    return inner if is_record(inner) else None
