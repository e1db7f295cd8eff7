"""The round specs and what each round holds: its campaigns, cells and proposer shots on a timeline.

A `RoundPlan` is the structure of one round without its random values, so `edge_case_sites`
can name every path without writing anything. Every path a writer needs is derived here from
the absolute outDir; `plant_cases` (planted.py) marks the cells and shots that carry a case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rollout_assets.demo.ids import commit_sha, digest, temp_suffix, uuid_of
from rollout_assets.demo.planted import FIX_CASES, plant_cases
from rollout_assets.demo.world import BASE_TIME_MS, DAY, HOUR, MINUTE, SECOND


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


# What `rollout-assets demo ROOT` writes: round-001, small, every edge case; round-002, larger
# and clean (no edge cases); round-003, every edge case plus every FIX_CASES name.
DEFAULT_ROUNDS: tuple[RoundSpec, ...] = (
    RoundSpec(name="round-001", seed=1),
    RoundSpec(
        name="round-002",
        instances=6,
        reps=3,
        generations=3,
        candidates_per_generation=3,
        workers_per_cell=3,
        steps_per_session=4,
        shots_per_candidate=2,
        edge_cases=False,
        seed=2,
    ),
    RoundSpec(name="round-003", instances=4, shots_per_candidate=2, fixes=FIX_CASES, seed=3),
)

# A few real SWE-bench Verified instances with a file their fix touches; more are made up.
_KNOWN_INSTANCES = (
    ("django__django-11532", "django/core/mail/message.py"),
    ("astropy__astropy-12907", "astropy/modeling/separable.py"),
    ("sympy__sympy-20590", "sympy/core/_print_helpers.py"),
    ("pytest-dev__pytest-5103", "src/_pytest/assertion/rewrite.py"),
    ("scikit-learn__scikit-learn-13142", "sklearn/mixture/base.py"),
    ("matplotlib__matplotlib-23314", "lib/mpl_toolkits/mplot3d/axes3d.py"),
    ("psf__requests-2317", "requests/sessions.py"),
    ("pydata__xarray-4094", "xarray/core/dataarray.py"),
    ("sphinx-doc__sphinx-8721", "sphinx/ext/viewcode.py"),
    ("pylint-dev__pylint-7080", "pylint/lint/expand_modules.py"),
    ("django__django-13401", "django/db/models/fields/__init__.py"),
    ("mwaskom__seaborn-3190", "seaborn/_core/scales.py"),
)
_MADE_UP_REPOS = (
    ("django__django", "django/db/models/query.py"),
    ("sympy__sympy", "sympy/core/expr.py"),
    ("scikit-learn__scikit-learn", "sklearn/utils/validation.py"),
    ("sphinx-doc__sphinx", "sphinx/domains/python.py"),
    ("matplotlib__matplotlib", "lib/matplotlib/axes/_base.py"),
    ("pydata__xarray", "xarray/core/variable.py"),
)

# Authors of per-author receipts alternate over candidates (planted.py adds dedicated ones).
_BASE_AUTHORS = ("atlas", "birch")

_CELL_STAGGER = 9 * SECOND  # one cell starts every 9 s within a campaign
_SHOT_SPACING = 20 * MINUTE  # longer than a shot (<= 15 min) plus both window margins
_LATE_TRANSCRIPT_GAP = 3 * HOUR

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
        session_id = uuid_of(self.tag, shot.candidate_id, shot.author, shot.shot, variant)
        name = f"agent-{session_id[:8]}.jsonl" if variant == "sidechain" else f"{session_id}.jsonl"
        return self.claude_folder(shot) / name

    def campaign_of(self, generation: int, candidate_index: int) -> Campaign:
        return self.campaigns[1 + generation * self.spec.candidates_per_generation + candidate_index]


def _validate_spec(spec: RoundSpec) -> None:
    name = spec.name
    if not name or name in {".", ".."} or "/" in name or "\\" in name:
        raise ValueError(f"round name {name!r} is not a plain directory name")
    sizes = {
        "instances": spec.instances,
        "reps": spec.reps,
        "generations": spec.generations,
        "candidates_per_generation": spec.candidates_per_generation,
        "workers_per_cell": spec.workers_per_cell,
        "steps_per_session": spec.steps_per_session,
        "shots_per_candidate": spec.shots_per_candidate,
    }
    for field_name, value in sizes.items():
        if value < 1:
            raise ValueError(f"round {name}: {field_name} must be >= 1, got {value}")
    unknown = sorted(set(spec.fixes) - FIX_CASES)
    if unknown:
        raise ValueError(f"round {name}: unknown fixes {unknown}; known: {sorted(FIX_CASES)}")


def _instance_ids(count: int) -> list[tuple[str, str]]:
    """`count` distinct (scenarioId, touched file) pairs: real ids first, then made-up numbers."""
    chosen = list(_KNOWN_INSTANCES[:count])
    for k in range(count - len(chosen)):
        repo, touched = _MADE_UP_REPOS[k % len(_MADE_UP_REPOS)]
        chosen.append((f"{repo}-{20000 + k}", touched))
    return chosen


def plan_round(root: Path, spec: RoundSpec) -> RoundPlan:
    """The whole plan of round `spec` under `root`, its cases planted (pure: writes nothing)."""
    _validate_spec(spec)
    out_dir = root / "rounds" / spec.name
    tag = digest("round", spec.name)[:6]
    start_ms = BASE_TIME_MS + (int(digest("day", spec.name)[:6], 16) % 28) * DAY
    plan = RoundPlan(
        spec=spec,
        root=root,
        out_dir=out_dir,
        tag=tag,
        run_id=f"improve-{spec.name}",
        start_ms=start_ms,
        campaigns=[],
        cells=[],
        shots=[],
    )
    _plan_timeline(plan)
    plant_cases(plan)
    return plan


def _plan_timeline(plan: RoundPlan) -> None:
    """Baseline first; then per generation: its proposer shots, then its candidates' campaigns."""
    spec = plan.spec
    instances = _instance_ids(spec.instances)
    cells_per_campaign = spec.instances * spec.reps
    campaign_span = cells_per_campaign * _CELL_STAGGER + 2 * HOUR
    shots_per_generation = spec.candidates_per_generation * spec.shots_per_candidate
    propose_span = shots_per_generation * _SHOT_SPACING + _LATE_TRANSCRIPT_GAP + HOUR
    generation_span = propose_span + spec.candidates_per_generation * campaign_span

    campaign_slots = [(-1, -1, plan.start_ms)]
    for g in range(spec.generations):
        block = plan.start_ms + campaign_span + g * generation_span
        for i in range(spec.candidates_per_generation):
            first_shot = block + i * spec.shots_per_candidate * _SHOT_SPACING
            late = first_shot + spec.shots_per_candidate * _SHOT_SPACING + _LATE_TRANSCRIPT_GAP
            author = None if (g * spec.candidates_per_generation + i) % 2 == 0 else _BASE_AUTHORS[g % 2]
            for s in range(spec.shots_per_candidate):
                plan.shots.append(Shot(g, i, s, author, first_shot + s * _SHOT_SPACING, late))
            campaign_slots.append((g, i, block + propose_span + i * campaign_span))

    for generation, candidate_index, campaign_start in campaign_slots:
        if generation == -1:
            rel_dir, run_name = "improve-run/baseline", "baseline"
        else:
            rel_dir = f"improve-run/gen-{generation}/candidate-{candidate_index}"
            run_name = f"gen-{generation}-candidate-{candidate_index}"
        campaign = Campaign(
            generation, candidate_index, rel_dir, run_name, commit_sha(plan.tag, run_name), campaign_start
        )
        plan.campaigns.append(campaign)
        for n, (scenario_id, touched) in enumerate(
            (sid, f) for sid, f in instances for _ in range(spec.reps)
        ):
            rep = n % spec.reps
            plan.cells.append(
                Cell(
                    campaign=campaign,
                    scenario_id=scenario_id,
                    touched_file=touched,
                    rep=rep,
                    dir_name=f"{scenario_id}__rep{rep}",
                    commit=campaign.commit,
                    start_ms=campaign_start + n * _CELL_STAGGER,
                    number=len(plan.cells),
                )
            )
