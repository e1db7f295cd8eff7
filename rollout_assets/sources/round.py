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

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.sources.jsonfiles import (
    NotJson,
    integer_or_none,
    is_number,
    is_record,
    parse_json,
    read_json_or_none,
)

BASELINE_GENERATION = -1
BASELINE_CANDIDATE_INDEX = -1

# As the seed's JavaScript patterns: ASCII digits only (re.ASCII), and the name must end at
# the end (`\Z`; Python's `$` would also match before a trailing newline).
_GENERATION_DIR = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CANDIDATE_DIR = re.compile(r"^candidate-(\d+)\Z", re.ASCII)
_SHOT_RECEIPT_NAME = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)


class RoundInputError(ValueError):
    """A round's evidence is corrupt: the message names the file and what is wrong with it."""


def candidate_id(generation: int, candidate_index: int) -> str:
    """`baseline` for generation -1 / candidate -1, else `gen<g>-cand<i>`."""
    if generation == BASELINE_GENERATION and candidate_index == BASELINE_CANDIDATE_INDEX:
        return "baseline"
    return f"gen{generation}-cand{candidate_index}"


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------


# The numbers of a cell the manifest sums per campaign (inputs.md §2, `cost`).
_COST_FIELDS = ("costUsd", "tokenInput", "tokenOutput", "spentUsd", "spentTokens", "wallS", "judgeWallS")


@dataclass(frozen=True, slots=True)
class CellRecord:
    """One campaign cell (instance x rep x candidate): what the manifest needs of it.

    The full `cached-result.json` is not kept: a round of tens of thousands of cells would
    hold all of them in memory. `record` reads it again when a line is built (once per cell),
    and refuses a file that changed into another cell meanwhile.
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

    @property
    def resolved(self) -> bool:
        return self.has_artifact and self.resolved_value is True

    @property
    def record(self) -> dict[str, Any]:
        """The cell cache verbatim, read again from disk."""
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
        raw = path.read_bytes()
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


def read_cell(path: Path) -> CellRecord:
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
    )


def _sub_directories(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries)
    except OSError as error:
        raise RoundInputError(f"{directory}: cannot list directory ({error.strerror or error})") from error
    return [directory / name for name in names]


def read_campaign_cells(campaign_dir: Path) -> list[CellRecord]:
    """Every cell of one campaign directory, sorted by (scenarioId, rep) in code-point order."""
    cells: list[CellRecord] = []
    for cell_dir in _sub_directories(campaign_dir):
        cache = cell_dir / "cached-result.json"
        # is_file() is False for anything that is not a readable regular file,
        # including a symlink loop, so such a sub-directory is simply not a cell.
        if cache.is_file():
            cells.append(read_cell(cache))
    cells.sort(key=lambda cell: (cell.scenario_id, cell.rep, str(cell.path)))
    for previous, cell in itertools.pairwise(cells):
        if (previous.scenario_id, previous.rep) == (cell.scenario_id, cell.rep):
            raise RoundInputError(
                f"{cell.path}: duplicates cell {cell.scenario_id} rep {cell.rep} of {previous.path}"
            )
    return cells


# ---------------------------------------------------------------------------
# Campaigns and the manifest
# ---------------------------------------------------------------------------


@dataclass
class CampaignEntry:
    """One manifest entry: the baseline or one `gen-<g>/candidate-<i>` campaign."""

    generation: int
    candidate_index: int
    campaign_dir: Path
    cells: list[CellRecord]
    commit: str | None
    diff_path: str | None
    shot_receipt_paths: list[str]
    reps: int
    resolved_count: int
    cells_cached: int
    cost: dict[str, Any]
    artifact_paths: list[str]

    @property
    def candidate_id(self) -> str:
        return candidate_id(self.generation, self.candidate_index)

    @property
    def is_baseline(self) -> bool:
        return self.generation == BASELINE_GENERATION

    def to_json(self) -> dict[str, Any]:
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
                "perInstance": [_per_instance_row(cell) for cell in self.cells],
                "reps": self.reps,
                "resolvedCount": self.resolved_count,
                "cellsCached": self.cells_cached,
            },
            "cost": self.cost,
            "artifactPaths": self.artifact_paths,
        }


def _per_instance_row(cell: CellRecord) -> dict[str, Any]:
    return {
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "resolved": cell.resolved_value,
        "error": cell.error if isinstance(cell.error, str) else None,
        "cellPath": str(cell.path),
    }


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
        return run_id if isinstance(run_id, str) else str(self.out_dir)

    def entry_for(self, generation: int, candidate_index: int) -> CampaignEntry | None:
        for entry in self.entries:
            if (entry.generation, entry.candidate_index) == (generation, candidate_index):
                return entry
        return None

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


def manifest_from_json(data: dict[str, Any]) -> RoundManifest:
    """A manifest back from its `to_json()` form, without cell records (`cells` is empty).

    Enough for every line that does not read cells (proposer lines, line context): a later
    stage works from the same snapshot as the manifest stage without re-reading the round.
    """
    entries = []
    for generation in data["generations"]:
        for rollout in generation["rollouts"]:
            state, action, outcome = rollout["state"], rollout["action"], rollout["outcome"]
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
                    cells_cached=outcome["cellsCached"],
                    cost=rollout["cost"],
                    artifact_paths=list(rollout["artifactPaths"]),
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
    if (improve_run / "baseline").is_dir():
        campaigns.append((BASELINE_GENERATION, BASELINE_CANDIDATE_INDEX, improve_run / "baseline"))
    if not improve_run.is_dir():
        return campaigns
    candidates: list[tuple[int, int, Path]] = []
    for generation_dir in _sub_directories(improve_run):
        generation_match = _GENERATION_DIR.match(generation_dir.name)
        if generation_match is None or not generation_dir.is_dir():
            continue
        for candidate_dir in _sub_directories(generation_dir):
            candidate_match = _CANDIDATE_DIR.match(candidate_dir.name)
            if candidate_match is None or not candidate_dir.is_dir():
                continue
            candidates.append((int(generation_match[1]), int(candidate_match[1]), candidate_dir))
    candidates.sort(key=lambda c: (c[0], c[1]))
    return campaigns + candidates


def _campaign_commit(generation: int, campaign_dir: Path, cells: list[CellRecord]) -> str | None:
    commits = sorted({cell.commit for cell in cells if cell.commit is not None})
    if generation != BASELINE_GENERATION and len(commits) > 1:
        raise RoundInputError(f"{campaign_dir}: candidate cells name more than one commit: {', '.join(commits)}")
    # The baseline takes its first cell's commit, in (scenarioId, rep) order, so the
    # answer does not depend on the order the file system lists directories in.
    for cell in cells:
        if cell.commit is not None:
            return cell.commit
    return None


def _resolved_count(cells: list[CellRecord], reps: int) -> int:
    """Instances whose every one of `reps` replicates resolved (an errored cell is never resolved)."""
    by_instance: dict[str, list[CellRecord]] = {}
    for cell in cells:
        by_instance.setdefault(cell.scenario_id, []).append(cell)
    return sum(
        1
        for replicates in by_instance.values()
        if len(replicates) == reps and all(cell.resolved for cell in replicates)
    )


def _sum_numbers(values: list[Any]) -> int | float:
    return sum(value for value in values if is_number(value))


def _campaign_cost(cells: list[CellRecord], settled_calls: list[str]) -> dict[str, Any]:
    totals = {name: _sum_numbers([cell.costs[index] for cell in cells]) for index, name in enumerate(_COST_FIELDS)}
    return {
        "costUsd": totals["costUsd"],
        "tokenUsage": {"input": totals["tokenInput"], "output": totals["tokenOutput"]},
        "spentUsd": totals["spentUsd"],
        "spentTokens": totals["spentTokens"],
        "wallS": totals["wallS"],
        "judgeWallS": totals["judgeWallS"],
        "settledCallIds": settled_calls,
    }


def _artifact_paths(cells: list[CellRecord]) -> list[str]:
    paths: list[str] = []
    for cell in cells:
        if cell.run_dir is not None:
            for name in ("result.json", "judge.json"):
                if os.path.isfile(os.path.join(cell.run_dir, name)):
                    paths.append(os.path.join(cell.run_dir, name))
        if cell.patch_path is not None and os.path.isfile(cell.patch_path):
            paths.append(cell.patch_path)
    return paths


@dataclass
class CostLedger:
    """Settled cost-ledger receipts of a round, grouped by the campaign dir they were tagged with."""

    settled_by_run_dir: dict[str, list[str]] = field(default_factory=dict)
    lines: int = 0
    skipped: int = 0

    def settled_calls_for(self, campaign_dir: Path) -> list[str]:
        keys = {str(campaign_dir), os.path.realpath(campaign_dir)}
        return [call for key in sorted(keys) for call in self.settled_by_run_dir.get(key, [])]


def read_cost_ledger(out_dir: Path) -> CostLedger:
    """`improve-run/cost-ledger.jsonl`: only settled receipts with a string callId count; garbage is skipped."""
    ledger = CostLedger()
    path = out_dir / "improve-run" / "cost-ledger.jsonl"
    try:
        handle = path.open("rb")
    except OSError:
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
                ledger.settled_by_run_dir.setdefault(run_dir, []).append(call_id)
    return ledger


def build_manifest(out_dir: str | os.PathLike[str]) -> RoundManifest:
    """Join the round's own files into its manifest; RoundInputError on corrupt evidence."""
    out_dir = resolve_out_dir(out_dir)
    if not out_dir.is_dir():
        raise RoundInputError(f"{out_dir}: round outDir does not exist or is not a directory")
    provenance = read_json_or_none(out_dir / "improve-run" / "loop-provenance.json")
    cost_ledger = read_cost_ledger(out_dir)
    receipt_names = [receipt.path for receipt in list_shot_receipts(out_dir)]
    entries: list[CampaignEntry] = []
    instances: list[str] = []
    for generation, candidate_index, campaign_dir in discover_campaigns(out_dir):
        cells = read_campaign_cells(campaign_dir)
        is_baseline = generation == BASELINE_GENERATION
        if is_baseline:
            if not cells:
                continue
            instances = sorted({cell.scenario_id for cell in cells})
        commit = _campaign_commit(generation, campaign_dir, cells)
        reps = max((cell.rep for cell in cells), default=-1) + 1
        settled = cost_ledger.settled_calls_for(campaign_dir)
        entries.append(
            CampaignEntry(
                generation=generation,
                candidate_index=candidate_index,
                campaign_dir=campaign_dir,
                cells=cells,
                commit=commit,
                diff_path=None if is_baseline else _candidate_diff_path(out_dir, commit),
                shot_receipt_paths=[]
                if is_baseline
                else _receipts_of(receipt_names, generation, candidate_index),
                reps=reps,
                resolved_count=_resolved_count(cells, reps),
                cells_cached=sum(1 for cell in cells if cell.cached),
                cost=_campaign_cost(cells, settled),
                artifact_paths=_artifact_paths(cells),
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


def _receipts_of(receipt_paths: list[str], generation: int, candidate_index: int) -> list[str]:
    prefix = f"gen{generation}-cand{candidate_index}-"
    return sorted(p for p in receipt_paths if os.path.basename(p).startswith(prefix))


# ---------------------------------------------------------------------------
# Supervisor result and proposer shot receipts
# ---------------------------------------------------------------------------


def read_supervisor_result(run_dir: str | None) -> dict[str, Any] | None:
    """`<runDir>/result.json` as an object, or None when absent, unreadable or not an object."""
    if run_dir is None:
        return None
    result = read_json_or_none(os.path.join(run_dir, "result.json"))
    return result if is_record(result) else None


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
            found.append(ShotReceiptFile(path, author, int(match[1]), int(match[2]), int(match[3])))

    for entry in _scan(shot_dir):
        # Like the seed's readdir(withFileTypes): a symlink is not followed, so a link
        # to a directory (or a symlink loop) is read as a file name, never descended into.
        if _is_real_directory(entry):
            for name in sorted(e.name for e in _scan(Path(entry.path))):
                collect(name, entry.name, os.path.join(entry.path, name))
        else:
            collect(entry.name, None, entry.path)
    found.sort(key=lambda receipt: receipt.path)
    return found


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError:
        return []


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
