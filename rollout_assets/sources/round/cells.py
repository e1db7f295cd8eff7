"""The campaign cells (`<campaign>/<cell>/cached-result.json`, docs/input-formats.md §1): one
cell read into a CellRecord, a campaign's cells kept compactly and read again when reached
(CampaignCells), which folders of a campaign are cells, and the per-cell rows of the manifest."""

from __future__ import annotations

import errno
import os
import stat
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from rollout_assets.io import NotJson, integer_or_none, is_number, is_record, parse_json, read_regular_file
from rollout_assets.sources.round.errors import RoundInputError
from rollout_assets.sources.round.layout import discover_campaigns, is_folder, resolve_out_dir, sorted_names
from rollout_assets.sources.round.packed import PackedStrings
from rollout_assets.sources.round.run_dirs import contained_run_dir_files, round_of_cell


CELL_CACHE = "cached-result.json"


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


def key_check(scenario_id: str, rep: int) -> int:
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
        if key_check(cell.scenario_id, cell.rep) != self._key_checks[index]:
            raise RoundInputError(f"{path}: cell cache changed while the round was being read")
        return cell

    def __iter__(self) -> Iterator[CellRecord]:
        for index in range(len(self)):
            yield self[index]

    def cell_path(self, index: int) -> Path:
        """The `cached-result.json` of a cell, without reading it."""
        return self.directory / self._names[index] / CELL_CACHE

    def names_and_checks(self) -> Iterator[tuple[str, int]]:
        """Each cell's directory name and key check, in order, without reading any."""
        return zip(self._names, self._key_checks, strict=True)

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


def cell_names(campaign_dir: Path) -> list[str]:
    # Plain string paths: at tens of thousands of cells, building two Path objects per cell
    # cost three times the stat calls themselves.
    folder = str(campaign_dir)
    return [name for name in sorted_names(campaign_dir) if _holds_a_cell_cache(os.path.join(folder, name))]


def _holds_a_cell_cache(entry: str) -> bool:
    """Whether a campaign entry is a cell: a folder holding a regular `cached-result.json`.

    A sub-directory without one is skipped (docs/input-formats.md §1), and so is a plain file
    or a symlink loop among the entries. But an entry the process may not search is not known
    to lack one, and a `cached-result.json` that is there but no file (a folder, a FIFO, a
    symlink to nothing or a loop) is a cell whose cache cannot be read: skipping either would
    drop a cell without a trace, so the round stops naming it.
    """
    cache = os.path.join(entry, CELL_CACHE)
    try:
        mode = os.stat(cache).st_mode
    except OSError as error:
        if not isinstance(error, (FileNotFoundError, NotADirectoryError)) and error.errno != errno.ELOOP:
            raise RoundInputError(
                f"{entry}: cannot tell whether it holds a {CELL_CACHE} ({error.strerror or error})"
            ) from error
        if not os.path.lexists(cache) or not is_folder(entry):
            return False  # no cache yet (an arm still running), or an entry that is no folder
        why = "a symlink loop" if error.errno == errno.ELOOP else "a symlink to nothing"
        raise RoundInputError(f"{cache}: cannot read cell cache ({why})") from error
    if not stat.S_ISREG(mode):
        kind = "it is a folder" if stat.S_ISDIR(mode) else "it is not a regular file"
        raise RoundInputError(f"{cache}: cannot read cell cache ({kind})")
    return True


def campaign_cell_names(out_dir: str | os.PathLike[str]) -> Iterator[tuple[Path, list[str]]]:
    """Each campaign folder of the round, as the manifest finds them, with the names of its
    cell folders (in name order), found by listing the campaign folders only (no file is read)."""
    for _, _, campaign_dir in discover_campaigns(resolve_out_dir(out_dir)):
        yield campaign_dir, cell_names(campaign_dir)


def per_instance_row(cell: CellRecord) -> dict[str, Any]:
    return {
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "resolved": cell.resolved_value,
        "error": cell.error if isinstance(cell.error, str) else None,
        "cellPath": str(cell.path),
    }


def cell_artifact_paths(cell: CellRecord) -> list[str]:
    paths: list[str] = []
    for path in contained_run_dir_files(cell.run_dir, ("result.json", "judge.json"), round_of_cell(cell.path)):
        if path is not None and os.path.isfile(path):
            paths.append(path)
    # An absolute patchPath only, as for runDir: a relative one would be looked up in the
    # folder the backfill runs in.
    if cell.patch_path is not None and os.path.isabs(cell.patch_path) and os.path.isfile(cell.patch_path):
        paths.append(cell.patch_path)
    return paths
