"""What a demo round is made of: its spec, campaigns, cells, proposer shots, and the plan that
holds them with every path derived from the absolute outDir. plan.py lays a round out with
these; planted.py marks the cells and shots that carry a case (a module of its own, so the
two import these types and not each other)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rollout_assets.demo.ids import temp_suffix, uuid_of


@dataclass(frozen=True)
class RoundSpec:
    """The shape of one demo round."""

    name: str  # directory name of the round under ROOT/rounds/
    instances: int = 3  # distinct SWE-bench instance ids (scenarioId)
    reps: int = 2
    generations: int = 2  # gen-0 .. gen-(n-1)
    candidates_per_generation: int = 2
    workers_per_cell: int = 2  # worker cwds per cell in result.json recoveredSpend.workerCwds
    steps_per_session: int = 3  # assistant steps per opencode worker session
    shots_per_candidate: int = 1
    edge_cases: bool = True  # plant every edge case of planted.py's table
    fixes: frozenset[str] = frozenset()  # optional extra cases, names in FIX_CASES
    seed: int = 0


_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def _claude_slug(cwd: str) -> str:
    """Claude Code's project-folder name for a cwd: every char outside [A-Za-z0-9-] becomes '-'."""
    return _SLUG_UNSAFE.sub("-", cwd)


@dataclass(frozen=True)
class Campaign:
    generation: int  # -1 for the baseline
    candidate_index: int  # -1 for the baseline
    rel_dir: str  # improve-run/baseline or improve-run/gen-<g>/candidate-<i>
    run_name: str  # its folder under runs/ and worker-clones/
    commit: str
    start_ms: int

    @property
    def is_baseline(self) -> bool:
        return self.generation == -1


@dataclass
class Cell:
    campaign: Campaign
    scenario_id: str
    touched_file: str
    rep: int
    dir_name: str
    commit: str
    start_ms: int
    cases: set[str] = field(default_factory=set)
    number: int = 0  # its place among the round's cells, from 0

    @property
    def cell_id(self) -> str:
        return f"{self.campaign.run_name}:{self.scenario_id}:rep{self.rep}"


@dataclass
class Shot:
    generation: int
    candidate_index: int
    shot: int
    author: str | None
    start_ms: int
    late_start_ms: int  # after every window of the candidate's worktree
    cases: set[str] = field(default_factory=set)

    @property
    def candidate_id(self) -> str:
        return f"gen{self.generation}-cand{self.candidate_index}"


@dataclass
class RoundPlan:
    spec: RoundSpec
    root: Path
    out_dir: Path
    tag: str  # short hash of the round name: keeps ids unique across rounds in one store
    run_id: str
    start_ms: int
    campaigns: list[Campaign]
    cells: list[Cell]  # campaign order, then directory-creation order
    shots: list[Shot]
    case_cells: dict[str, Cell] = field(default_factory=dict)
    case_shots: dict[str, Shot] = field(default_factory=dict)

    # Paths, all derived from the absolute outDir.
    def campaign_dir(self, campaign: Campaign) -> Path:
        return self.out_dir / campaign.rel_dir

    def cell_dir(self, cell: Cell) -> Path:
        return self.campaign_dir(cell.campaign) / cell.dir_name

    def run_dir(self, cell: Cell) -> Path:
        return self.out_dir / "runs" / cell.campaign.run_name / cell.dir_name

    def patch_path(self, cell: Cell) -> Path:
        return self.out_dir / "patches" / cell.campaign.run_name / f"{cell.dir_name}.patch"

    def worker_name(self, cell: Cell, worker: int) -> str:
        """The worker's own name, as the loop's temporary clone folders are named
        (`loops-w-<worker>-` and six random characters): a different one in every cell."""
        counter = cell.number * self.spec.workers_per_cell + worker
        return f"loops-w-{worker}-{temp_suffix(counter, self.tag)}"

    def worker_cwd(self, cell: Cell, worker: int) -> str:
        """The worker's clone: a folder of its own name, all clones of a round side by side."""
        return str(self.root / "worker-clones" / self.spec.name / self.worker_name(cell, worker))

    def candidate_patch(self, campaign: Campaign) -> Path:
        return self.out_dir / "candidates" / f"{campaign.commit[:10]}.patch"

    def receipt_path(self, shot: Shot) -> Path:
        name = f"{shot.candidate_id}-shot{shot.shot}.json"
        folder = self.out_dir / "proposer-shots"
        return folder / shot.author / name if shot.author else folder / name

    def worktree(self, shot: Shot) -> Path:
        suffix = f"-{shot.author}" if shot.author else ""
        return self.out_dir / "proposer-wt" / f"{shot.candidate_id}{suffix}"

    def claude_folder(self, shot: Shot) -> Path:
        return self.root / "claude-projects" / _claude_slug(str(self.worktree(shot)))

    def transcript_path(self, shot: Shot, variant: str = "main") -> Path:
        """A file of the shot's project folder: its session (`main`), another session (`late`,
        `tied`, `past-window`, `cut`), a sub-agent's file beside it (`sidechain`) or in the main
        session's `<session id>/subagents/` folder (`subagents`, Claude Code 2.1.x)."""
        session_id = uuid_of(self.tag, shot.candidate_id, shot.author, shot.shot, variant)
        if variant == "subagents":
            main = self.transcript_path(shot)
            return main.parent / main.stem / "subagents" / f"agent-{session_id[:8]}.jsonl"
        name = f"agent-{session_id[:8]}.jsonl" if variant == "sidechain" else f"{session_id}.jsonl"
        return self.claude_folder(shot) / name

    def campaign_of(self, generation: int, candidate_index: int) -> Campaign:
        return self.campaigns[1 + generation * self.spec.candidates_per_generation + candidate_index]
