"""The round specs and what each round holds: its campaigns, cells and proposer shots on a timeline.

A `RoundPlan` is the structure of one round without its random values, so `edge_case_sites`
can name every path without writing anything. Every path a writer needs is derived here from
the absolute outDir; `plant_cases` (planted.py) marks the cells and shots that carry a case.
"""

from __future__ import annotations

from pathlib import Path

from rollout_assets.demo.ids import commit_sha, digest
from rollout_assets.demo.planted import FIX_CASES, plant_cases
from rollout_assets.demo.round_plan import Campaign, Cell, RoundPlan, RoundSpec, Shot
from rollout_assets.demo.world import BASE_TIME_MS, DAY, HOUR, MINUTE, SECOND


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
    # Four shots per candidate: the shot cases take all 16 slots (planted.py).
    RoundSpec(name="round-003", instances=4, shots_per_candidate=4, fixes=FIX_CASES, seed=3),
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
