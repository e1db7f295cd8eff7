"""Demo rounds: deterministic, realistic round outDirs plus the harness stores they point at.

OWNS the sample INPUTS only (formats: spec/inputs.md). Under one ROOT it writes:

    ROOT/rounds/<name>/          one round outDir per RoundSpec (improve-run/, runs/, patches/,
                                 candidates/, proposer-shots/)
    ROOT/opencode.db             the opencode store holding the worker sessions of every round
    ROOT/claude-projects/        Claude Code project folders holding the proposer transcripts
    ROOT/worker-clones/...       NOT written: worker cwds are only names, as in a real store

It imports no other `rollout_assets` module and reads nothing back: a reader bug cannot shape
its own fixture. Stdlib only.

Determinism: the same root path and specs give the same bytes, modulo the root path itself
(and its Claude slug). Times start at 2026-11-02T09:00:00.000Z plus a per-round day offset taken
from a hash of the round name; random values come from `random.Random(spec.seed)`, drawn in a
fixed order (so any new draw changes every later value: the golden ledger test notices); every id
is a hash of round-relative names or a zero-padded counter. Nothing reads the clock or uuid4.

DEFAULT_ROUNDS (what `rollout-assets demo ROOT` writes): round-001, small, every edge case;
round-002, larger and clean (no edge cases); round-003, every edge case plus every FIX_CASES name.

Scale: files are streamed cell by cell, the opencode rows go in through `executemany` in chunks
inside one transaction per round, and nothing is quadratic in the number of cells.

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

import hashlib
import json
import random
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


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
    edge_cases: bool = True  # plant every edge case of the module docstring
    fixes: frozenset[str] = frozenset()  # optional extra cases, names in FIX_CASES
    seed: int = 0


@dataclass(frozen=True)
class DemoLayout:
    """Where `write_demo` put things; every path is absolute."""

    root: Path
    rounds_root: Path  # ROOT/rounds
    opencode_db: Path  # ROOT/opencode.db
    claude_projects_dir: Path  # ROOT/claude-projects
    rounds: tuple[Path, ...]  # the outDir of every round written by this call

    def environment(self, ledger_root: Path) -> dict[str, str]:
        """The variables that point the Dagster project's resources at this demo, writing
        ledgers under `ledger_root` (what scripts/env.sh sets for ./demo)."""
        return {
            "ROLLOUT_ROUNDS_ROOT": str(self.rounds_root),
            "OPENCODE_DB": str(self.opencode_db),
            "CLAUDE_PROJECTS_DIR": str(self.claude_projects_dir),
            "ROLLOUT_LEDGER_ROOT": str(ledger_root),
        }


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


def write_demo(
    root: Path | str,
    rounds: Sequence[RoundSpec] = DEFAULT_ROUNDS,
    *,
    legacy_opencode_schema: bool = False,
) -> DemoLayout:
    """Write `rounds` under `root`, appending to the root's opencode store and Claude projects.

    Everything is checked before anything is written: a round whose directory exists, two
    specs with one name, a spec too small for its edge cases, or an existing store of the
    other schema raise ValueError.
    """
    root_path = Path(root).resolve()
    plans = [_plan_round(root_path, spec) for spec in rounds]
    _refuse_existing_rounds(plans)
    layout = DemoLayout(
        root=root_path,
        rounds_root=root_path / "rounds",
        opencode_db=root_path / "opencode.db",
        claude_projects_dir=root_path / "claude-projects",
        rounds=tuple(plan.out_dir for plan in plans),
    )
    _check_store_schema(layout.opencode_db, legacy_opencode_schema)
    layout.rounds_root.mkdir(parents=True, exist_ok=True)
    layout.claude_projects_dir.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(layout.opencode_db)
    try:
        # A 64 MB page cache keeps a large round's index pages in memory; without fsyncs, each
        # spill of that cache costs a write, not a disk flush. A demo store that an OS crash
        # could damage is regenerated, never repaired.
        connection.execute("PRAGMA cache_size = -65536")
        connection.execute("PRAGMA synchronous = OFF")
        _create_store_schema(connection, legacy_opencode_schema)
        for plan in plans:
            _write_round(plan, connection, legacy_opencode_schema)
    finally:
        connection.close()
    return layout


def edge_case_sites(root: Path | str, spec: RoundSpec) -> dict[str, EdgeCaseSite]:
    """The planted cases of round `spec` under `root`, by case name (pure: reads nothing)."""
    return _sites(_plan_round(Path(root).resolve(), spec))


# ---------------------------------------------------------------------------
# Constants of the simulated world
# ---------------------------------------------------------------------------

BASE_TIME = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BASE_TIME_MS = (BASE_TIME - _EPOCH) // timedelta(milliseconds=1)
_SECOND = 1000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR

OFFICIAL_JUDGE = "swe-arena-official-judge"
NON_ASCII_SAMPLE = "naïve café — 日本語 ✓"
SUPERVISOR_MODEL = "claude-sonnet-4-5"
PROPOSER_MODEL = "claude-opus-4-1-20250805"
PROPOSER_RECEIPT_MODEL = "claude-opus-4-1"
SYNTHETIC_MODEL = "<synthetic>"
WORKER_MODELS = (("claude-sonnet-4-5", "anthropic"), ("qwen3-coder", "openrouter"))
CLAUDE_CODE_VERSION = "2.0.31"

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

# Authors of per-author receipts: the base ones alternate over candidates; the dedicated ones
# give a case its own worktree so no other shot's transcript can land beside it.
_BASE_AUTHORS = ("atlas", "birch")
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

_CELL_STAGGER = 9 * _SECOND  # one cell starts every 9 s within a campaign
_SHOT_SPACING = 20 * _MINUTE  # longer than a shot (<= 15 min) plus both window margins
_LATE_TRANSCRIPT_GAP = 3 * _HOUR
_TIMED_OUT_MS = 15 * _MINUTE
_LONG_OUTPUT_LINES = 3300  # ~66 bytes a line: > 200 kB


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def _compact_file(value: Any) -> str:
    """Per-cell files are compact: indenting tens of thousands of them costs more than writing them."""
    return _compact(value) + "\n"


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _commit_sha(*parts: object) -> str:
    return hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()


def _uuid(*parts: object) -> str:
    h = _digest(*parts)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def _iso(ms: int) -> str:
    moment = _EPOCH + timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _claude_slug(cwd: str) -> str:
    """Claude Code's project-folder name for a cwd: every char outside [A-Za-z0-9-] becomes '-'."""
    return _SLUG_UNSAFE.sub("-", cwd)


def _write_text(path: Path, text: str) -> None:
    """Write a file, creating its folder; hot paths create folders once and call `_write_file`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_file(path, text)


def _write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


# ---------------------------------------------------------------------------
# Planning: the structure of a round, without random values (edge_case_sites reuses it)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Campaign:
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
class _Cell:
    campaign: _Campaign
    scenario_id: str
    touched_file: str
    rep: int
    dir_name: str
    commit: str
    start_ms: int
    cases: set[str] = field(default_factory=set)

    @property
    def cell_id(self) -> str:
        return f"{self.campaign.run_name}:{self.scenario_id}:rep{self.rep}"


@dataclass
class _Shot:
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
class _RoundPlan:
    spec: RoundSpec
    root: Path
    out_dir: Path
    tag: str  # short hash of the round name: keeps ids unique across rounds in one store
    run_id: str
    start_ms: int
    campaigns: list[_Campaign]
    cells: list[_Cell]  # campaign order, then directory-creation order
    shots: list[_Shot]
    case_cells: dict[str, _Cell] = field(default_factory=dict)
    case_shots: dict[str, _Shot] = field(default_factory=dict)

    # Paths, all derived from the absolute outDir.
    def campaign_dir(self, campaign: _Campaign) -> Path:
        return self.out_dir / campaign.rel_dir

    def cell_dir(self, cell: _Cell) -> Path:
        return self.campaign_dir(cell.campaign) / cell.dir_name

    def run_dir(self, cell: _Cell) -> Path:
        return self.out_dir / "runs" / cell.campaign.run_name / cell.dir_name

    def patch_path(self, cell: _Cell) -> Path:
        return self.out_dir / "patches" / cell.campaign.run_name / f"{cell.dir_name}.patch"

    def worker_cwd(self, cell: _Cell, worker: int) -> str:
        clones = self.root / "worker-clones" / self.spec.name / cell.campaign.run_name / cell.dir_name
        return str(clones / f"w{worker}")

    def candidate_patch(self, campaign: _Campaign) -> Path:
        return self.out_dir / "candidates" / f"{campaign.commit[:10]}.patch"

    def receipt_path(self, shot: _Shot) -> Path:
        name = f"{shot.candidate_id}-shot{shot.shot}.json"
        folder = self.out_dir / "proposer-shots"
        return folder / shot.author / name if shot.author else folder / name

    def worktree(self, shot: _Shot) -> Path:
        suffix = f"-{shot.author}" if shot.author else ""
        return self.out_dir / "proposer-wt" / f"{shot.candidate_id}{suffix}"

    def claude_folder(self, shot: _Shot) -> Path:
        return self.root / "claude-projects" / _claude_slug(str(self.worktree(shot)))

    def transcript_path(self, shot: _Shot, variant: str = "main") -> Path:
        session_id = _uuid(self.tag, shot.candidate_id, shot.author, shot.shot, variant)
        name = f"agent-{session_id[:8]}.jsonl" if variant == "sidechain" else f"{session_id}.jsonl"
        return self.claude_folder(shot) / name

    def campaign_of(self, generation: int, candidate_index: int) -> _Campaign:
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


def _plan_round(root: Path, spec: RoundSpec) -> _RoundPlan:
    _validate_spec(spec)
    out_dir = root / "rounds" / spec.name
    tag = _digest("round", spec.name)[:6]
    start_ms = BASE_TIME_MS + (int(_digest("day", spec.name)[:6], 16) % 28) * _DAY
    plan = _RoundPlan(
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
    if spec.edge_cases or spec.fixes:
        _assign_cell_cases(plan)
        _assign_shot_cases(plan)
    if "baseline-commit-order" in spec.fixes:
        _plant_baseline_commit_order(plan)
    return plan


def _plan_timeline(plan: _RoundPlan) -> None:
    """Baseline first; then per generation: its proposer shots, then its candidates' campaigns."""
    spec = plan.spec
    instances = _instance_ids(spec.instances)
    cells_per_campaign = spec.instances * spec.reps
    campaign_span = cells_per_campaign * _CELL_STAGGER + 2 * _HOUR
    shots_per_generation = spec.candidates_per_generation * spec.shots_per_candidate
    propose_span = shots_per_generation * _SHOT_SPACING + _LATE_TRANSCRIPT_GAP + _HOUR
    generation_span = propose_span + spec.candidates_per_generation * campaign_span

    campaign_slots = [(-1, -1, plan.start_ms)]
    for g in range(spec.generations):
        block = plan.start_ms + campaign_span + g * generation_span
        for i in range(spec.candidates_per_generation):
            first_shot = block + i * spec.shots_per_candidate * _SHOT_SPACING
            late = first_shot + spec.shots_per_candidate * _SHOT_SPACING + _LATE_TRANSCRIPT_GAP
            author = None if (g * spec.candidates_per_generation + i) % 2 == 0 else _BASE_AUTHORS[g % 2]
            for s in range(spec.shots_per_candidate):
                plan.shots.append(_Shot(g, i, s, author, first_shot + s * _SHOT_SPACING, late))
            campaign_slots.append((g, i, block + propose_span + i * campaign_span))

    for generation, candidate_index, campaign_start in campaign_slots:
        if generation == -1:
            rel_dir, run_name = "improve-run/baseline", "baseline"
        else:
            rel_dir = f"improve-run/gen-{generation}/candidate-{candidate_index}"
            run_name = f"gen-{generation}-candidate-{candidate_index}"
        campaign = _Campaign(
            generation, candidate_index, rel_dir, run_name, _commit_sha(plan.tag, run_name), campaign_start
        )
        plan.campaigns.append(campaign)
        for n, (scenario_id, touched) in enumerate(
            (sid, f) for sid, f in instances for _ in range(spec.reps)
        ):
            rep = n % spec.reps
            plan.cells.append(
                _Cell(
                    campaign=campaign,
                    scenario_id=scenario_id,
                    touched_file=touched,
                    rep=rep,
                    dir_name=f"{scenario_id}__rep{rep}",
                    commit=campaign.commit,
                    start_ms=campaign_start + n * _CELL_STAGGER,
                )
            )


def _sort_key(cell: _Cell) -> tuple[str, int]:
    return (cell.scenario_id, cell.rep)


def _edge_pool(plan: _RoundPlan) -> list[_Cell]:
    """Candidate cells in campaign order, then baseline cells except the first by (scenarioId, rep)."""
    baseline = sorted((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    candidates = [c for c in plan.cells if not c.campaign.is_baseline]
    by_campaign: dict[str, list[_Cell]] = {}
    for cell in candidates:
        by_campaign.setdefault(cell.campaign.rel_dir, []).append(cell)
    ordered = [cell for cells in by_campaign.values() for cell in sorted(cells, key=_sort_key)]
    return ordered + baseline[1:]


def _assign_cell_cases(plan: _RoundPlan) -> None:
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


def _assign_shot_cases(plan: _RoundPlan) -> None:
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


def _plant_baseline_commit_order(plan: _RoundPlan) -> None:
    """The first baseline cell by (scenarioId, rep) gets its own commit and sorts last by name."""
    first = min((c for c in plan.cells if c.campaign.is_baseline), key=_sort_key)
    first.dir_name = f"zz-rerun-{first.dir_name}"
    first.commit = _commit_sha(plan.tag, "baseline", "rerun")
    first.cases.add("baseline-commit-order")
    plan.case_cells["baseline-commit-order"] = first


# ---------------------------------------------------------------------------
# Edge-case sites (pure, from the plan)
# ---------------------------------------------------------------------------


# Cell cases whose site names a worker cwd (beside the session shapes): its sessions are the point.
_CWD_CASES = {
    "non_ascii_text",
    "cwd_listed_twice",
    "cwd_with_two_sessions",
    "cwd_without_session",
    "result-json-missing",
    "result-json-corrupt",
}


def _cell_site(plan: _RoundPlan, case: str, cell: _Cell) -> EdgeCaseSite:
    workers = plan.spec.workers_per_cell
    worker = workers - 1 if case == "cwd_without_session" else 0
    session_case = case in _SESSION_SHAPES or case in _CWD_CASES
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


def _shot_site(plan: _RoundPlan, case: str, shot: _Shot) -> EdgeCaseSite:
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


def _sites(plan: _RoundPlan) -> dict[str, EdgeCaseSite]:
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


# ---------------------------------------------------------------------------
# Writing one round
# ---------------------------------------------------------------------------


def _refuse_existing_rounds(plans: list[_RoundPlan]) -> None:
    seen: set[str] = set()
    for plan in plans:
        if plan.spec.name in seen:
            raise ValueError(f"round name {plan.spec.name!r} appears twice in the specs")
        seen.add(plan.spec.name)
        if plan.out_dir.exists():
            raise ValueError(f"round directory {plan.out_dir} already exists; refusing to overwrite it")


def _write_round(plan: _RoundPlan, connection: sqlite3.Connection, legacy: bool) -> None:
    rng = random.Random(plan.spec.seed)
    plan.out_dir.mkdir(parents=True)
    _write_text(plan.out_dir / "improve-run" / "loop-provenance.json", _pretty(_provenance(plan)))
    store = _SessionWriter(connection, legacy, _IdSequence(plan.tag), rng, plan.spec.steps_per_session)
    ledger_path = plan.out_dir / "improve-run" / "cost-ledger.jsonl"
    for campaign in plan.campaigns:
        (plan.out_dir / "patches" / campaign.run_name).mkdir(parents=True)
    with connection, ledger_path.open("w", encoding="utf-8") as ledger:
        for cell in plan.cells:
            _write_cell(plan, cell, rng, store, ledger)
        # A crash mid-append leaves a torn line; readers must skip it.
        ledger.write('{"version":1,"record":{"status":"settled","callId":"call_torn\n')
        store.flush()
    _write_candidate_patches(plan)
    for shot in plan.shots:
        _write_shot(plan, shot, rng)


def _provenance(plan: _RoundPlan) -> dict[str, Any]:
    spec = plan.spec
    return {
        "runId": plan.run_id,
        "startedAt": _iso(plan.start_ms),
        "suite": "swe-bench-verified",
        "split": "search",
        "loopsCommit": plan.campaigns[0].commit,
        "instances": spec.instances,
        "reps": spec.reps,
        "generations": spec.generations,
        "candidatesPerGeneration": spec.candidates_per_generation,
        "proposer": {"harness": "claude-code", "model": PROPOSER_RECEIPT_MODEL},
        "worker": {"harness": "opencode", "model": f"anthropic/{SUPERVISOR_MODEL}"},
        "host": "demo-runner-01",
    }


# --- cells ------------------------------------------------------------------


def _write_cell(
    plan: _RoundPlan, cell: _Cell, rng: random.Random, store: _SessionWriter, ledger: TextIO
) -> None:
    call_id = f"call_{_digest(plan.tag, cell.cell_id)[:20]}"
    campaign_dir = str(plan.campaign_dir(cell.campaign))
    cell_dir = plan.cell_dir(cell)
    cell_dir.mkdir(parents=True)
    ledger.write(
        _compact(_ledger_record(cell, call_id, campaign_dir, "pending", 0, 0, 0.0, cell.start_ms)) + "\n"
    )
    if "errored_cell" in cell.cases:
        # The arm crashed before it produced an artifact: no run dir, no settled receipt.
        _write_file(cell_dir / "cached-result.json", _compact_file(_errored_cell_record(cell, rng)))
        return
    wall_s = round(rng.uniform(240.0, 1800.0), 3)
    tokens_in, tokens_out = rng.randint(40_000, 900_000), rng.randint(3_000, 60_000)
    cost_usd = round(tokens_in * 3e-6 + tokens_out * 15e-6, 4)
    end_ms = cell.start_ms + int(wall_s * 1000)
    ledger.write(
        _compact(
            _ledger_record(cell, call_id, campaign_dir, "settled", tokens_in, tokens_out, cost_usd, end_ms)
        )
        + "\n"
    )
    patch_text = _cell_patch(cell, rng)
    _write_file(plan.patch_path(cell), patch_text)
    record = _cell_record(plan, cell, rng, wall_s, tokens_in, tokens_out, cost_usd, patch_text)
    _write_file(cell_dir / "cached-result.json", _compact_file(record))
    worker_cwds = [plan.worker_cwd(cell, k) for k in range(plan.spec.workers_per_cell)]
    _write_run_dir(plan, cell, rng, record, worker_cwds, end_ms)
    _write_worker_sessions(cell, worker_cwds, store)


def _ledger_record(
    cell: _Cell,
    call_id: str,
    campaign_dir: str,
    status: str,
    tokens_in: int,
    tokens_out: int,
    cost_usd: float,
    at_ms: int,
) -> dict[str, Any]:
    return {
        "version": 1,
        "record": {
            "status": status,
            "callId": call_id,
            "channel": "campaign",
            "phase": "arm",
            "actor": "supervisor",
            "model": SUPERVISOR_MODEL,
            "timestamp": _iso(at_ms),
            "inputTokens": tokens_in,
            "outputTokens": tokens_out,
            "costUsd": cost_usd,
            "tags": {"runDir": campaign_dir, "cellId": cell.cell_id},
        },
    }


def _errored_cell_record(cell: _Cell, rng: random.Random) -> dict[str, Any]:
    return {
        "cellId": cell.cell_id,
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "artifact": None,
        "error": "arm crashed: docker container exited with code 137 (out of memory) during setup",
        "costUsd": round(rng.uniform(0.05, 0.6), 4),
        "seed": rng.randint(1, 2**31 - 1),
        "cached": False,
        "durationMs": rng.randint(20_000, 90_000),
    }


def _cell_record(
    plan: _RoundPlan,
    cell: _Cell,
    rng: random.Random,
    wall_s: float,
    tokens_in: int,
    tokens_out: int,
    cost_usd: float,
    patch_text: str,
) -> dict[str, Any]:
    resolved: bool | None = rng.random() < 0.45
    verify_pass: bool | None = resolved or rng.random() < 0.2
    judge_scores = None
    if rng.random() < 0.5:
        judge_scores = {OFFICIAL_JUDGE: {"composite": 1.0 if resolved else 0.0}}
    if "composite_judge_score" in cell.cases:
        judge_scores = {OFFICIAL_JUDGE: {"composite": 0.62}}
    if "cell_without_reward" in cell.cases:
        # The judge never returned: no score, and `resolved` is unknown rather than false.
        resolved, verify_pass, judge_scores = None, None, None
    spent_tokens = tokens_in + tokens_out
    worker_tok_in = rng.randint(100_000, 2_000_000)
    worker_tok_out = rng.randint(5_000, 80_000)
    cached = rng.random() < 0.2
    record: dict[str, Any] = {
        "cellId": cell.cell_id,
        "scenarioId": cell.scenario_id,
        "rep": cell.rep,
        "artifact": {
            "kind": "swe-arm",
            "iid": cell.scenario_id,
            "commit": cell.commit,
            "resolved": resolved,
            "verifyPass": verify_pass,
            "patchLines": patch_text.count("\n"),
            "wallS": wall_s,
            "spentTokens": spent_tokens,
            "spentUsd": round(cost_usd * rng.uniform(0.85, 1.0), 4),
            "recoveredTokens": spent_tokens + worker_tok_in + worker_tok_out,
            "workerTokIn": worker_tok_in,
            "workerTokOut": worker_tok_out,
            "judgeAttempts": 3 if "cell_without_reward" in cell.cases else rng.randint(1, 2),
            "judgeWallS": round(rng.uniform(20.0, 240.0), 2),
            "runDir": str(plan.run_dir(cell)),
            "patchPath": str(plan.patch_path(cell)),
        },
        "costUsd": cost_usd,
        "tokenUsage": {"input": tokens_in, "output": tokens_out},
        "resolvedModel": f"anthropic/{SUPERVISOR_MODEL}" if rng.random() < 0.6 else SUPERVISOR_MODEL,
        "seed": rng.randint(1, 2**31 - 1),
        "cached": cached,
        "durationMs": rng.randint(30, 400) if cached else int(wall_s * 1000) + rng.randint(5_000, 60_000),
    }
    if judge_scores is not None:
        record["judgeScores"] = judge_scores
    if "error-null" in cell.cases:
        record["error"] = None
    return record


def _cell_patch(cell: _Cell, rng: random.Random) -> str:
    path = cell.touched_file
    line = rng.randint(40, 900)
    return (
        f"diff --git a/{path} b/{path}\n"
        f"index {_digest(cell.cell_id, 'a')[:7]}..{_digest(cell.cell_id, 'b')[:7]} 100644\n"
        f"--- a/{path}\n"
        f"+++ b/{path}\n"
        f"@@ -{line},6 +{line},7 @@\n"
        "     def _resolve(self, value):\n"
        "-        if value is None:\n"
        "-            return self.default\n"
        "+        if value is None or value == ():\n"
        "+            # Empty tuples reach here from the public API since the refactor.\n"
        "+            return self.default\n"
        "         return self._coerce(value)\n"
    )


def _write_run_dir(
    plan: _RoundPlan,
    cell: _Cell,
    rng: random.Random,
    record: dict[str, Any],
    worker_cwds: list[str],
    end_ms: int,
) -> None:
    run_dir = plan.run_dir(cell)
    run_dir.mkdir(parents=True)
    artifact = record["artifact"]
    if "cell_without_reward" not in cell.cases:
        _write_file(run_dir / "judge.json", _compact_file(_judge_verdict(cell, artifact)))
    brain = [
        {
            "ts": _iso(cell.start_ms + k * 41_000),
            "kind": "request-stats",
            "model": SUPERVISOR_MODEL,
            "inputTokens": rng.randint(3_000, 40_000),
            "outputTokens": rng.randint(100, 3_000),
            "latencyMs": rng.randint(900, 30_000),
        }
        for k in range(2)
    ]
    _write_file(run_dir / "brain.jsonl", "".join(_compact(line) + "\n" for line in brain))
    if "result-json-missing" in cell.cases:
        return
    if "result-json-corrupt" in cell.cases:
        _write_file(run_dir / "result.json", '{"sup_status": "done", "recoveredSpend": {"workerCwds": ["')
        return
    _write_file(
        run_dir / "result.json", _compact_file(_supervisor_result(cell, rng, artifact, worker_cwds, end_ms))
    )


def _judge_verdict(cell: _Cell, artifact: dict[str, Any]) -> dict[str, Any]:
    resolved = artifact["resolved"] is True
    test_name = f"tests/test_{cell.scenario_id.split('__')[0]}.py::test_regression_{cell.scenario_id[-4:]}"
    return {
        "judge": OFFICIAL_JUDGE,
        "instance_id": cell.scenario_id,
        "resolved": resolved,
        "patch_applied": True,
        "tests_status": {
            "FAIL_TO_PASS": {
                "success": [test_name] if resolved else [],
                "failure": [] if resolved else [test_name],
            },
            "PASS_TO_PASS": {"success": ["tests/test_core.py::test_roundtrip"], "failure": []},
        },
        "attempts": artifact["judgeAttempts"],
        "wallS": artifact["judgeWallS"],
    }


def _supervisor_result(
    cell: _Cell,
    rng: random.Random,
    artifact: dict[str, Any],
    worker_cwds: list[str],
    end_ms: int,
) -> dict[str, Any]:
    listed: list[Any] = list(worker_cwds)
    if "cwd_listed_twice" in cell.cases:
        listed.append(worker_cwds[0])  # the respawned worker reused its clone
    if "non_string_worker_cwd" in cell.cases:
        listed.insert(1, None)
    running = "sup_status_running" in cell.cases
    workers = len(worker_cwds)
    return {
        "sup_status": "running" if running else "done",
        "sup_verdict": None if running else ("resolved" if artifact["resolved"] else "unresolved"),
        "spawned": len(listed),
        "workers": workers,
        "settled": max(workers - 1, 0) if running else workers,
        "subtasks": [
            {"id": f"t{k + 1}", "title": title, "status": "done", "worker": f"w{k}"}
            for k, title in zip(range(workers), _subtask_titles(workers))
        ],
        "recoveredSpend": {
            "workerCwds": listed,
            "tokens": artifact["recoveredTokens"],
            "usd": round(rng.uniform(0.2, 6.0), 4),
        },
        "startedAt": _iso(cell.start_ms),
        "endedAt": None if running else _iso(end_ms),
    }


def _subtask_titles(count: int) -> list[str]:
    titles = ["Reproduce the failing test", "Patch the root cause", "Run the regression suite"]
    return [titles[k % len(titles)] + ("" if k < len(titles) else f" ({k + 1})") for k in range(count)]


def _write_worker_sessions(cell: _Cell, worker_cwds: list[str], store: _SessionWriter) -> None:
    for k, cwd in enumerate(worker_cwds):
        if "cwd_without_session" in cell.cases and k == len(worker_cwds) - 1:
            continue  # the worker died before opencode created its session
        shape = _session_shape(cell.cases) if k == 0 else _SessionShape()
        start = cell.start_ms + 15 * _SECOND + k * 20 * _SECOND
        session_id = store.add_session(cell, cwd, start, shape)
        if k == 0 and "cwd_with_two_sessions" in cell.cases:
            # opencode's task tool runs a sub-agent in the same directory, as a child session.
            store.add_session(cell, cwd, start + 45 * _SECOND, _SessionShape(), parent_id=session_id)


def _write_candidate_patches(plan: _RoundPlan) -> None:
    without = plan.case_shots.get("candidate_without_patch")
    for campaign in plan.campaigns[1:]:
        if without is not None and (campaign.generation, campaign.candidate_index) == (
            without.generation,
            without.candidate_index,
        ):
            continue  # the proposer committed nothing diffable
        _write_text(plan.candidate_patch(campaign), _candidate_patch(campaign))


def _candidate_patch(campaign: _Campaign) -> str:
    return (
        "diff --git a/profiles/swe/supervisor.md b/profiles/swe/supervisor.md\n"
        f"index {campaign.commit[:7]}..{campaign.commit[-7:]} 100644\n"
        "--- a/profiles/swe/supervisor.md\n"
        "+++ b/profiles/swe/supervisor.md\n"
        "@@ -12,4 +12,6 @@\n"
        " ## Splitting work\n"
        "-Spawn one worker per failing test.\n"
        "+Spawn one worker to reproduce the failure first; spawn fixers only after it\n"
        "+reports the failing assertion.\n"
        f"+Generation {campaign.generation}, candidate {campaign.candidate_index}.\n"
        " Keep patches minimal.\n"
    )


# ---------------------------------------------------------------------------
# The opencode store
# ---------------------------------------------------------------------------

_COST_COLUMNS = (
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
)


def _check_store_schema(db_path: Path, legacy: bool) -> None:
    """An existing store keeps its schema: appending the other one would mix two stores."""
    if not db_path.exists():
        return
    connection = sqlite3.connect(db_path)
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(session)")}
    finally:
        connection.close()
    if not columns:
        return
    has_cost = "cost" in columns
    if has_cost == legacy:
        wanted = "legacy (no cost/token columns)" if legacy else "current"
        raise ValueError(f"opencode store {db_path} has the other schema; cannot append the {wanted} one")


def _create_store_schema(connection: sqlite3.Connection, legacy: bool) -> None:
    cost_columns = (
        ""
        if legacy
        else "".join(f", {name} {'REAL' if name == 'cost' else 'INTEGER'}" for name in _COST_COLUMNS)
    )
    connection.executescript(
        f"""
        CREATE TABLE IF NOT EXISTS session (
            id TEXT PRIMARY KEY, parent_id TEXT, directory TEXT NOT NULL, agent TEXT, model TEXT
            {cost_columns}, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, title TEXT
        );
        CREATE TABLE IF NOT EXISTS message (
            id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL, data TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS part (
            id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
            time_created INTEGER NOT NULL, data TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS message_session_id_idx ON message (session_id);
        CREATE INDEX IF NOT EXISTS part_message_id_idx ON part (message_id);
        """
    )


class _IdSequence:
    """Sortable ids: prefix, 12 hex digits of epoch ms, a zero-padded counter, the round tag.

    Time leads, so `ORDER BY id` is chronological; the counter breaks ties in creation order.
    """

    def __init__(self, round_tag: str):
        self._tag = round_tag
        self._count = 0

    def next(self, prefix: str, time_ms: int) -> str:
        self._count += 1
        return f"{prefix}_{time_ms:012x}{self._count:08d}{self._tag}"


@dataclass(frozen=True)
class _SessionShape:
    """The planted defects of one worker session (all False: a clean session)."""

    no_messages: bool = False
    only_malformed_messages: bool = False
    malformed_part: bool = False
    malformed_message: bool = False
    long_tool_output: bool = False
    object_tool_output: bool = False
    half_second_wall: bool = False


_SESSION_SHAPES = {
    "session_without_messages": _SessionShape(no_messages=True),
    "session_with_only_malformed_messages": _SessionShape(only_malformed_messages=True),
    "malformed_part": _SessionShape(malformed_part=True),
    "malformed_message": _SessionShape(malformed_message=True),
    "very_long_tool_output": _SessionShape(long_tool_output=True),
    "non_string_tool_output": _SessionShape(object_tool_output=True),
    "half_second_wall_time": _SessionShape(half_second_wall=True),
}


def _session_shape(cases: set[str]) -> _SessionShape:
    for case, shape in _SESSION_SHAPES.items():
        if case in cases:
            return shape
    return _SessionShape()


@dataclass
class _Tokens:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add(self, other: _Tokens) -> None:
        self.input += other.input
        self.output += other.output
        self.reasoning += other.reasoning
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cost += other.cost

    def as_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "reasoning": self.reasoning,
            "cache": {"read": self.cache_read, "write": self.cache_write},
        }


_TOOLS = ("read", "bash", "grep", "edit")


class _SessionWriter:
    """Buffers the opencode rows of one round and flushes them with `executemany`.

    The caller holds the transaction (one per round); the buffers keep memory flat however
    large the round is.
    """

    _FLUSH_AT = 20_000

    def __init__(
        self,
        connection: sqlite3.Connection,
        legacy: bool,
        ids: _IdSequence,
        rng: random.Random,
        steps_per_session: int,
    ):
        self._connection = connection
        self._steps_per_session = steps_per_session
        self._legacy = legacy
        self._ids = ids
        self._rng = rng
        self._sessions: list[tuple[Any, ...]] = []
        self._messages: list[tuple[Any, ...]] = []
        self._parts: list[tuple[Any, ...]] = []
        columns = ["id", "parent_id", "directory", "agent", "model"]
        columns += [] if legacy else list(_COST_COLUMNS)
        columns += ["time_created", "time_updated", "title"]
        marks = ", ".join("?" for _ in columns)
        self._session_sql = f"INSERT INTO session ({', '.join(columns)}) VALUES ({marks})"

    def flush(self) -> None:
        # Rows in id order fill each primary-key page once instead of revisiting it.
        for rows in (self._sessions, self._messages, self._parts):
            rows.sort()
        self._connection.executemany(self._session_sql, self._sessions)
        self._connection.executemany("INSERT INTO message VALUES (?, ?, ?, ?)", self._messages)
        self._connection.executemany("INSERT INTO part VALUES (?, ?, ?, ?, ?)", self._parts)
        self._sessions.clear()
        self._messages.clear()
        self._parts.clear()

    # -- one session -----------------------------------------------------------------

    def add_session(
        self, cell: _Cell, cwd: str, start_ms: int, shape: _SessionShape, parent_id: str | None = None
    ) -> str:
        rng = self._rng
        model_id, provider_id = WORKER_MODELS[0] if rng.random() < 0.8 else WORKER_MODELS[1]
        session_id = self._ids.next("ses", start_ms)
        totals = _Tokens()
        t = start_ms + rng.randint(5, 40)
        if shape.only_malformed_messages:
            t = self._malformed_messages(session_id, t)
        elif not shape.no_messages:
            t = self._conversation(session_id, cell, cwd, t, shape, (model_id, provider_id), totals)
        end_ms = t + rng.randint(40, 900)
        if shape.half_second_wall:
            # A wall time of n.5 s: JavaScript's Math.round goes up, Python's round() goes to even.
            end_ms = start_ms + ((end_ms - start_ms) // 1000 + 1) * 1000 + 500
        title = f"{cell.scenario_id}: " + ("explore the test layout" if parent_id else "worker task")
        row: list[Any] = [session_id, parent_id, cwd, "general" if parent_id else "build"]
        row.append(_compact({"id": model_id, "providerID": provider_id}))
        if not self._legacy:
            row += [round(totals.cost, 6), totals.input, totals.output, totals.reasoning]
            row += [totals.cache_read, totals.cache_write]
        row += [start_ms, end_ms, title]
        self._sessions.append(tuple(row))
        if len(self._parts) >= self._FLUSH_AT:
            self.flush()
        return session_id

    def _message(self, session_id: str, t: int, data: str) -> str:
        message_id = self._ids.next("msg", t)
        self._messages.append((message_id, session_id, t, data))
        return message_id

    def _part(self, session_id: str, message_id: str, t: int, data: str) -> None:
        self._parts.append((self._ids.next("prt", t), message_id, session_id, t, data))

    def _malformed_messages(self, session_id: str, t: int) -> int:
        """Two messages whose data was cut mid-write; their parts are intact but unreachable."""
        for role in ("user", "assistant"):
            message_id = self._message(session_id, t, '{"role":"' + role + '","time":{"created":' + str(t))
            self._part(session_id, message_id, t + 3, _compact({"type": "text", "text": "orphaned part"}))
            t += self._rng.randint(2_000, 9_000)
        return t

    def _conversation(
        self,
        session_id: str,
        cell: _Cell,
        cwd: str,
        t: int,
        shape: _SessionShape,
        model: tuple[str, str],
        totals: _Tokens,
    ) -> int:
        rng = self._rng
        user_id = self._message(
            session_id, t, _compact({"role": "user", "time": {"created": t}, "agent": "build"})
        )
        self._part(session_id, user_id, t + 1, _compact({"type": "text", "text": _worker_prompt(cell, cwd)}))
        context = f"<context>\nrepository clone: {cwd}\nfile under suspicion: {cell.touched_file}\n</context>"
        self._part(session_id, user_id, t + 2, _compact({"type": "text", "text": context, "synthetic": True}))
        t += rng.randint(300, 2_000)
        if shape.malformed_message:
            self._message(session_id, t, '{"role":"assistant","time":{"created":' + str(t) + ',"compl')
            t += rng.randint(200, 900)
        steps = self._steps_per_session
        step = 0
        while step < steps:
            in_message = min(steps - step, 1 if rng.random() < 0.6 else 2)
            t = self._assistant_message(
                session_id, user_id, cell, cwd, t, shape, model, totals, step, in_message, steps
            )
            step += in_message
        return t

    def _assistant_message(
        self,
        session_id: str,
        parent_id: str,
        cell: _Cell,
        cwd: str,
        t: int,
        shape: _SessionShape,
        model: tuple[str, str],
        totals: _Tokens,
        first_step: int,
        step_count: int,
        total_steps: int,
    ) -> int:
        """One assistant message holding `step_count` steps; its data row is written last."""
        rng = self._rng
        created = t
        message_id = self._ids.next("msg", created)
        used = _Tokens()
        finish = "tool-calls"
        for step in range(first_step, first_step + step_count):
            last = step == total_steps - 1
            t, step_tokens = self._step(session_id, message_id, cell, cwd, t, shape, step, last)
            used.add(step_tokens)
            finish = "stop" if last else "tool-calls"
        totals.add(used)
        data = {
            "role": "assistant",
            "time": {"created": created, "completed": t},
            "parentID": parent_id,
            "modelID": model[0],
            "providerID": model[1],
            "mode": "build",
            "path": {"cwd": cwd, "root": cwd},
            "cost": round(used.cost, 6),
            "tokens": used.as_json(),
            "finish": finish,
        }
        self._messages.append((message_id, session_id, created, _compact(data)))
        return t + rng.randint(100, 1_500)

    def _step(
        self,
        session_id: str,
        message_id: str,
        cell: _Cell,
        cwd: str,
        t: int,
        shape: _SessionShape,
        step: int,
        last: bool,
    ) -> tuple[int, _Tokens]:
        rng = self._rng
        snapshot = _digest(session_id, step)[:40]
        self._part(session_id, message_id, t, _compact({"type": "step-start", "snapshot": snapshot}))
        t += rng.randint(400, 4_000)
        if rng.random() < 0.7:
            thought = (
                f"The failure in {cell.touched_file} looks like an unchecked empty value; step {step + 1}."
            )
            self._part(session_id, message_id, t, _compact({"type": "reasoning", "text": thought}))
            t += rng.randint(200, 3_000)
        if step == 0 and shape.malformed_part:
            self._part(session_id, message_id, t, '{"type":"text","text":"I will now read the fi')
            t += 5
        if last or rng.random() < 0.4:
            text = (
                "The regression test passes now; the patch is ready." if last else "Checking the code path."
            )
            self._part(session_id, message_id, t, _compact({"type": "text", "text": text}))
            t += rng.randint(100, 1_500)
        edited = False
        if not last or step == 0:
            tool = _TOOLS[(step + rng.randint(0, 3)) % len(_TOOLS)]
            if step == 0 and (shape.long_tool_output or shape.object_tool_output):
                tool = "bash" if shape.long_tool_output else "todowrite"
            t = self._tool_part(session_id, message_id, cell, cwd, t, tool, shape if step == 0 else None)
            edited = tool == "edit"
        tokens = _step_tokens(rng)
        finish = {
            "type": "step-finish",
            "reason": "stop" if last else "tool-calls",
            "snapshot": _digest(session_id, step, "end")[:40],
            "cost": round(tokens.cost, 6),
            "tokens": tokens.as_json(),
        }
        self._part(session_id, message_id, t, _compact(finish))
        if edited:
            patch = {"type": "patch", "hash": snapshot, "files": [f"{cwd}/{cell.touched_file}"]}
            self._part(session_id, message_id, t + 1, _compact(patch))
        elif rng.random() < 0.2:
            self._part(session_id, message_id, t + 1, _compact({"type": "snapshot", "snapshot": snapshot}))
        return t + 2, tokens

    def _tool_part(
        self,
        session_id: str,
        message_id: str,
        cell: _Cell,
        cwd: str,
        t: int,
        tool: str,
        shape: _SessionShape | None,
    ) -> int:
        rng = self._rng
        tool_input, output, title = _tool_call(cell, cwd, tool, rng, shape)
        end = t + rng.randint(80, 12_000)
        call_id = "toolu_01" + _digest(session_id, message_id, t)[:22]
        state = {
            "status": "completed",
            "input": tool_input,
            "output": output,
            "title": title,
            "metadata": {"truncated": False},
            "time": {"start": t, "end": end},
        }
        self._part(
            session_id,
            message_id,
            t,
            _compact({"type": "tool", "callID": call_id, "tool": tool, "state": state}),
        )
        return end + rng.randint(50, 800)


def _step_tokens(rng: random.Random) -> _Tokens:
    tokens = _Tokens(
        input=rng.randint(800, 9_000),
        output=rng.randint(40, 1_400),
        reasoning=rng.randint(0, 600),
        cache_read=rng.randint(0, 30_000),
        cache_write=rng.randint(0, 4_000),
    )
    tokens.cost = (
        tokens.input * 3
        + (tokens.output + tokens.reasoning) * 15
        + tokens.cache_read * 0.3
        + tokens.cache_write * 3.75
    ) / 1e6
    return tokens


def _worker_prompt(cell: _Cell, cwd: str) -> str:
    return (
        f"You are worker on {cell.scenario_id} (rep {cell.rep}). Reproduce the failing test, then fix "
        f"{cell.touched_file} with the smallest patch. Work only inside {cwd}. "
        f"Mind the unicode fixtures: {NON_ASCII_SAMPLE}"
    )


_CODE_LINES = (
    "def _resolve(self, value):",
    "    if value is None:",
    "        return self.default",
    "    return self._coerce(value)",
    "",
    "class Options:",
    '    """Holds the per-model configuration."""',
    "    def __init__(self, meta, app_label=None):",
    "        self.meta = meta",
    "        self.app_label = app_label",
)
# What opencode's read tool shows of a file: numbered lines. Built once; a read is a slice of it.
_NUMBERED_LISTING = tuple(f"{n:05d}| {_CODE_LINES[n % len(_CODE_LINES)]}" for n in range(1, 900))


def _tool_call(
    cell: _Cell, cwd: str, tool: str, rng: random.Random, shape: _SessionShape | None
) -> tuple[dict[str, Any], Any, str]:
    """(input, output, title) of one tool call; `shape` plants the first call's defects."""
    path = f"{cwd}/{cell.touched_file}"
    if shape is not None and shape.long_tool_output:
        lines = [
            f"tests/test_regressions.py::test_case_{n:05d} PASSED{' ' * 20}[{n * 100 // _LONG_OUTPUT_LINES:3d}%]"
            for n in range(_LONG_OUTPUT_LINES)
        ]
        return (
            {"command": "python -m pytest tests -vv", "description": "Run the whole suite"},
            "\n".join(lines),
            "pytest -vv",
        )
    if shape is not None and shape.object_tool_output:
        todos = [{"content": "Reproduce the failure", "status": "completed", "priority": "high"}]
        todos.append({"content": "Patch the root cause", "status": "in_progress", "priority": "high"})
        return {"todos": todos}, {"todos": todos, "remaining": 1}, "2 todos"
    if tool == "read":
        start = rng.randint(1, 800)
        count = rng.randint(20, 60)
        body = "\n".join(_NUMBERED_LISTING[start - 1 : start - 1 + count])
        return (
            {"filePath": path, "offset": start, "limit": count},
            f"<file>\n{body}\n</file>",
            cell.touched_file,
        )
    if tool == "bash":
        failures = rng.randint(0, 2)
        output = (
            f"============================= test session starts ==============================\n"
            f"collected {rng.randint(5, 300)} items\n\n"
            + "".join(f"FAILED tests/test_core.py::test_edge_{k} - AssertionError\n" for k in range(failures))
            + f"========================= {failures} failed, {rng.randint(5, 300)} passed in "
            f"{rng.uniform(0.5, 40):.2f}s =========================\n"
        )
        return (
            {"command": "python -m pytest tests -x -q", "description": "Run the failing tests"},
            output,
            "pytest",
        )
    if tool == "grep":
        hits = "\n".join(
            f"{path}:{rng.randint(1, 900)}: def _resolve(self, value):" for _ in range(rng.randint(1, 4))
        )
        return {"pattern": "_resolve", "path": cwd}, f"Found matches\n{hits}", "_resolve"
    edit = {
        "filePath": path,
        "oldString": "if value is None:",
        "newString": "if value is None or value == ():",
    }
    return edit, "Edit applied successfully.", cell.touched_file


# ---------------------------------------------------------------------------
# Proposer shots: receipts and Claude Code transcripts
# ---------------------------------------------------------------------------


def _write_shot(plan: _RoundPlan, shot: _Shot, rng: random.Random) -> None:
    prompt = _proposer_prompt(plan, shot)
    lines: list[dict[str, Any]] = []
    transcript_end = shot.start_ms + rng.randint(60_000, 600_000)
    if "missing_transcript_folder" not in shot.cases:
        session_id = plan.transcript_path(shot).stem
        lines = _transcript(plan, shot, session_id, shot.start_ms + rng.randint(2_000, 25_000), prompt, rng)
        transcript_end = _last_timestamp_ms(lines)
        _write_jsonl(plan.transcript_path(shot), lines)
    if "transcript_outside_window" in shot.cases:
        late = plan.transcript_path(shot, "late")
        _write_jsonl(
            late, _transcript(plan, shot, late.stem, shot.late_start_ms, prompt, rng, variant="late")
        )
    if "sidechain-only-file" in shot.cases:
        agent_file = plan.transcript_path(shot, "sidechain")
        lines_of_agent = _sidechain_only_lines(plan, shot, agent_file.stem, shot.start_ms + 90_000, rng)
        _write_jsonl(agent_file, lines_of_agent)
    receipt_path = plan.receipt_path(shot)
    if "receipt_not_json" in shot.cases:
        # The harness was killed while writing its receipt.
        _write_text(receipt_path, '{"receipt": {"startedAt": "' + _iso(shot.start_ms) + '", "harness": "clau')
        return
    _write_text(receipt_path, _pretty({"receipt": _receipt(plan, shot, prompt, transcript_end, rng)}))


def _receipt(
    plan: _RoundPlan, shot: _Shot, prompt: str, transcript_end: int, rng: random.Random
) -> dict[str, Any]:
    timed_out = "timed_out_shot" in shot.cases
    completed = shot.start_ms + _TIMED_OUT_MS if timed_out else transcript_end + rng.randint(3_000, 20_000)
    receipt: dict[str, Any] = {
        "startedAt": _iso(shot.start_ms),
        "completedAt": _iso(completed),
        "harness": "claude-code",
        "model": PROPOSER_RECEIPT_MODEL,
        "exitCode": 124 if timed_out else 0,
        "timedOut": timed_out,
        "maxShots": plan.spec.shots_per_candidate,
        "promptSha256": hashlib.sha256(prompt.encode()).hexdigest(),
        "error": f"proposer shot timed out after {_TIMED_OUT_MS // 1000} s" if timed_out else None,
        "costUsd": round(rng.uniform(0.4, 6.5), 4),
        "durationMs": completed - shot.start_ms,
        "worktree": str(plan.worktree(shot)),
    }
    if shot.cases & {"receipt_without_timestamps", "sidechain-only-file"}:
        del receipt["startedAt"], receipt["completedAt"]  # an older harness wrote no times
    return receipt


def _proposer_prompt(plan: _RoundPlan, shot: _Shot) -> str:
    author = f" (author {shot.author})" if shot.author else ""
    return (
        f"You are proposer {shot.candidate_id}{author}, shot {shot.shot}, of run {plan.run_id}. "
        "Read the baseline failures under improve-run/ and change the supervisor profile in "
        "profiles/swe/ so more SWE-bench instances resolve. Commit the change on this worktree's branch. "
        f"Some fixtures carry non-ASCII text: {NON_ASCII_SAMPLE}"
    )


def _write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    _write_text(path, "".join(_compact(line) + "\n" for line in lines))


def _last_timestamp_ms(lines: list[dict[str, Any]]) -> int:
    stamps = [line["timestamp"] for line in lines if "timestamp" in line]
    moment = datetime.strptime(stamps[-1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


class _TranscriptBuilder:
    """Lines of one Claude Code session file, chained by uuid/parentUuid like the real thing."""

    def __init__(self, session_id: str, cwd: str, branch: str, t: int, rng: random.Random):
        self.session_id = session_id
        self.cwd = cwd
        self.branch = branch
        self.t = t
        self.rng = rng
        self.lines: list[dict[str, Any]] = []
        self._parent: str | None = None
        self._count = 0

    def _base(self, kind: str, sidechain: bool) -> dict[str, Any]:
        self._count += 1
        uuid = _uuid(self.session_id, self._count)
        line = {
            "parentUuid": self._parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": CLAUDE_CODE_VERSION,
            "gitBranch": self.branch,
            "type": kind,
            "uuid": uuid,
            "timestamp": _iso(self.t),
        }
        self._parent = uuid
        self.t += self.rng.randint(800, 20_000)
        return line

    def raw(self, line: dict[str, Any]) -> None:
        self.lines.append(line)

    def user(self, content: Any, sidechain: bool = False, **extra: Any) -> None:
        line = self._base("user", sidechain)
        line["message"] = {"role": "user", "content": content}
        line.update(extra)
        self.lines.append(line)

    def assistant(
        self, blocks: list[dict[str, Any]], model: str = PROPOSER_MODEL, sidechain: bool = False, **extra: Any
    ) -> None:
        """One API message, written as one line per content block sharing id and usage."""
        self._count += 1
        message_id = "msg_01" + _digest(self.session_id, "msg", self._count)[:22]
        request_id = "req_011C" + _digest(self.session_id, "req", self._count)[:20]
        usage = {
            "input_tokens": self.rng.randint(3, 4_000),
            "output_tokens": self.rng.randint(20, 2_500),
            "cache_read_input_tokens": self.rng.randint(0, 60_000),
            "cache_creation_input_tokens": self.rng.randint(0, 9_000),
            "service_tier": "standard",
        }
        if model == SYNTHETIC_MODEL:
            usage = {key: 0 for key in usage if key != "service_tier"}
        for block in blocks:
            line = self._base("assistant", sidechain)
            line["message"] = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
            line["requestId"] = request_id
            line.update(extra)
            self.lines.append(line)

    def tool_id(self, name: str) -> str:
        return "toolu_01" + _digest(self.session_id, "tool", name, len(self.lines))[:22]


def _thinking(text: str, session_id: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "Eu" + _digest(session_id, text)[:54]}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def _tool_result(tool_id: str, content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user line's content answering one tool call; `content` is a string or text blocks."""
    return [{"tool_use_id": tool_id, "type": "tool_result", "content": content}]


# A 1x1 PNG: what Claude Code stores when a screenshot is pasted.
_TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _transcript(
    plan: _RoundPlan,
    shot: _Shot,
    session_id: str,
    start_ms: int,
    prompt: str,
    rng: random.Random,
    variant: str = "main",
) -> list[dict[str, Any]]:
    """A proposer session file: summary and queue lines, then the conversation."""
    worktree = str(plan.worktree(shot))
    builder = _TranscriptBuilder(session_id, worktree, shot.candidate_id, start_ms, rng)
    summary = f"Propose {shot.candidate_id} supervisor change"
    builder.raw({"type": "summary", "summary": summary, "leafUuid": _uuid(session_id, "leaf")})
    builder.raw(
        {
            "type": "queue-operation",
            "operation": "enqueue",
            "timestamp": _iso(start_ms - 1_500),
            "sessionId": session_id,
            "content": prompt,
        }
    )
    planted = shot.cases if variant == "main" else set()
    if "empty-claude-transcript" in planted:
        # A pasted screenshot, then the session was closed before any reply.
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _TINY_PNG}}
        builder.user([image])
        return builder.lines
    builder.user(prompt)
    _proposer_turns(builder, plan, shot, planted)
    if "synthetic-model" in planted:
        # Claude Code makes this message up itself when the API call fails.
        overloaded = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}'
        builder.assistant([_text(overloaded)], model=SYNTHETIC_MODEL, isApiErrorMessage=True)
    return builder.lines


def _proposer_turns(builder: _TranscriptBuilder, plan: _RoundPlan, shot: _Shot, planted: set[str]) -> None:
    """Read the profile, ask a sub-agent, edit, commit, report: one API message per call."""
    session_id = builder.session_id
    profile = f"{builder.cwd}/profiles/swe/supervisor.md"
    first_thought = "The baseline loses instances where workers patch before reproducing. Read the profile."
    if "empty-thinking-first-block" in planted:
        first_thought = ""  # Claude Code writes redacted/empty thinking as its own line
    read_id = builder.tool_id("Read")
    builder.assistant(
        [
            _thinking(first_thought, session_id),
            _text("I'll start by reading the current supervisor profile."),
            _tool_use(read_id, "Read", {"file_path": profile}),
        ]
    )
    profile_text = (
        "     1\t# Supervisor\n     2\t## Splitting work\n     3\tSpawn one worker per failing test.\n"
    )
    file_info = {"type": "text", "file": {"filePath": profile, "numLines": 3}}
    builder.user(_tool_result(read_id, profile_text), toolUseResult=file_info)

    task_id = builder.tool_id("Task")
    task_prompt = "Summarise which baseline cells failed and why, from improve-run/baseline."
    task_input = {
        "description": "Survey baseline failures",
        "prompt": task_prompt,
        "subagent_type": "general-purpose",
    }
    builder.assistant([_tool_use(task_id, "Task", task_input)])
    finding = "Two of three failures patched before reproducing the bug."
    builder.user(task_prompt, sidechain=True)
    builder.assistant([_text(finding)], sidechain=True)
    builder.user(_tool_result(task_id, [_text(finding)]))

    edit_id = builder.tool_id("Edit")
    edit_input = {
        "file_path": profile,
        "old_string": "Spawn one worker per failing test.",
        "new_string": "Spawn one worker to reproduce the failure first.",
    }
    thought = "Make reproduction a hard prerequisite for spawning fixers."
    builder.assistant([_thinking(thought, session_id), _tool_use(edit_id, "Edit", edit_input)])
    builder.user(_tool_result(edit_id, f"The file {profile} has been updated."))

    bash_id = builder.tool_id("Bash")
    message = "supervisor: reproduce before fixing"
    builder.assistant([_tool_use(bash_id, "Bash", {"command": f"git commit -am '{message}'"})])
    commit = plan.campaign_of(shot.generation, shot.candidate_index).commit
    committed = (
        f"[{shot.candidate_id} {commit[:7]}] {message}\n 1 file changed, 2 insertions(+), 1 deletion(-)"
    )
    builder.user(_tool_result(bash_id, [_text(committed)]))
    builder.assistant([_text(f"Committed the candidate change ({NON_ASCII_SAMPLE}): {message}.")])


def _sidechain_only_lines(
    plan: _RoundPlan, shot: _Shot, file_stem: str, start_ms: int, rng: random.Random
) -> list[dict[str, Any]]:
    """A sub-agent's own file: every line is a sidechain line (Claude Code's agent-<id>.jsonl)."""
    parent_session = plan.transcript_path(shot).stem
    builder = _TranscriptBuilder(parent_session, str(plan.worktree(shot)), shot.candidate_id, start_ms, rng)
    agent_id = file_stem.removeprefix("agent-")
    builder.user(
        "Survey the baseline failures and report the common cause.", sidechain=True, agentId=agent_id
    )
    builder.assistant(
        [{"type": "text", "text": "Most failures skip reproduction."}], sidechain=True, agentId=agent_id
    )
    return builder.lines
