"""One function per role, building `tangle.rollout.v1` lines as plain dicts (docs/line-format.md).

The worker line, built around an opencode session, is in backfill/worker_line.py.

Pure: every input is already read (cell record, result.json, judge.json, session rows,
transcripts); nothing here touches the disk. Every optional field is read behind its own
type guard and becomes null, never a made-up default.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from rollout_assets.backfill import gaps
from rollout_assets.backfill.ids import proposer_rollout_id, supervisor_rollout_id
from rollout_assets.ledger import ROLLOUT_SCHEMA
from rollout_assets.sources.claude import ClaudeTranscript, ClaudeUsage
from rollout_assets.io import (
    finite_or_none,
    integer_or_none,
    is_number,
    is_record,
    number_or_none,
    round_half_up,
    string_or_none,
    to_json_text,
)
from rollout_assets.sources.round import (
    CampaignEntry,
    CellRecord,
    ShotReceiptFile,
    artifact_of,
    candidate_id,
    reports_unlisted_workers,
)

OFFICIAL_JUDGE = "swe-arena-official-judge"
CELL_SUITE = "swe-bench-verified"
PROPOSER_SUITE = "swe-arena-proposer"


@dataclass(frozen=True)
class LineContext:
    """What every line of one round shares."""

    run_id: str
    captured_at: str
    instance_count: int


def _provenance(ctx: LineContext, gap: str | None) -> dict[str, Any]:
    provenance: dict[str, Any] = {"captured_at": ctx.captured_at, "capture": "backfill"}
    if gap is not None:
        provenance["gap"] = gap
    return provenance


def line_dict(
    ctx: LineContext,
    *,
    rollout_id: str,
    parent_rollout_id: str | None,
    generation: int,
    candidate_index: int,
    role: str,
    task: dict[str, Any],
    policy: dict[str, Any],
    messages: list[dict[str, Any]],
    outcome: dict[str, Any],
    cost: dict[str, Any],
    artifacts: dict[str, Any],
    gap: str | None,
) -> dict[str, Any]:
    return {
        "schema": ROLLOUT_SCHEMA,
        "rollout_id": rollout_id,
        "parent_rollout_id": parent_rollout_id,
        "run_id": ctx.run_id,
        "experiment_id": None,
        "candidate_id": candidate_id(generation, candidate_index),
        "generation": generation,
        "candidate_index": candidate_index,
        "role": role,
        "task": task,
        "policy": policy,
        "messages": messages,
        "tool_defs": [],
        "outcome": {**outcome, "realness_gated": False},
        "cost": cost,
        "artifacts": artifacts,
        "provenance": _provenance(ctx, gap),
    }


def policy_dict(
    harness: str | None, model: str | None, provider: str | None, profile_commit: str | None
) -> dict[str, Any]:
    return {
        "harness": harness,
        "harness_version": None,
        "model": model,
        "provider": provider,
        "profile_commit": profile_commit,
        "sampling": None,
    }


def _js_number(value: float) -> int | float:
    """A whole float as int, so 2/2 is written `1` as JavaScript writes it, not `1.0`."""
    return int(value) if value.is_integer() else value


def split_model_ref(ref: Any) -> tuple[str | None, str | None]:
    """`provider/model` split at the first slash; a bare string is a model without provider."""
    if not isinstance(ref, str) or not ref:
        return None, None
    provider, slash, model = ref.partition("/")
    return (provider, model) if slash else (None, ref)


def cell_reward(record: dict[str, Any]) -> int | float | None:
    """The official judge's composite, else 1/0 from a boolean `resolved`, else None (no verdict)."""
    judge_scores = record.get("judgeScores")
    official = judge_scores.get(OFFICIAL_JUDGE) if is_record(judge_scores) else None
    composite = official.get("composite") if is_record(official) else None
    if is_number(composite):
        return composite
    artifact = artifact_of(record)
    if artifact is not None and isinstance(artifact.get("resolved"), bool):
        return 1 if artifact["resolved"] else 0
    return None


def _cell_error(record: dict[str, Any]) -> str | None:
    error = record.get("error")
    if error is None:
        return None
    # The schema wants a string; a non-string error is kept as its JSON text, not dropped.
    return error if isinstance(error, str) else to_json_text(error)


def _js_path_join(*parts: str) -> str:
    """Node's `path.join`, which the seed used: the parts joined with `/`, then normalized
    (`.` and `..` resolved, repeated slashes folded), so `/runs/arm0/` gives
    `/runs/arm0/brain.jsonl`, not `/runs/arm0//brain.jsonl`."""
    joined = "/".join(part for part in parts if part)
    if not joined:
        return "."
    normalized = posixpath.normpath(joined)
    # POSIX lets a path keep exactly two leading slashes; Node folds them like any others.
    return normalized[1:] if normalized.startswith("//") else normalized


def supervisor_line(
    ctx: LineContext,
    entry: CampaignEntry,
    cell: CellRecord,
    *,
    result: dict[str, Any] | None,
    verdict: Any,
) -> dict[str, Any]:
    """One campaign cell's supervisor episode: always a gap line (the brain keeps stats only)."""
    record = cell.record
    artifact = artifact_of(record)
    artifact_or_empty = artifact or {}
    run_dir = cell.run_dir
    reward = cell_reward(record)
    provider, model = split_model_ref(record.get("resolvedModel"))
    sup_status = string_or_none((result or {}).get("sup_status"))
    error = _cell_error(record)
    # A cell whose arm ran (runDir known) but left no readable result.json: its workers
    # existed, yet none can be listed. Say so instead of silently emitting no worker line.
    worker_list_missing = run_dir is not None and result is None
    workers_unlisted = result is not None and reports_unlisted_workers(result)
    metrics = _supervisor_metrics(record, artifact_or_empty, result or {})
    if worker_list_missing or workers_unlisted:
        metrics["worker_list_missing"] = True
    return line_dict(
        ctx,
        rollout_id=supervisor_rollout_id(
            ctx.run_id, candidate_id(entry.generation, entry.candidate_index), cell.scenario_id, cell.rep
        ),
        parent_rollout_id=None,
        generation=entry.generation,
        candidate_index=entry.candidate_index,
        role="supervisor",
        task=_cell_task(cell, record),
        policy=policy_dict(
            "pi-loops", model, provider, cell.commit if cell.commit is not None else entry.commit
        ),
        messages=[],
        outcome={
            "reward": reward,
            "reward_source": None if reward is None else OFFICIAL_JUDGE,
            "verdict": verdict,
            "metrics": metrics,
            # `"error": null` is no error: only a present, non-null error fails the cell.
            "is_completed": artifact is not None and error is None,
            "is_truncated": sup_status == "running",
            "error": error,
        },
        cost=_supervisor_cost(record, artifact_or_empty),
        artifacts={
            "patch_path": string_or_none(artifact_or_empty.get("patchPath")),
            "run_dir": run_dir,
            "transcript_ref": _js_path_join(run_dir, "brain.jsonl") if run_dir is not None else None,
        },
        gap=gaps.supervisor_gap(worker_list_missing, workers_unlisted=workers_unlisted),
    )


def _supervisor_metrics(
    record: dict[str, Any], artifact: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any]:
    subtasks = result.get("subtasks")
    return {
        "resolved": artifact.get("resolved"),
        "verify_pass": artifact.get("verifyPass"),
        "patch_lines": artifact.get("patchLines"),
        "judge_attempts": artifact.get("judgeAttempts"),
        "judge_wall_s": artifact.get("judgeWallS"),
        # Supervisor-tree spend; the durable episode receipt is cost.usd. recovered_tokens
        # is the EPISODE total (workers included): do not sum tokens across roles.
        "spent_tokens": artifact.get("spentTokens"),
        "spent_usd": artifact.get("spentUsd"),
        "recovered_tokens": artifact.get("recoveredTokens"),
        "sup_status": string_or_none(result.get("sup_status")),
        "sup_verdict": string_or_none(result.get("sup_verdict")),
        "spawned": number_or_none(result.get("spawned")),
        "workers": number_or_none(result.get("workers")),
        "settled": number_or_none(result.get("settled")),
        "subtasks": subtasks if isinstance(subtasks, list) else None,
        "cached": record.get("cached"),
    }


def _supervisor_cost(record: dict[str, Any], artifact: dict[str, Any]) -> dict[str, Any]:
    return {
        "usd": number_or_none(record.get("costUsd")),
        # The brain's token split is not recorded (brain.jsonl is stats-only);
        # totals live in metrics.spent_tokens / recovered_tokens.
        "tokens_in": None,
        "tokens_out": None,
        "tokens_reasoning": None,
        "cache_read": None,
        "cache_write": None,
        "wall_s": number_or_none(artifact.get("wallS")),
    }


def _cell_task(cell: CellRecord, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "suite": CELL_SUITE,
        "instance_id": cell.scenario_id,
        "split": "search",
        "seed": integer_or_none(record.get("seed")),
        "rep": cell.rep,
    }


def proposer_line(
    ctx: LineContext,
    out_dir: str,
    shot: ShotReceiptFile,
    receipt: dict[str, Any] | None,
    entry: CampaignEntry | None,
    transcript: ClaudeTranscript | None,
    unreadable: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One proposer shot, joined to its Claude transcript when one matched the time window;
    `unreadable` is the (path, why) of a transcript file or folder of its worktree that is there
    but could not be read, which leaves the shot unjoined."""
    receipt_or_empty = receipt or {}
    worktree_cwd = shot.worktree_cwd(out_dir)
    shot_candidate = candidate_id(shot.generation, shot.candidate_index)
    reward = _proposer_reward(ctx, entry)
    exit_code = receipt_or_empty.get("exitCode")
    model = transcript.model if transcript is not None else None
    return line_dict(
        ctx,
        rollout_id=proposer_rollout_id(ctx.run_id, shot.relative_path(out_dir)),
        parent_rollout_id=None,
        generation=shot.generation,
        candidate_index=shot.candidate_index,
        role="proposer",
        task={
            "suite": PROPOSER_SUITE,
            "instance_id": shot_candidate if shot.author is None else f"{shot_candidate}-{shot.author}",
            "split": "search",
            "seed": None,
            "rep": shot.shot,
        },
        policy=policy_dict(
            string_or_none(receipt_or_empty.get("harness")),
            model if model is not None else string_or_none(receipt_or_empty.get("model")),
            None,
            entry.commit if entry is not None else None,
        ),
        messages=transcript.messages if transcript is not None else [],
        outcome={
            "reward": reward,
            "reward_source": None if reward is None else f"{OFFICIAL_JUDGE}/candidate-resolved-fraction",
            "verdict": None,
            "metrics": _proposer_metrics(ctx, shot, receipt_or_empty, entry),
            "is_completed": is_number(exit_code) and exit_code == 0,
            "is_truncated": receipt_or_empty.get("timedOut") is True,
            "error": string_or_none(receipt_or_empty.get("error")),
        },
        cost=_proposer_cost(receipt_or_empty, transcript),
        artifacts={
            "patch_path": entry.diff_path if entry is not None else None,
            "run_dir": worktree_cwd,
            "transcript_ref": str(transcript.path) if transcript is not None else shot.path,
        },
        gap=_proposer_gap(worktree_cwd, transcript, unreadable),
    )


def _proposer_reward(ctx: LineContext, entry: CampaignEntry | None) -> int | float | None:
    # The proposer's reward is its candidate's official resolved fraction; fail-closed
    # null when the candidate has no scored entry, or no verdict on any of the round's
    # instances (no cells yet, or every one errored): 0 would say it resolved nothing.
    if entry is not None and ctx.instance_count > 0 and entry.judged_count > 0:
        return _js_number(entry.resolved_count / ctx.instance_count)
    return None


def _proposer_gap(
    worktree_cwd: str, transcript: ClaudeTranscript | None, unreadable: tuple[str, str] | None
) -> str | None:
    if unreadable is not None:
        return gaps.claude_transcripts_unreadable(worktree_cwd, *unreadable)
    if transcript is None:
        return gaps.no_claude_transcript(worktree_cwd)
    if not transcript.messages:
        return gaps.claude_transcript_empty(str(transcript.path))
    return None


def _proposer_metrics(
    ctx: LineContext, shot: ShotReceiptFile, receipt: dict[str, Any], entry: CampaignEntry | None
) -> dict[str, Any]:
    return {
        "resolved_count": entry.resolved_count if entry is not None else None,
        "instance_count": ctx.instance_count,
        "exit_code": number_or_none(receipt.get("exitCode")),
        "timed_out": receipt.get("timedOut") if isinstance(receipt.get("timedOut"), bool) else None,
        "author": shot.author,
        "max_shots": number_or_none(receipt.get("maxShots")),
        "prompt_sha256": string_or_none(receipt.get("promptSha256")),
    }


def _proposer_cost(receipt: dict[str, Any], transcript: ClaudeTranscript | None) -> dict[str, Any]:
    duration_ms = receipt.get("durationMs")
    usage = transcript.usage if transcript is not None else ClaudeUsage()  # no transcript: every count null
    return {
        "usd": number_or_none(receipt.get("costUsd")),
        # Sums over the transcript's messages: null when no message recorded the count, or
        # when the sum overflows a double.
        "tokens_in": finite_or_none(usage.tokens_in),
        "tokens_out": finite_or_none(usage.tokens_out),
        "tokens_reasoning": None,
        "cache_read": finite_or_none(usage.cache_read),
        "cache_write": finite_or_none(usage.cache_write),
        "wall_s": round_half_up(duration_ms / 1000) if is_number(duration_ms) else None,
    }
