"""Where each planted case lands in a written round: `case_sites` gives every case of a plan
with its paths (pure: reads nothing). The catalogue and its assignment are planted.py's."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rollout_assets.demo.planted import SESSION_SHAPES
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


# Shot cases whose other_path is a second file of the shot's project folder: its variant.
_OTHER_TRANSCRIPTS = {
    "transcript_outside_window": "late",
    "sidechain-only-file": "sidechain",
    "agent-file-of-another-session": "sidechain",
    "subagents-folder": "subagents",
    "tied-transcripts": "tied",
    "edge-of-window-transcript": "past-window",
    "truncated-transcript-line": "cut",
}


def _shot_site(plan: RoundPlan, case: str, shot: Shot) -> EdgeCaseSite:
    other = None
    if case in _OTHER_TRANSCRIPTS:
        other = plan.transcript_path(shot, _OTHER_TRANSCRIPTS[case])
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
    if "planted_secrets" in plan.case_cells:
        # One site for both halves: the worker session's cell and the proposer shot's transcript.
        shot = _shot_site(plan, "planted_secrets", plan.case_shots["planted_secrets"])
        sites["planted_secrets"] = replace(
            _cell_site(plan, "planted_secrets", plan.case_cells["planted_secrets"]),
            receipt_path=shot.receipt_path,
            worktree=shot.worktree,
            transcript_path=shot.transcript_path,
        )
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
