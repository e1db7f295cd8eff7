"""One campaign read for the manifest: its cells in (scenarioId, rep) order, each file read
once, and what the manifest sums of them (CampaignTally: commits, resolved and judged counts,
costs, the per-cell rows when asked for)."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Collection
from pathlib import Path
from typing import Any

from rollout_assets.io import finite_or_none, is_number
from rollout_assets.sources.round.cells import (
    CELL_CACHE,
    CampaignCells,
    CellRecord,
    cell_artifact_paths,
    cell_names,
    key_check,
    per_instance_row,
    read_cell,
)
from rollout_assets.sources.round.errors import RoundInputError
from rollout_assets.sources.round.packed import PackedStrings
from rollout_assets.spilled_list import SpilledList


# The numbers of a cell the manifest sums per campaign (docs/input-formats.md §2, `cost`).
_COST_FIELDS = ("costUsd", "tokenInput", "tokenOutput", "spentUsd", "spentTokens", "wallS", "judgeWallS")


class CampaignTally:
    """A campaign's cells as the manifest sums them, added one at a time in (scenarioId, rep) order.

    Everything but the packed names and checks is of fixed size, whatever the campaign's size
    (`instances` holds one id per instance, which the manifest lists); the per-cell rows, when
    kept, are spilled to a temporary file.
    """

    def __init__(self, *, collect_commits: bool, keep_rows: bool = False) -> None:
        self.names = PackedStrings()
        # The manifest's per-cell lists, only when asked for (the manifest stage writes them),
        # on disk until written.
        self.rows: list[dict[str, Any]] | None = SpilledList() if keep_rows else None
        self.artifact_paths: list[str] | None = SpilledList() if keep_rows else None
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
            self.rows.append(per_instance_row(cell))
            self.artifact_paths += cell_artifact_paths(cell)
        self.key_checks.append(key_check(cell.scenario_id, cell.rep))
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


def read_campaign(
    campaign_dir: Path, *, is_baseline: bool, keep_rows: bool = False
) -> tuple[CampaignCells, CampaignTally]:
    """Every cell of one campaign directory, sorted by (scenarioId, rep) in code-point order,
    and their tally; each cell file is read once, and none is kept.

    Cell directories are usually named so that their order is the cells' order; a campaign
    whose names are not (or that holds a duplicate) is read again and sorted in memory.
    """
    tally = CampaignTally(collect_commits=not is_baseline, keep_rows=keep_rows)
    names = cell_names(campaign_dir)
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
) -> tuple[CampaignCells, CampaignTally]:
    """`read_campaign` for names out of cell order: holds the campaign's records while sorting them."""
    named = [(name, read_cell(campaign_dir / name / CELL_CACHE)) for name in names]
    named.sort(key=lambda item: (item[1].scenario_id, item[1].rep, str(item[1].path)))
    for (_, previous), (_, cell) in itertools.pairwise(named):
        if (previous.scenario_id, previous.rep) == (cell.scenario_id, cell.rep):
            raise RoundInputError(
                f"{cell.path}: duplicates cell {cell.scenario_id} rep {cell.rep} of {previous.path}"
            )
    tally = CampaignTally(collect_commits=not is_baseline, keep_rows=keep_rows)
    for name, cell in named:
        tally.add(name, cell)
    return CampaignCells(campaign_dir, tally.names, tally.key_checks), tally
