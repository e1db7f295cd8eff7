"""Writing one proposer shot: its receipt under proposer-shots/ and its Claude Code transcripts.

OWNS the receipt (flat, or per author under proposer-shots/<author>/) and the shot-level planted
cases: a timed-out shot, a receipt without timestamps, a truncated receipt, a missing project
folder, a late transcript outside the shot's window and a sub-agent's own file. The transcript
lines themselves are claude_transcripts.py's.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from rollout_assets.demo.claude_transcripts import (
    last_timestamp_ms,
    proposer_transcript,
    sidechain_only_lines,
)
from rollout_assets.demo.files import pretty, write_jsonl, write_text
from rollout_assets.demo.plan import RoundPlan, Shot
from rollout_assets.demo.world import MINUTE, NON_ASCII_SAMPLE, PROPOSER_RECEIPT_MODEL, iso

_TIMED_OUT_MS = 15 * MINUTE


def write_shot(plan: RoundPlan, shot: Shot, rng: random.Random) -> None:
    """Write the transcripts of `shot` (its own, a late one, a sub-agent file), then its receipt."""
    prompt = _proposer_prompt(plan, shot)
    lines: list[dict[str, Any]] = []
    transcript_end = shot.start_ms + rng.randint(60_000, 600_000)
    if "missing_transcript_folder" not in shot.cases:
        session_id = plan.transcript_path(shot).stem
        start_ms = shot.start_ms + rng.randint(2_000, 25_000)
        lines = proposer_transcript(plan, shot, session_id, start_ms, prompt, rng)
        transcript_end = last_timestamp_ms(lines)
        write_jsonl(plan.transcript_path(shot), lines)
    if "transcript_outside_window" in shot.cases:
        late = plan.transcript_path(shot, "late")
        write_jsonl(
            late, proposer_transcript(plan, shot, late.stem, shot.late_start_ms, prompt, rng, variant="late")
        )
    if "sidechain-only-file" in shot.cases:
        agent_file = plan.transcript_path(shot, "sidechain")
        lines_of_agent = sidechain_only_lines(plan, shot, agent_file.stem, shot.start_ms + 90_000, rng)
        write_jsonl(agent_file, lines_of_agent)
    receipt_path = plan.receipt_path(shot)
    if "receipt_not_json" in shot.cases:
        # The harness was killed while writing its receipt.
        write_text(receipt_path, '{"receipt": {"startedAt": "' + iso(shot.start_ms) + '", "harness": "clau')
        return
    write_text(receipt_path, pretty({"receipt": _receipt(plan, shot, prompt, transcript_end, rng)}))


def _receipt(
    plan: RoundPlan, shot: Shot, prompt: str, transcript_end: int, rng: random.Random
) -> dict[str, Any]:
    timed_out = "timed_out_shot" in shot.cases
    completed = shot.start_ms + _TIMED_OUT_MS if timed_out else transcript_end + rng.randint(3_000, 20_000)
    receipt: dict[str, Any] = {
        "startedAt": iso(shot.start_ms),
        "completedAt": iso(completed),
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


def _proposer_prompt(plan: RoundPlan, shot: Shot) -> str:
    author = f" (author {shot.author})" if shot.author else ""
    return (
        f"You are proposer {shot.candidate_id}{author}, shot {shot.shot}, of run {plan.run_id}. "
        "Read the baseline failures under improve-run/ and change the supervisor profile in "
        "profiles/swe/ so more SWE-bench instances resolve. Commit the change on this worktree's branch. "
        f"Some fixtures carry non-ASCII text: {NON_ASCII_SAMPLE}"
    )
