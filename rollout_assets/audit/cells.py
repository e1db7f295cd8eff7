"""The round's cells, walked independently of the round reader: each campaign's cells, their
rewards and verdicts, and the worker cwds their result.json lists (docs/input-formats.md §2).
"""

from __future__ import annotations

import heapq
import io
import itertools
import marshal
import multiprocessing
import os
import re
import stat
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.audit.folders import UnreadableRound, absent, listdir
from rollout_assets.audit.strict_json import input_json, is_number
from rollout_assets.audit.wording import (
    OFFICIAL_JUDGE,
    SUPERVISOR_GAP,
    SUPERVISOR_GAP_LIST_MISSING,
    SUPERVISOR_GAP_UNLISTED,
)

# The file primitive, not the reader: opens without blocking on a FIFO, refuses what is no file.
from rollout_assets.io import read_regular_file
from rollout_assets.audit.worker_cwds import WorkerCwds
from rollout_assets.spilled_list import SpilledList

# ASCII digits and a true end of name (`$` would also match before a trailing newline), as the
# loop writes them: a folder the join does not read as a campaign must not be expected here either.
_GEN = re.compile(r"^gen-(\d+)\Z", re.ASCII)
_CAND = re.compile(r"^candidate-(\d+)\Z", re.ASCII)


@dataclass(frozen=True)
class Cell:
    candidate_id: str
    scenario_id: str
    rep: int
    run_dir: str | None
    reward: Any  # what its supervisor line's reward must be
    # The replicate's verdict: the artifact's boolean `resolved` when there is no error beside
    # it; None (inconclusive) otherwise.
    verdict: bool | None


def _cell_reward(record: dict[str, Any]) -> int | float | None:
    """docs/line-format.md: the official judge's composite, else 1/0 from a boolean `resolved`,
    else null."""
    scores = record.get("judgeScores")
    official = scores.get(OFFICIAL_JUDGE) if isinstance(scores, dict) else None
    composite = official.get("composite") if isinstance(official, dict) else None
    if is_number(composite):
        return composite
    artifact = record.get("artifact")
    resolved = artifact.get("resolved") if isinstance(artifact, dict) else None
    return (1 if resolved else 0) if isinstance(resolved, bool) else None


def _campaign_dirs(out_dir: Path) -> list[tuple[str, Path]]:
    """(candidate id, folder) of the baseline, then of every candidate by generation and index
    (the ledger's order)."""
    improve = out_dir / "improve-run"
    candidates = []
    for generation in listdir(improve):
        g = _GEN.match(generation)
        if g is None:
            continue
        for candidate in listdir(improve / generation):
            c = _CAND.match(candidate)
            if c is not None:
                candidates.append(((int(g[1]), int(c[1])), improve / generation / candidate))
    candidates.sort(key=lambda item: item[0])
    return [("baseline", improve / "baseline")] + [
        (f"gen{g}-cand{i}", folder) for (g, i), folder in candidates
    ]


def _campaign_cells(candidate_id: str, campaign: Path, names: list[str]) -> Iterator[Cell]:
    """The cells among `names`, the listing of `campaign` (empty when it is no directory)."""
    for name in names:
        # Strings, not Path objects: pathlib interns every part of a path it parses, and the
        # interpreter's table of interned strings never shrinks (4 MB at 96,000 cells).
        cell_folder = os.path.join(campaign, name)
        cache = os.path.join(cell_folder, "cached-result.json")
        # A folder the process may not search is not known to hold no cell: refused, never skipped.
        try:
            if not stat.S_ISREG(os.stat(cache).st_mode):
                continue
        except OSError as error:
            if absent(error):
                continue
            raise UnreadableRound(
                f"{cell_folder}: cannot tell whether it holds a cached-result.json ({error.strerror or error})"
            ) from error
        record = input_json(read_regular_file(cache))
        artifact = record.get("artifact")
        run_dir = artifact.get("runDir") if isinstance(artifact, dict) else None
        rep = record["rep"]
        yield Cell(
            candidate_id,
            record["scenarioId"],
            int(rep),
            run_dir if isinstance(run_dir, str) else None,
            _cell_reward(record),
            _replicate_verdict(artifact, record.get("error")),
        )


def _replicate_verdict(artifact: Any, error: Any) -> bool | None:
    resolved = artifact.get("resolved") if isinstance(artifact, dict) else None
    return resolved if isinstance(resolved, bool) and error is None else None


# docs/input-formats.md §1: a run folder's files count only where they resolve inside the round
# or inside a root this variable names (colon-separated absolute paths).
RUN_DIR_ROOTS = "ROLLOUT_RUN_DIR_ROOTS"


def _allowed_roots(out_dir: Path) -> tuple[str, ...]:
    """The folders a run folder's files may resolve inside, symlinks followed, each ending in
    "/": the round and every configured run folder root. Resolved once per task, not per cell
    (each resolution reads every component of the path)."""
    roots = [out_dir, *(root for root in os.environ.get(RUN_DIR_ROOTS, "").split(":") if os.path.isabs(root))]
    return tuple(os.path.realpath(root).rstrip("/") + "/" for root in roots)


def _allowed(path: str, roots: tuple[str, ...]) -> bool:
    """Whether `path`, symlinks followed, is inside one of `roots` (`_allowed_roots`)."""
    real = os.path.realpath(path)
    return any(real == root[:-1] or real.startswith(root) for root in roots)


def _result_json(run_dir: str | None, roots: tuple[str, ...]) -> dict[str, Any] | None:
    # A relative runDir names no file (docs/input-formats.md); nor does one whose result.json
    # resolves outside the round and the configured roots.
    if run_dir is None or not os.path.isabs(run_dir):
        return None
    path = os.path.join(run_dir, "result.json")
    try:
        if not _allowed(path, roots):
            return None
        result = input_json(read_regular_file(path))
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def _cell_row(
    candidate_id: str,
    scenario_id: str,
    rep: int,
    run_dir: str | None,
    reward: Any,
    verdict: bool | None,
    cwds: tuple[str, ...],
    gap: str,
) -> tuple[Cell, tuple[str, ...], str]:
    """A row of `CellsRecount.in_order` back as (cell, its worker cwds, its supervisor's gap)."""
    return Cell(candidate_id, scenario_id, rep, run_dir, reward, verdict), cwds, gap


@dataclass
class CampaignReplicates:
    """What a campaign's proposer reward needs of its cells (`resolved_fractions`), per
    instance rather than per cell: how many replicates, whether all resolved, whether any
    has a verdict."""

    reps: int = 0  # max rep + 1
    # scenario id -> (replicates, all resolved, any conclusive)
    instances: dict[str, tuple[int, bool, bool]] = field(default_factory=dict)

    def add(self, scenario_id: str, rep: int, verdict: bool | None) -> None:
        self.reps = max(self.reps, rep + 1)
        count, resolved, judged = self.instances.get(scenario_id, (0, True, False))
        self.instances[scenario_id] = (count + 1, resolved and verdict is True, judged or verdict is not None)


@dataclass
class CellsRecount:
    """What the cells of one or more campaigns say (merged in campaign order).

    `in_order` is on disk (a round's cells with their cwds grew the recount by about 150 MiB
    at 96,000 cells): the parent spills each campaign's cells as its part comes back, and
    `cells_in_order` reads them back."""

    without_list: list[str] = field(default_factory=list)
    # The fields of each cell, its distinct worker cwds in first-listed order and its
    # supervisor's gap, as one tuple a cell, in ledger order.
    in_order: SpilledList = field(default_factory=SpilledList)
    campaigns: list[str] = field(default_factory=list)  # the candidate ids of the campaign folders
    # Every worker cwd some cell's result.json lists (on disk).
    worker_cwds: WorkerCwds = field(default_factory=WorkerCwds)
    replicates: dict[str, CampaignReplicates] = field(default_factory=dict)  # by candidate id

    def cells_in_order(self) -> Iterator[tuple[Cell, tuple[str, ...], str]]:
        """(cell, its worker cwds, its supervisor's gap) of every cell, in ledger order."""
        return (_cell_row(*row) for row in self.in_order)


# A cell as a row of `CellsRecount.in_order`: its fields, its cwds and its supervisor's gap.
_Row = tuple[str, str, int, "str | None", Any, "bool | None", tuple[str, ...], str]


@dataclass
class _CampaignPart:
    """The cells of a run of one campaign's cell folders, as a (forked) task returns them: their
    rows in (scenarioId, rep) order, marshalled one after another into one bytes object. Rows as
    Python objects would be unpickled in the parent as each task ends, whole runs at once,
    spread over the allocator's blocks; a single bytes object is one allocation, given back
    whole, and its rows are decoded one at a time as they are merged."""

    candidate_id: str
    is_dir: bool
    in_order: bytes | Iterable[_Row]  # bytes, until the runs are merged
    without_list: list[str]


def _encoded(rows: Iterable[_Row]) -> bytes:
    return b"".join(marshal.dumps(row) for row in rows)


def _decoded(encoded: bytes) -> Iterator[_Row]:
    stream = io.BytesIO(encoded)
    while stream.tell() < len(encoded):
        yield marshal.load(stream)


def _merge_campaign(recount: CellsRecount, part: _CampaignPart) -> None:
    """Append one campaign's cells to the recount, in order, spilling them."""
    if part.is_dir:
        recount.campaigns.append(part.candidate_id)
    recount.without_list += part.without_list
    replicates = recount.replicates.setdefault(part.candidate_id, CampaignReplicates())
    for row in part.in_order:
        recount.in_order.append(row)
        recount.worker_cwds.add(row[6])
        replicates.add(row[1], row[2], row[5])


def _supervisor_gap(cell: Cell, result: dict[str, Any] | None, cwds: tuple[str, ...]) -> str:
    """Workers that ran but cannot be listed: no readable result.json, or one that counts
    spawned workers without naming a cwd. The supervisor's gap says which."""
    reported = result is not None and any(
        is_number(result.get(key)) and result[key] > 0 for key in ("spawned", "workers")
    )
    if cell.run_dir is not None and result is None:
        return SUPERVISOR_GAP_LIST_MISSING
    if reported and not cwds:
        return SUPERVISOR_GAP_UNLISTED
    return SUPERVISOR_GAP


def _recount_campaign(out_dir: Path, candidate_id: str, campaign: Path, names: list[str]) -> _CampaignPart:
    in_order: list[_Row] = []
    without_list: list[str] = []
    roots = _allowed_roots(out_dir)
    for cell in _campaign_cells(candidate_id, campaign, names):
        result = _result_json(cell.run_dir, roots)
        recovered = result.get("recoveredSpend") if result is not None else None
        listed = recovered.get("workerCwds") if isinstance(recovered, dict) else None
        cwds = (
            tuple(dict.fromkeys(cwd for cwd in listed if isinstance(cwd, str)))
            if isinstance(listed, list)
            else ()
        )
        gap = _supervisor_gap(cell, result, cwds)
        fields = (cell.candidate_id, cell.scenario_id, cell.rep, cell.run_dir, cell.reward, cell.verdict)
        in_order.append((*fields, cwds, gap))
        if gap is not SUPERVISOR_GAP:
            without_list.append(f"{cell.candidate_id}/{cell.scenario_id}/rep{cell.rep}")
    # A campaign's cells come in (scenario, rep) order in the ledger, whatever their folder names.
    in_order.sort(key=_cell_key)
    return _CampaignPart(candidate_id, campaign.is_dir(), _encoded(in_order), without_list)


# Below this many cell folders, a second process costs more than it saves.
_PARALLEL_MIN_CELLS = 2_000
# Cell folders a task reads at most. A forked worker keeps the high point of what it held: with
# a whole 13,728-cell campaign a task, each of two workers forked from a process of the run's
# size peaked at 99 MiB (PSS), against 74 MiB with runs of 2,000 cells.
_CELLS_PER_TASK = 2_000


def _cell_key(row: _Row) -> tuple[str, int]:
    return row[1], row[2]


def recount_cells(out_dir: Path, workers: int | None) -> CellsRecount:
    """The cells of every campaign, a run of cell folders per task; on every core for a large
    round (reading two small JSON files per cell dominates the checks' recount of the inputs)."""
    # Each campaign listed once: the listing both sizes the round and names its cells.
    tasks = [
        (out_dir, candidate_id, campaign, names[start : start + _CELLS_PER_TASK])
        for candidate_id, campaign in _campaign_dirs(out_dir)
        for names in [listdir(campaign)]
        for start in range(0, max(len(names), 1), _CELLS_PER_TASK)
    ]
    workers = min(workers or len(os.sched_getaffinity(0)), len(tasks))
    total = sum(len(names) for _, _, _, names in tasks)
    recount = CellsRecount()
    if workers <= 1 or total < _PARALLEL_MIN_CELLS:
        for part in _campaign_parts(map(_recount_campaign, *zip(*tasks))):
            _merge_campaign(recount, part)
        return recount
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for part in _campaign_parts(pool.map(_recount_campaign, *zip(*tasks))):
            _merge_campaign(recount, part)
    return recount


def _campaign_parts(parts: Iterable[_CampaignPart]) -> Iterator[_CampaignPart]:
    """The parts of the consecutive tasks of each campaign as one: their cells merged in
    (scenarioId, rep) order, as one stable sort of the whole campaign orders them (the tasks
    are runs of its listing, each sorted, and a merge takes equal keys from the earlier run
    first), and their cells without a worker list in listing order."""
    for _, group in itertools.groupby(parts, key=lambda part: part.candidate_id):
        runs = list(group)
        yield _CampaignPart(
            runs[0].candidate_id,
            runs[0].is_dir,
            heapq.merge(*(_decoded(run.in_order) for run in runs), key=_cell_key),  # type: ignore[arg-type]
            [cell for run in runs for cell in run.without_list],
        )


def resolved_fractions(cells: CellsRecount) -> dict[str, int | float | None]:
    """A candidate's proposer reward (docs/line-format.md): of the baseline's instances, the
    share whose every replicate (max rep + 1 of the campaign) resolved; null without baseline
    cells, and null when none of those instances has a conclusive replicate in the campaign."""
    baseline = cells.replicates.get("baseline")
    instances = set(baseline.instances) if baseline is not None else set()
    fractions: dict[str, int | float | None] = {}
    for candidate_id in cells.campaigns:
        campaign = cells.replicates.get(candidate_id, CampaignReplicates())
        resolved = sum(
            1
            for instance, (count, all_resolved, _) in campaign.instances.items()
            if instance in instances and count == campaign.reps and all_resolved
        )
        judged = any(
            instance in instances and any_conclusive
            for instance, (_, _, any_conclusive) in campaign.instances.items()
        )
        fractions[candidate_id] = resolved / len(instances) if instances and judged else None
    return fractions
