"""The planted edge cases: their names, which cells and shots carry them, and where they land.

OWNS the catalogue (the table below, FIX_CASES, EDGE_CASE_LOCATIONS), its assignment to a
round's plan (`plant_cases`) and the session defects it implies (`SessionShape`); where each
case lands in a written round is case_sites.py's. The writers (cells.py, opencode_store.py,
shots.py, claude_transcripts.py) read a cell's or shot's `cases` and plant accordingly.

## Edge cases (`edge_cases=True`) and optional cases (`fixes`)

Cell cases go, one each, to the cells of the round's *edge pool* in the order of the table: the
candidate campaigns in (generation, candidate) order, each one's cells sorted by
(scenarioId, rep), then the baseline cells except its first by (scenarioId, rep) (and its second,
which `duplicate-transcripts` takes). Session cases sit on the cell's worker cwd `w0`
(`cwd_without_session`: the cell's last worker cwd). Shot cases
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
| `system-prompt` (fix) | next edge cell: every assistant message of `w0` keeps `system` (a list of strings, older opencode) | 003 gen-1/candidate-0/django__django-11532__rep1 |
| `ignored-parts` (fix) | next edge cell: `w0`'s prompt also holds a text/plain `file` part (after its synthetic Read texts); after the answer, a user message of one `ignored: true` text part (a plugin's status) | 003 gen-1/candidate-0/pytest-dev__pytest-5103__rep0 |
| `multi-tool-step` (fix) | next edge cell: `w0`'s first step holds two tool parts | 003 gen-1/candidate-0/pytest-dev__pytest-5103__rep1 |
| `ids-times-disagree` (fix) | next edge cell: `w0`'s prompt has an id made 90 s ahead of its time_created (a client's clock), so ids do not sort in time order | 003 gen-1/candidate-0/sympy__sympy-20590__rep0 |
| `planted_secrets` | the edge cell after the fixes': `w0`'s first tool call lists its environment (AWS key id and secret, a database URL's password, Slack and Stripe tokens) after a command with a GitHub token in a remote URL; slot 1's transcript reads `.env` (Anthropic, OpenAI keys) and a PEM key and runs `mysql -p<password>` (leaks.py) | 001 gen-1/candidate-0/sympy__sympy-20590__rep0 |
| `baseline-commit-order` (fix) | first baseline cell by (scenarioId, rep): own commit, dir sorts last | 003 baseline/zz-rerun-astropy__astropy-12907__rep0 |
| `duplicate-transcripts` (fix) | second baseline cell by (scenarioId, rep), out of the edge pool: resolved (composite 1.0); `w0` and `w1` were given one subtask and answered it in one identical text step | 003 baseline/astropy__astropy-12907__rep1 |
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
| `agent-file-of-another-session` (fix) | next slot (its worktree must hold another shot): its Task sub-agent in `agent-<id>.jsonl` beside the worktree's other sessions, naming its session | 003 gen0-cand0-shot2.json |
| `subagents-folder` (fix) | next slot: its Task sub-agent in `<session id>/subagents/agent-<id>.jsonl` (2.1.x) | 003 atlas/gen0-cand1-shot2.json |
| `streamed-usage` (fix) | next slot: 1.0.x lines, a block line before an id's last carries partial `output_tokens` | 003 gen1-cand0-shot2.json |
| `tied-transcripts` (fix) | next slot: a 2nd session starting as far before the shot's start as its own after it | 003 birch/gen1-cand1-shot2.json |
| `edge-of-window-transcript` (fix) | next slot: its session starts at startedAt - 120 s; a 2nd one at completedAt + 120 s + 1 ms | 003 gen0-cand0-shot3.json |
| `truncated-transcript-line` (fix) | next slot (own worktree): no timestamps, exit 137; its session's last line cut mid-write; a 2nd file of one cut line | 003 fern/gen0-cand1-shot3.json |
| `timed-out-exit-zero` (fix) | next slot: `timedOut: true` yet `exitCode: 0`, `error` an object (agent-runtime's receipt) | 003 gen1-cand0-shot3.json |
| `repeated-transcript-lines` (fix) | next slot: its session's last user line and last assistant line written again at its end, same uuids and times (an editor reopening the session) | 003 birch/gen1-cand1-shot3.json |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rollout_assets.demo.ids import commit_sha
from rollout_assets.demo.round_plan import Cell, RoundPlan


FIX_CASES: frozenset[str] = frozenset(
    {
        "empty-claude-transcript",
        "empty-thinking-first-block",
        "error-null",
        "sidechain-only-file",
        "synthetic-model",
        "agent-file-of-another-session",
        "subagents-folder",
        "streamed-usage",
        "tied-transcripts",
        "edge-of-window-transcript",
        "truncated-transcript-line",
        "baseline-commit-order",
        "result-json-missing",
        "result-json-corrupt",
        "system-prompt",
        "ignored-parts",
        "multi-tool-step",
        "ids-times-disagree",
        "duplicate-transcripts",
        "timed-out-exit-zero",
        "repeated-transcript-lines",
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
    "system-prompt": "next edge cell: every assistant message of w0's session carries `system`, the "
    "list of system messages opencode sent",
    "ignored-parts": "next edge cell: w0's prompt message also holds a text/plain file part after the "
    "synthetic Read texts opencode made of it; after the answer, a user message holding one text part "
    "marked ignored (a plugin's status message)",
    "multi-tool-step": "next edge cell: the first step of w0's session holds two tool parts",
    "ids-times-disagree": "next edge cell: the id of w0's prompt message was made 90 s ahead of its "
    "time_created, so it sorts after the assistant messages that follow it",
    "duplicate-transcripts": "the second baseline cell by (scenarioId, rep), left out of the edge pool: "
    "resolved with composite 1.0; its two workers (worker_cwd = w0) were given the same subtask and "
    "each answered in one step of the same text, no tool call",
    "planted_secrets": "the edge cell after the fixes' (worker_cwd = w0): the first tool call of w0's "
    "session runs a command with a GitHub token in a remote URL and prints an environment holding an AWS "
    "key id and secret, a database URL with a password, a Slack and a Stripe token; and shot slot 1 "
    "(transcript_path): its proposer reads .env (an Anthropic and an OpenAI key) and a PEM private key, "
    "and runs mysql with -p<password>. The values are drawn from the round's seed (leaks.py)",
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
    "agent-file-of-another-session": "next shot slot, in a worktree holding another shot's session: its "
    "Task sub-agent's lines in other_path = agent-<id>.jsonl beside both sessions, naming its own sessionId",
    "subagents-folder": "next shot slot: its Task sub-agent's lines in other_path = "
    "<session id>/subagents/agent-<id>.jsonl (Claude Code 2.1.x), none inline",
    "streamed-usage": "next shot slot: its transcript is 1.0.x, written as it streamed: every block line "
    "of an API message but the last carries a partial output_tokens, growing from 1",
    "tied-transcripts": "next shot slot: other_path = a second session of its worktree starting as long "
    "before the receipt's startedAt as the shot's own session after it",
    "edge-of-window-transcript": "next shot slot: its session starts exactly 120 s before startedAt; "
    "other_path = a second session starting 120 s + 1 ms after completedAt",
    "truncated-transcript-line": "next shot slot, author 'fern' (own worktree): no timestamps, exitCode "
    "137; its transcript's last line is cut mid-write (no newline); other_path = a session file "
    "whose only line is cut",
    "timed-out-exit-zero": "next shot slot: the receipt has timedOut true, exitCode 0, killedBySignal "
    "null and error as an object {name, message}, as tangle-network/agent-runtime writes a shot its "
    "deadline stopped after its agent exited cleanly on SIGTERM",
    "repeated-transcript-lines": "next shot slot: its session file ends with its last main-thread user "
    "line (the commit's tool result) and its last assistant line written again, the same uuids and time "
    "stamps, as Claude Code appends lines it already wrote when VS Code reopens a session",
}

# Dedicated authors give a case its own worktree so no other shot's transcript can land beside it.
_OWN_WORKTREE_AUTHORS = {
    "receipt_without_timestamps": "cedar",
    "missing_transcript_folder": "dune",
    "sidechain-only-file": "ember",
    "truncated-transcript-line": "fern",
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
_CELL_FIXES = (
    "error-null",
    "result-json-missing",
    "result-json-corrupt",
    "system-prompt",
    "ignored-parts",
    "multi-tool-step",
    "ids-times-disagree",
)
# After the fixes, so that every cell before keeps its case with or without it.
_LAST_CELL_CASES = ("planted_secrets",)
_SHOT_CASE_GROUPS = (
    ("transcript_outside_window", "timed_out_shot"),
    ("receipt_without_timestamps", "planted_secrets"),
    ("missing_transcript_folder", "candidate_without_patch"),
    ("receipt_not_json",),
)
_SHOT_FIX_GROUPS = (
    ("empty-claude-transcript",),
    ("sidechain-only-file",),
    ("empty-thinking-first-block",),
    ("synthetic-model",),
    ("agent-file-of-another-session",),
    ("subagents-folder",),
    ("streamed-usage",),
    ("tied-transcripts",),
    ("edge-of-window-transcript",),
    ("truncated-transcript-line",),
    ("timed-out-exit-zero",),
    ("repeated-transcript-lines",),
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
    system_prompt: bool = False  # every assistant message keeps `system` (older opencode)
    ignored_parts: bool = False  # a text/plain file in the prompt; a plugin's ignored status message
    multi_tool_step: bool = False  # the first step calls two tools
    client_message_id: bool = False  # the prompt's id was made on a clock 90 s ahead
    answer_only: bool = False  # one step: a fixed text answer, no tool call
    subtask: int | None = None  # the subtask given (None: the worker's own)
    leaked_secrets: bool = False  # the first tool call leaks the round's secrets (leaks.py)


SESSION_SHAPES = {
    "session_without_messages": SessionShape(no_messages=True),
    "session_with_only_malformed_messages": SessionShape(only_malformed_messages=True),
    "malformed_part": SessionShape(malformed_part=True),
    "malformed_message": SessionShape(malformed_message=True),
    "very_long_tool_output": SessionShape(long_tool_output=True),
    "non_string_tool_output": SessionShape(object_tool_output=True),
    "half_second_wall_time": SessionShape(half_second_wall=True),
    "system-prompt": SessionShape(system_prompt=True),
    "ignored-parts": SessionShape(ignored_parts=True),
    "multi-tool-step": SessionShape(multi_tool_step=True),
    "ids-times-disagree": SessionShape(client_message_id=True),
    "duplicate-transcripts": SessionShape(answer_only=True),
    "planted_secrets": SessionShape(leaked_secrets=True),
}


def session_shape(cases: set[str], worker: int = 0) -> SessionShape:
    """The defects of a cell's worker session `worker`, from the cell's cases: only the first
    worker's session carries one, but for `duplicate-transcripts`, whose second worker was given
    the first one's subtask and answered it word for word."""
    if worker == 1 and "duplicate-transcripts" in cases:
        return SessionShape(answer_only=True, subtask=0)
    if worker != 0:
        return SessionShape()
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
    if "duplicate-transcripts" in spec.fixes:
        _plant_duplicate_transcripts(plan)


def _sort_key(cell: Cell) -> tuple[str, int]:
    return (cell.scenario_id, cell.rep)


def _edge_pool(plan: RoundPlan) -> list[Cell]:
    """Candidate cells in campaign order, then baseline cells except the first by (scenarioId, rep)
    (and the second, when `duplicate-transcripts` takes it)."""
    baseline = sorted((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    candidates = [c for c in plan.cells if not c.campaign.is_baseline]
    by_campaign: dict[str, list[Cell]] = {}
    for cell in candidates:
        by_campaign.setdefault(cell.campaign.rel_dir, []).append(cell)
    ordered = [cell for cells in by_campaign.values() for cell in sorted(cells, key=_sort_key)]
    return ordered + baseline[2 if "duplicate-transcripts" in plan.spec.fixes else 1 :]


def _assign_cell_cases(plan: RoundPlan) -> None:
    spec = plan.spec
    wanted = list(_CELL_CASES) if spec.edge_cases else []
    wanted += [fix for fix in _CELL_FIXES if fix in spec.fixes]
    wanted += list(_LAST_CELL_CASES) if spec.edge_cases else []
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
    _refuse_a_lone_agent_file_shot(plan)


def _refuse_a_lone_agent_file_shot(plan: RoundPlan) -> None:
    """`agent-file-of-another-session` needs a second session in its shot's worktree: another
    shot there with a transcript."""
    shot = plan.case_shots.get("agent-file-of-another-session")
    if shot is None:
        return
    others = [
        other
        for other in plan.shots
        if other is not shot
        and plan.worktree(other) == plan.worktree(shot)
        and "missing_transcript_folder" not in other.cases
    ]
    if not others:
        raise ValueError(
            f"round {plan.spec.name}: agent-file-of-another-session needs another shot in the worktree "
            f"of {plan.receipt_path(shot).name}; raise shots_per_candidate"
        )


def _plant_baseline_commit_order(plan: RoundPlan) -> None:
    """The first baseline cell by (scenarioId, rep) gets its own commit and sorts last by name."""
    first = min((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    first.dir_name = f"zz-rerun-{first.dir_name}"
    first.commit = commit_sha(plan.tag, "baseline", "rerun")
    first.cases.add("baseline-commit-order")
    plan.case_cells["baseline-commit-order"] = first


def _plant_duplicate_transcripts(plan: RoundPlan) -> None:
    """The second baseline cell by (scenarioId, rep): early in the ledger, so that the first of its
    two identical worker answers is kept (best reward, then ledger order) and the second is the
    duplicate."""
    baseline = sorted((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    if len(baseline) < 2 or plan.spec.workers_per_cell < 2:
        raise ValueError(
            f"round {plan.spec.name}: duplicate-transcripts needs two baseline cells of two workers each; "
            "raise instances, reps or workers_per_cell"
        )
    baseline[1].cases.add("duplicate-transcripts")
    plan.case_cells["duplicate-transcripts"] = baseline[1]
