"""The worker line: one opencode session of a cell, or the gap line of a worker cwd without one
(docs/line-format.md, "Worker lines").

Pure, like backfill/lines.py: the session row and its transcript are already read.
"""

from __future__ import annotations

import math
from typing import Any

from rollout_assets.backfill import gaps
from rollout_assets.backfill.ids import worker_rollout_id
from rollout_assets.backfill.lines import OFFICIAL_JUDGE, LineContext, line_dict, policy_dict
from rollout_assets.io import finite_or_none, round_half_up
from rollout_assets.sources.opencode import OpencodeSession
from rollout_assets.sources.opencode_transcript import SessionTranscript


def worker_line(
    ctx: LineContext,
    supervisor: dict[str, Any],
    worker_cwd: str,
    session: OpencodeSession | None,
    transcript: SessionTranscript | None,
    *,
    store_available: bool,
    store_problem: str | None = None,
) -> dict[str, Any]:
    """One opencode worker session of a cell (or the gap line of a cwd without one).

    Everything the worker shares with its episode (coordinates, task, profile commit,
    run dir, reward) is taken from the supervisor line, so the two cannot disagree.
    `store_problem` says why the store could not be read, when it could not.
    """
    reward = supervisor["outcome"]["reward"]
    messages = transcript.messages if transcript is not None else []
    error = transcript.error if transcript is not None else None
    return line_dict(
        ctx,
        rollout_id=worker_rollout_id(supervisor["rollout_id"], worker_cwd, session.id if session else None),
        parent_rollout_id=supervisor["rollout_id"],
        generation=supervisor["generation"],
        candidate_index=supervisor["candidate_index"],
        role="worker",
        task=supervisor["task"],
        policy=policy_dict(
            "opencode", *_worker_model(session, transcript), supervisor["policy"]["profile_commit"]
        ),
        messages=messages,
        outcome={
            # Episode-level credit: the worker has no verdict of its own.
            "reward": reward,
            "reward_source": None if reward is None else f"{OFFICIAL_JUDGE}/inherited",
            "verdict": None,
            "metrics": _worker_metrics(worker_cwd, session, transcript),
            # A session with no readable parts is a gap line, not a completed invocation:
            # training filters keyed on is_completed alone would otherwise pull empty transcripts.
            # One that ended in an error (its last assistant message's) did not complete either.
            "is_completed": session is not None and len(messages) > 0 and error is None,
            "is_truncated": False,
            "error": error,
        },
        cost=_worker_cost(session, transcript),
        artifacts={
            "patch_path": None,
            "run_dir": supervisor["artifacts"]["run_dir"],
            "transcript_ref": f"opencode:{session.id}" if session is not None else None,
        },
        gap=_worker_gap(
            worker_cwd, session, messages, store_available=store_available, problem=store_problem
        ),
    )


def _worker_model(
    session: OpencodeSession | None, transcript: SessionTranscript | None
) -> tuple[str | None, str | None]:
    """The session's model, else (a store from before `session.model`, or a session imported
    from opencode's JSON files) the model its assistant messages record."""
    if session is None:
        return None, None
    if session.model_id is None and transcript is not None:
        return transcript.model_id, transcript.provider_id
    return session.model_id, session.provider_id


def _worker_metrics(
    worker_cwd: str, session: OpencodeSession | None, transcript: SessionTranscript | None
) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "worker_cwd": worker_cwd,
        "session_agent": session.agent if session is not None else None,
        "session_parent_id": session.parent_id if session is not None else None,
        "has_session": session is not None,
    }
    if transcript is not None and transcript.attachments:
        # Files the model was handed (images, PDFs: mime type -> count) that a text transcript
        # cannot carry: counted, so a filter can tell the transcript is not all the model saw.
        metrics["attachments"] = dict(sorted(transcript.attachments.items()))
    return metrics


def _worker_gap(
    worker_cwd: str,
    session: OpencodeSession | None,
    messages: list[dict[str, Any]],
    *,
    store_available: bool,
    problem: str | None,
) -> str | None:
    if messages:
        return None
    if session is None:
        if store_available:
            return gaps.no_opencode_session(worker_cwd)
        return gaps.opencode_unavailable(worker_cwd, problem)
    return gaps.opencode_session_empty(session.id)


def _worker_cost(session: OpencodeSession | None, transcript: SessionTranscript | None) -> dict[str, Any]:
    if session is None:
        return {name: None for name in _COST_FIELDS}
    wall_s = None
    if session.time_created is not None and session.time_updated is not None:
        elapsed_ms = session.time_updated - session.time_created
        # Finite times so far apart that their difference overflows have no duration either.
        wall_s = round_half_up(elapsed_ms / 1000) if math.isfinite(elapsed_ms) else None
    spend = (
        session.cost_usd,
        session.tokens_input,
        session.tokens_output,
        session.tokens_reasoning,
        session.tokens_cache_read,
        session.tokens_cache_write,
    )
    usage = transcript.usage if transcript is not None else None
    if usage is not None and usage.recorded and all(value is None or value == 0 for value in spend):
        # The session's columns are absent (a store from before them) or all 0 (opencode's
        # import of its JSON files writes 0 there) while its assistant messages recorded their
        # spend: the messages' sums, not a 0 that was never measured.
        spend = tuple(
            finite_or_none(value)
            for value in (
                usage.cost_usd,
                usage.tokens_input,
                usage.tokens_output,
                usage.tokens_reasoning,
                usage.tokens_cache_read,
                usage.tokens_cache_write,
            )
        )
    return {**dict(zip(_COST_FIELDS, spend)), "wall_s": wall_s}


_COST_FIELDS = ("usd", "tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write", "wall_s")
