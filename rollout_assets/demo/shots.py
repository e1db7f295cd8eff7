"""Writing one proposer shot: its receipt under proposer-shots/ and its Claude Code transcripts.

OWNS the receipt (flat, or per author under proposer-shots/<author>/) and the shot-level planted
cases: a timed-out shot, a receipt without timestamps, a truncated receipt, a missing project
folder, a late transcript outside the shot's window, a sub-agent's own file (beside the session
or in its subagents/ folder), two sessions tied for the shot, sessions at the window's edges and
a transcript cut mid-line. The transcript lines themselves are claude_transcripts.py's.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from rollout_assets.demo.claude_transcripts import (
    last_timestamp_ms,
    opening_line,
    proposer_transcript,
    sidechain_only_lines,
)
from rollout_assets.demo.files import compact, pretty, write_jsonl, write_text
from rollout_assets.demo.plan import RoundPlan, Shot
from rollout_assets.demo.world import MINUTE, NON_ASCII_SAMPLE, PROPOSER_RECEIPT_MODEL, iso

_TIMED_OUT_MS = 15 * MINUTE
# How far before its receipt's startedAt and after its completedAt a transcript may start and
# still be the shot's (docs/input-formats.md §6): the edge-of-window case plants a session on the
# opening edge and one 1 ms past the closing edge.
WINDOW_SLACK_MS = 120_000


def write_shot(plan: RoundPlan, shot: Shot, rng: random.Random) -> None:
    """Write the transcripts of `shot` (its own, a late one, a sub-agent file), then its receipt."""
    prompt = _proposer_prompt(plan, shot)
    transcript_end = shot.start_ms + rng.randint(60_000, 600_000)
    if "missing_transcript_folder" not in shot.cases:
        transcript_end = _write_session(plan, shot, prompt, rng)
    if "transcript_outside_window" in shot.cases:
        late = plan.transcript_path(shot, "late")
        write_jsonl(
            late,
            proposer_transcript(plan, shot, late.stem, shot.late_start_ms, prompt, rng, variant="late").lines,
        )
    if "sidechain-only-file" in shot.cases:
        agent_file = plan.transcript_path(shot, "sidechain")
        lines_of_agent = sidechain_only_lines(plan, shot, agent_file.stem, shot.start_ms + 90_000, rng)
        write_jsonl(agent_file, lines_of_agent)
    if "truncated-transcript-line" in shot.cases:
        # An earlier session in the worktree, killed while writing its first line: no line is whole.
        cut = plan.transcript_path(shot, "cut")
        _write_cut_jsonl(cut, [opening_line(plan, shot, cut.stem, shot.start_ms - 5 * MINUTE, prompt, rng)])
    receipt_path = plan.receipt_path(shot)
    if "receipt_not_json" in shot.cases:
        # The harness was killed while writing its receipt.
        write_text(receipt_path, '{"receipt": {"startedAt": "' + iso(shot.start_ms) + '", "harness": "clau')
        return
    receipt = _receipt(plan, shot, prompt, transcript_end, rng)
    if "edge-of-window-transcript" in shot.cases:
        # A later session in the worktree, starting 1 ms after the shot's window closed.
        past = plan.transcript_path(shot, "past-window")
        past_start = shot.start_ms + receipt["durationMs"] + WINDOW_SLACK_MS + 1
        write_jsonl(past, proposer_transcript(plan, shot, past.stem, past_start, prompt, rng, "past-window").lines)
    write_text(receipt_path, pretty({"receipt": receipt}))


def _write_session(plan: RoundPlan, shot: Shot, prompt: str, rng: random.Random) -> int:
    """Write the shot's own session file (and its sub-agent's file, and a session tied with it
    for the shot, when planted); return when the session ends."""
    path = plan.transcript_path(shot)
    start_ms = shot.start_ms + rng.randint(2_000, 25_000)
    if "edge-of-window-transcript" in shot.cases:
        # Its first line exactly on the window's opening edge: Claude Code's clock two minutes,
        # to the millisecond, behind the harness's.
        start_ms = shot.start_ms - WINDOW_SLACK_MS
    agent_path = _agent_file(plan, shot)
    agent_id = agent_path.stem.removeprefix("agent-") if agent_path is not None else None
    session = proposer_transcript(plan, shot, path.stem, start_ms, prompt, rng, agent_id=agent_id)
    if "truncated-transcript-line" in shot.cases:
        _write_cut_jsonl(path, session.lines)  # Claude Code was killed while writing its last line
    else:
        write_jsonl(path, session.lines)
    if agent_path is not None:
        write_jsonl(agent_path, session.agent_lines)
    if "tied-transcripts" in shot.cases:
        # A second session in the worktree, starting as long before the shot's start as this one after it.
        tied = plan.transcript_path(shot, "tied")
        tied_start = 2 * shot.start_ms - start_ms
        write_jsonl(tied, proposer_transcript(plan, shot, tied.stem, tied_start, prompt, rng, "tied").lines)
    return last_timestamp_ms(session.lines)


def _agent_file(plan: RoundPlan, shot: Shot) -> Path | None:
    """Where the shot's Task sub-agent writes its lines when not inline: in the session's
    subagents/ folder (2.1.x) or beside the session files (2.0.x)."""
    if "subagents-folder" in shot.cases:
        return plan.transcript_path(shot, "subagents")
    if "agent-file-of-another-session" in shot.cases:
        return plan.transcript_path(shot, "sidechain")
    return None


def _write_cut_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    """JSON lines whose writer was killed mid-line: the last is half written, without its newline."""
    *whole, last = [compact(line) for line in lines]
    write_text(path, "".join(text + "\n" for text in whole) + last[: len(last) // 2])


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
    if shot.cases & {"receipt_without_timestamps", "sidechain-only-file", "truncated-transcript-line"}:
        del receipt["startedAt"], receipt["completedAt"]  # an older harness wrote no times
    if "truncated-transcript-line" in shot.cases:
        # The harness killed Claude Code: a shell reports SIGKILL as 128 + 9 (as 124 for `timeout`).
        receipt["exitCode"], receipt["error"] = 137, "proposer killed by signal 9 (SIGKILL)"
    if "timed-out-exit-zero" in shot.cases:
        # tangle-network/agent-runtime: runLocalHarness (src/mcp/local-harness.ts) reports `timedOut`
        # "even when a TERM-aware child exits zero"; shotReceipt (src/improvement/agentic-generator.ts)
        # keeps that exit code and writes the shot's failure as an object, not a string.
        completed = shot.start_ms + _TIMED_OUT_MS + 4_000  # Claude Code exited 4 s after SIGTERM
        receipt |= {"completedAt": iso(completed), "durationMs": completed - shot.start_ms}
        receipt |= {"exitCode": 0, "timedOut": True, "killedBySignal": None}
        receipt["error"] = {"name": "Error", "message": "agenticGenerator: author shot timed out"}
    return receipt


def _proposer_prompt(plan: RoundPlan, shot: Shot) -> str:
    author = f" (author {shot.author})" if shot.author else ""
    return (
        f"You are proposer {shot.candidate_id}{author}, shot {shot.shot}, of run {plan.run_id}. "
        "Read the baseline failures under improve-run/ and change the supervisor profile in "
        "profiles/swe/ so more SWE-bench instances resolve. Commit the change on this worktree's branch. "
        f"Some fixtures carry non-ASCII text: {NON_ASCII_SAMPLE}"
    )
