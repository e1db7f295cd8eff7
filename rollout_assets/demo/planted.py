"""The planted edge cases: their names, which cells and shots carry them, and where they land.

OWNS the catalogue (the table below, FIX_CASES, EDGE_CASE_LOCATIONS), its assignment to a
round's plan (`plant_cases`), the session defects it implies (`SessionShape`) and the sites of
every case in a written round (`case_sites`). The writers (cells.py, opencode_store.py,
shots.py, claude_transcripts.py) read a cell's or shot's `cases` and plant accordingly.

## Edge cases (`edge_cases=True`) and optional cases (`fixes`)

Cell cases go, one each, to the cells of the round's *edge pool* in the order of the table: the
candidate campaigns in (generation, candidate) order, each one's cells sorted by
(scenarioId, rep), then the baseline cells except its first by (scenarioId, rep). Session cases
sit on the cell's worker cwd `w0` (`cwd_without_session`: the cell's last worker cwd). Shot cases
go in groups to *shot slots*: slot k is shot k // C of candidate k % C (C = generations x
candidates, in (generation, candidate) order). "(own worktree)" puts the receipt in a dedicated
author folder so that no other shot shares its worktree. The base groups take slots 0-3, so an
edge round needs >= 4 shots; each fix present takes the next slot. A spec too small for its
cases is refused. `edge_case_sites(root, spec)` gives the exact paths for any spec; the last
column shows where DEFAULT_ROUNDS puts them (cells under improve-run/, receipts under
proposer-shots/).

| case | planted | DEFAULT_ROUNDS |
|---|---|---|
| `non_ascii_text` | edge cell 0, `w0` (every worker prompt and proposer prompt has it) | 001 gen-0/candidate-0/astropy__astropy-12907__rep0 |
| `cwd_listed_twice` | edge cell 1: result.json lists `w0` again at the end (respawn) | 001 gen-0/candidate-0/astropy__astropy-12907__rep1 |
| `cwd_with_two_sessions` | edge cell 2: `w0` also has a sub-agent session (parent_id = first) | 001 gen-0/candidate-0/django__django-11532__rep0 |
| `cwd_without_session` | edge cell 3: its last worker cwd has no session row | 001 gen-0/candidate-0/django__django-11532__rep1 |
| `session_without_messages` | edge cell 4: `w0`'s session row has no message rows | 001 gen-0/candidate-0/sympy__sympy-20590__rep0 |
| `session_with_only_malformed_messages` | edge cell 5: every message of `w0` is invalid JSON | 001 gen-0/candidate-0/sympy__sympy-20590__rep1 |
| `malformed_part` | edge cell 6: one part of `w0`'s first step is invalid JSON | 001 gen-0/candidate-1/astropy__astropy-12907__rep0 |
| `malformed_message` | edge cell 7: `w0` has one extra assistant message of invalid JSON | 001 gen-0/candidate-1/astropy__astropy-12907__rep1 |
| `very_long_tool_output` | edge cell 8: `w0`'s first tool output is >= 200 kB | 001 gen-0/candidate-1/django__django-11532__rep0 |
| `non_string_tool_output` | edge cell 9: `w0`'s first tool output is a JSON object | 001 gen-0/candidate-1/django__django-11532__rep1 |
| `half_second_wall_time` | edge cell 10: `w0`'s time_updated - time_created is n s + 500 ms | 001 gen-0/candidate-1/sympy__sympy-20590__rep0 |
| `non_string_worker_cwd` | edge cell 11: result.json workerCwds holds a `null` | 001 gen-0/candidate-1/sympy__sympy-20590__rep1 |
| `errored_cell` | edge cell 12: `artifact: null` + `error`; no run dir, no sessions | 001 gen-1/candidate-0/astropy__astropy-12907__rep0 |
| `composite_judge_score` | edge cell 13: judgeScores composite 0.62 | 001 gen-1/candidate-0/astropy__astropy-12907__rep1 |
| `cell_without_reward` | edge cell 14: no judgeScores, `resolved: null`, no judge.json | 001 gen-1/candidate-0/django__django-11532__rep0 |
| `sup_status_running` | edge cell 15: result.json `sup_status: "running"` | 001 gen-1/candidate-0/django__django-11532__rep1 |
| `error-null` (fix) | next edge cell: `"error": null` and a good artifact | 003 gen-1/candidate-0/astropy__astropy-12907__rep0 |
| `result-json-missing` (fix) | next edge cell: no result.json in its run dir (sessions exist) | 003 gen-1/candidate-0/astropy__astropy-12907__rep1 |
| `result-json-corrupt` (fix) | next edge cell: result.json is not JSON (sessions exist) | 003 gen-1/candidate-0/django__django-11532__rep0 |
| `baseline-commit-order` (fix) | first baseline cell by (scenarioId, rep): own commit, dir sorts last | 003 baseline/zz-rerun-astropy__astropy-12907__rep0 |
| `transcript_outside_window` | slot 0: a 2nd transcript in its worktree, 3 h after the last shot | 001 gen0-cand0-shot0.json |
| `timed_out_shot` | slot 0: `timedOut: true`, `exitCode: 124` | 001 gen0-cand0-shot0.json |
| `receipt_without_timestamps` | slot 1 (own worktree): no startedAt/completedAt, one transcript | 001 cedar/gen0-cand1-shot0.json |
| `missing_transcript_folder` | slot 2 (own worktree): no Claude project folder at all | 001 dune/gen1-cand0-shot0.json |
| `candidate_without_patch` | slot 2's candidate: no `candidates/<commit10>.patch` | 001 gen-1/candidate-0 |
| `receipt_not_json` | slot 3: truncated receipt JSON; its transcript exists | 001 birch/gen1-cand1-shot0.json |
| `flat_receipt` | the first flat receipt that is valid JSON | 001 gen0-cand0-shot0.json |
| `per_author_receipt` | the first per-author receipt that is valid JSON | 001 cedar/gen0-cand1-shot0.json |
| `cost_ledger_garbage_line` | every round: the last line of improve-run/cost-ledger.jsonl | every round |
| `empty-claude-transcript` (fix) | next slot: its only in-window transcript is an image-only user line | 003 gen0-cand0-shot1.json |
| `sidechain-only-file` (fix) | next slot (own worktree): no timestamps; one transcript + `agent-<id>.jsonl` of sidechain lines | 003 ember/gen0-cand1-shot1.json |
| `empty-thinking-first-block` (fix) | next slot: first API message = empty thinking line + text line | 003 gen1-cand0-shot1.json |
| `synthetic-model` (fix) | next slot: the last assistant line has model `<synthetic>` | 003 birch/gen1-cand1-shot1.json |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.demo.ids import commit_sha
from rollout_assets.demo.round_plan import Cell, RoundPlan, Shot


@dataclass(frozen=True)
class EdgeCaseSite:
    """Where one planted case lives in a written round (fields that do not apply are None)."""

    case: str
    campaign_dir: Path | None = None  # improve-run/baseline or improve-run/gen-<g>/candidate-<i>
    cell_dir: Path | None = None  # the cell directory holding cached-result.json
    run_dir: Path | None = None  # the cell's artifact.runDir (holds result.json, judge.json)
    worker_cwd: str | None = None  # the opencode session.directory to look up
    receipt_path: Path | None = None  # proposer-shots/[<author>/]gen<g>-cand<i>-shot<s>.json
    worktree: Path | None = None  # the shot's Claude cwd, proposer-wt/gen<g>-cand<i>[-<author>]
    transcript_path: Path | None = None  # the shot's own transcript, when one is written
    other_path: Path | None = None  # the second file the case needs (see EDGE_CASE_LOCATIONS)


FIX_CASES: frozenset[str] = frozenset(
    {
        "empty-claude-transcript",
        "empty-thinking-first-block",
        "error-null",
        "sidechain-only-file",
        "synthetic-model",
        "baseline-commit-order",
        "result-json-missing",
        "result-json-corrupt",
    }
)

# case -> where it is planted; the same text as the module docstring's table.
EDGE_CASE_LOCATIONS: Mapping[str, str] = {
    "non_ascii_text": "edge cell 0, worker cwd w0; every worker user prompt and proposer prompt has it",
    "cwd_listed_twice": "edge cell 1: result.json workerCwds lists w0 again at the end",
    "cwd_with_two_sessions": "edge cell 2: w0 has a second, sub-agent session (parent_id = the first)",
    "cwd_without_session": "edge cell 3: its last worker cwd has no session row",
    "session_without_messages": "edge cell 4: w0's session row has no message rows",
    "session_with_only_malformed_messages": "edge cell 5: every message of w0's session is invalid JSON",
    "malformed_part": "edge cell 6: w0's first step holds one part whose data is invalid JSON",
    "malformed_message": "edge cell 7: w0's session has one extra assistant message with invalid JSON",
    "very_long_tool_output": "edge cell 8: w0's first tool output is >= 200 kB",
    "non_string_tool_output": "edge cell 9: w0's first tool output is a JSON object",
    "half_second_wall_time": "edge cell 10: w0's time_updated - time_created is a whole second + 500 ms",
    "non_string_worker_cwd": "edge cell 11: result.json workerCwds holds a null",
    "errored_cell": "edge cell 12: artifact null and an error string; no run dir, no sessions",
    "composite_judge_score": "edge cell 13: judgeScores composite 0.62",
    "cell_without_reward": "edge cell 14: no judgeScores, artifact.resolved null, no judge.json",
    "sup_status_running": "edge cell 15: result.json sup_status 'running'",
    "error-null": "next edge cell: cached-result.json has error null and a good artifact",
    "result-json-missing": "next edge cell: its run dir has no result.json (its sessions exist)",
    "result-json-corrupt": "next edge cell: its result.json is not valid JSON (its sessions exist)",
    "baseline-commit-order": "the first baseline cell by (scenarioId, rep) has its own commit and a "
    "'zz-rerun-' directory that sorts last; other_path = the first baseline cell in directory order",
    "transcript_outside_window": "shot slot 0: other_path = a second transcript in the same worktree "
    "starting 3 h after the candidate's last shot",
    "timed_out_shot": "shot slot 0: timedOut true, exitCode 124",
    "receipt_without_timestamps": "shot slot 1, author 'cedar' (own worktree): no startedAt/completedAt, "
    "exactly one transcript",
    "missing_transcript_folder": "shot slot 2, author 'dune' (own worktree): no Claude project folder",
    "candidate_without_patch": "the candidate of shot slot 2: other_path = the absent candidates/<commit10>.patch",
    "receipt_not_json": "shot slot 3: the receipt is truncated JSON; its transcript exists",
    "flat_receipt": "the first flat receipt (proposer-shots/gen<g>-cand<i>-shot<s>.json) that is valid JSON",
    "per_author_receipt": "the first per-author receipt that is valid JSON",
    "cost_ledger_garbage_line": "every round: the last line of improve-run/cost-ledger.jsonl (other_path)",
    "empty-claude-transcript": "next shot slot: its only transcript holds an image-only user line",
    "sidechain-only-file": "next shot slot, author 'ember' (own worktree): no timestamps; one transcript "
    "plus other_path = agent-<id>.jsonl holding isSidechain lines only",
    "empty-thinking-first-block": "next shot slot: the transcript's first API message starts with an "
    "empty thinking line followed by a text line with the same id and usage",
    "synthetic-model": "next shot slot: the transcript's last assistant line has model '<synthetic>'",
}

# Dedicated authors give a case its own worktree so no other shot's transcript can land beside it.
_OWN_WORKTREE_AUTHORS = {
    "receipt_without_timestamps": "cedar",
    "missing_transcript_folder": "dune",
    "sidechain-only-file": "ember",
}

_CELL_CASES = (
    "non_ascii_text",
    "cwd_listed_twice",
    "cwd_with_two_sessions",
    "cwd_without_session",
    "session_without_messages",
    "session_with_only_malformed_messages",
    "malformed_part",
    "malformed_message",
    "very_long_tool_output",
    "non_string_tool_output",
    "half_second_wall_time",
    "non_string_worker_cwd",
    "errored_cell",
    "composite_judge_score",
    "cell_without_reward",
    "sup_status_running",
)
_CELL_FIXES = ("error-null", "result-json-missing", "result-json-corrupt")
_SHOT_CASE_GROUPS = (
    ("transcript_outside_window", "timed_out_shot"),
    ("receipt_without_timestamps",),
    ("missing_transcript_folder", "candidate_without_patch"),
    ("receipt_not_json",),
)
_SHOT_FIX_GROUPS = (
    ("empty-claude-transcript",),
    ("sidechain-only-file",),
    ("empty-thinking-first-block",),
    ("synthetic-model",),
)


@dataclass(frozen=True)
class SessionShape:
    """The planted defects of one worker session (all False: a clean session)."""

    no_messages: bool = False
    only_malformed_messages: bool = False
    malformed_part: bool = False
    malformed_message: bool = False
    long_tool_output: bool = False
    object_tool_output: bool = False
    half_second_wall: bool = False


SESSION_SHAPES = {
    "session_without_messages": SessionShape(no_messages=True),
    "session_with_only_malformed_messages": SessionShape(only_malformed_messages=True),
    "malformed_part": SessionShape(malformed_part=True),
    "malformed_message": SessionShape(malformed_message=True),
    "very_long_tool_output": SessionShape(long_tool_output=True),
    "non_string_tool_output": SessionShape(object_tool_output=True),
    "half_second_wall_time": SessionShape(half_second_wall=True),
}


def session_shape(cases: set[str]) -> SessionShape:
    """The defects of a cell's first worker session, from the cell's cases."""
    for case, shape in SESSION_SHAPES.items():
        if case in cases:
            return shape
    return SessionShape()


def plant_cases(plan: RoundPlan) -> None:
    """Mark the cells and shots of `plan` that carry a case; a spec too small for its cases raises."""
    spec = plan.spec
    if spec.edge_cases or spec.fixes:
        _assign_cell_cases(plan)
        _assign_shot_cases(plan)
    if "baseline-commit-order" in spec.fixes:
        _plant_baseline_commit_order(plan)


def _sort_key(cell: Cell) -> tuple[str, int]:
    return (cell.scenario_id, cell.rep)


def _edge_pool(plan: RoundPlan) -> list[Cell]:
    """Candidate cells in campaign order, then baseline cells except the first by (scenarioId, rep)."""
    baseline = sorted((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    candidates = [c for c in plan.cells if not c.campaign.is_baseline]
    by_campaign: dict[str, list[Cell]] = {}
    for cell in candidates:
        by_campaign.setdefault(cell.campaign.rel_dir, []).append(cell)
    ordered = [cell for cells in by_campaign.values() for cell in sorted(cells, key=_sort_key)]
    return ordered + baseline[1:]


def _assign_cell_cases(plan: RoundPlan) -> None:
    spec = plan.spec
    wanted = list(_CELL_CASES) if spec.edge_cases else []
    wanted += [fix for fix in _CELL_FIXES if fix in spec.fixes]
    pool = _edge_pool(plan)
    if len(wanted) > len(pool):
        raise ValueError(
            f"round {spec.name}: its cases need {len(wanted)} cells beside the first baseline cell, "
            f"the spec gives {len(pool)}; raise instances, reps or candidates"
        )
    for case, cell in zip(wanted, pool):
        cell.cases.add(case)
        plan.case_cells[case] = cell


def _assign_shot_cases(plan: RoundPlan) -> None:
    spec = plan.spec
    groups = list(_SHOT_CASE_GROUPS) if spec.edge_cases else []
    groups += [group for group in _SHOT_FIX_GROUPS if group[0] in spec.fixes]
    candidates = spec.generations * spec.candidates_per_generation
    if len(groups) > len(plan.shots):
        raise ValueError(
            f"round {spec.name}: its shot cases need {len(groups)} proposer shots, the spec gives "
            f"{len(plan.shots)}; raise shots_per_candidate or candidates"
        )
    for slot, group in enumerate(groups):
        candidate, shot_number = slot % candidates, slot // candidates
        shot = plan.shots[candidate * spec.shots_per_candidate + shot_number]
        for case in group:
            shot.cases.add(case)
            plan.case_shots[case] = shot
            if case in _OWN_WORKTREE_AUTHORS:
                shot.author = _OWN_WORKTREE_AUTHORS[case]


def _plant_baseline_commit_order(plan: RoundPlan) -> None:
    """The first baseline cell by (scenarioId, rep) gets its own commit and sorts last by name."""
    first = min((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    first.dir_name = f"zz-rerun-{first.dir_name}"
    first.commit = commit_sha(plan.tag, "baseline", "rerun")
    first.cases.add("baseline-commit-order")
    plan.case_cells["baseline-commit-order"] = first


# Cell cases whose site names a worker cwd (beside the session shapes): its sessions are the point.
_CWD_CASES = {
    "non_ascii_text",
    "cwd_listed_twice",
    "cwd_with_two_sessions",
    "cwd_without_session",
    "result-json-missing",
    "result-json-corrupt",
}


def _cell_site(plan: RoundPlan, case: str, cell: Cell) -> EdgeCaseSite:
    workers = plan.spec.workers_per_cell
    worker = workers - 1 if case == "cwd_without_session" else 0
    session_case = case in SESSION_SHAPES or case in _CWD_CASES
    other = None
    if case == "baseline-commit-order":
        baseline = [c for c in plan.cells if c.campaign.is_baseline]
        other = plan.cell_dir(min(baseline, key=lambda c: c.dir_name))
    elif case in {
        "result-json-missing",
        "result-json-corrupt",
        "sup_status_running",
        "non_string_worker_cwd",
    }:
        other = plan.run_dir(cell) / "result.json"
    return EdgeCaseSite(
        case=case,
        campaign_dir=plan.campaign_dir(cell.campaign),
        cell_dir=plan.cell_dir(cell),
        run_dir=None if case == "errored_cell" else plan.run_dir(cell),
        worker_cwd=plan.worker_cwd(cell, worker) if session_case else None,
        other_path=other,
    )


def _shot_site(plan: RoundPlan, case: str, shot: Shot) -> EdgeCaseSite:
    other = None
    if case == "transcript_outside_window":
        other = plan.transcript_path(shot, "late")
    elif case == "sidechain-only-file":
        other = plan.transcript_path(shot, "sidechain")
    elif case == "candidate_without_patch":
        other = plan.candidate_patch(plan.campaign_of(shot.generation, shot.candidate_index))
    has_transcript = "missing_transcript_folder" not in shot.cases
    return EdgeCaseSite(
        case=case,
        campaign_dir=plan.campaign_dir(plan.campaign_of(shot.generation, shot.candidate_index)),
        receipt_path=plan.receipt_path(shot),
        worktree=plan.worktree(shot),
        transcript_path=plan.transcript_path(shot) if has_transcript else None,
        other_path=other,
    )


def case_sites(plan: RoundPlan) -> dict[str, EdgeCaseSite]:
    """Every planted case of `plan` by name, with the paths where it lands (pure: reads nothing)."""
    sites = {case: _cell_site(plan, case, cell) for case, cell in plan.case_cells.items()}
    sites.update({case: _shot_site(plan, case, shot) for case, shot in plan.case_shots.items()})
    readable = [s for s in plan.shots if "receipt_not_json" not in s.cases]
    flat = next((s for s in readable if s.author is None), None)
    authored = next((s for s in readable if s.author is not None), None)
    if flat is not None:
        sites["flat_receipt"] = _shot_site(plan, "flat_receipt", flat)
    if authored is not None:
        sites["per_author_receipt"] = _shot_site(plan, "per_author_receipt", authored)
    ledger = plan.out_dir / "improve-run" / "cost-ledger.jsonl"
    sites["cost_ledger_garbage_line"] = EdgeCaseSite(case="cost_ledger_garbage_line", other_path=ledger)
    return sites
