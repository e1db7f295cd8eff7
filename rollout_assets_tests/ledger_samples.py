"""Valid `tangle.rollout.v1` line dicts for tests: start valid, break one thing per test."""

from typing import Any

SUPERVISOR_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"


def sample_line(**overrides: Any) -> dict[str, Any]:
    """A valid supervisor gap line; top-level keys in `overrides` replace the defaults.

    Every call builds fresh nested dicts, so a test may mutate the result freely.
    """
    line: dict[str, Any] = {
        "schema": "tangle.rollout.v1",
        "rollout_id": "5b0c6f1e-6d3a-5a8e-9a53-2f9d8c1b7e01",
        "parent_rollout_id": None,
        "run_id": "round-0007",
        "experiment_id": None,
        "candidate_id": "gen0-cand1",
        "generation": 0,
        "candidate_index": 1,
        "role": "supervisor",
        "task": {
            "suite": "swe-bench-verified",
            "instance_id": "astropy__astropy-12907",
            "split": "search",
            "seed": 42,
            "rep": 0,
        },
        "policy": {
            "harness": "pi-loops",
            "harness_version": None,
            "model": "claude-sonnet-4",
            "provider": "anthropic",
            "profile_commit": "3f2a9c1",
            "sampling": None,
        },
        "messages": [],
        "tool_defs": [],
        "outcome": {
            "reward": 1,
            "reward_source": "swe-arena-official-judge",
            "verdict": {"composite": 1, "notes": ["patch applies", "tests pass"]},
            "metrics": {"resolved": True, "patch_lines": 12, "judge_wall_s": 3.5, "sup_status": "done"},
            "is_completed": True,
            "is_truncated": False,
            "error": None,
            "realness_gated": False,
        },
        "cost": {
            "usd": 0.84,
            "tokens_in": None,
            "tokens_out": None,
            "tokens_reasoning": None,
            "cache_read": None,
            "cache_write": None,
            "wall_s": 312,
        },
        "artifacts": {
            "patch_path": "/rounds/r7/gen0-cand1/astropy/patch.diff",
            "run_dir": "/rounds/r7/gen0-cand1/astropy/run",
            "transcript_ref": "/rounds/r7/gen0-cand1/astropy/run/brain.jsonl",
        },
        "provenance": {
            "captured_at": "2025-01-15T10:30:00.000Z",
            "capture": "backfill",
            "gap": SUPERVISOR_GAP,
        },
    }
    line.update(overrides)
    return line


def sample_worker_messages() -> list[dict[str, Any]]:
    """A short opencode-style transcript: user, assistant with a tool call, tool result."""
    return [
        {"role": "user", "content": "Fix the failing test in astropy/io."},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Look at the test first.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"astropy/io/tests/test_x.py"}'},
                }
            ],
        },
        {"role": "tool", "content": "def test_x(): ...", "tool_call_id": "call_1", "name": "read"},
        {"role": "assistant", "content": "The fix is in place."},
    ]


def sample_worker_line(**overrides: Any) -> dict[str, Any]:
    """A valid worker line with a full transcript (so no `provenance.gap`)."""
    line = sample_line(
        rollout_id="9d4e2a70-1c3b-5f6d-8e9a-0b1c2d3e4f50",
        parent_rollout_id="5b0c6f1e-6d3a-5a8e-9a53-2f9d8c1b7e01",
        role="worker",
        messages=sample_worker_messages(),
    )
    line["policy"].update(harness="opencode", model="gpt-5", provider="openai")
    line["outcome"].update(
        reward_source="swe-arena-official-judge/inherited",
        verdict=None,
        metrics={
            "worker_cwd": "/work/w1",
            "session_agent": "build",
            "session_parent_id": None,
            "has_session": True,
        },
        is_completed=True,
    )
    line["cost"].update(usd=0.12, tokens_in=15000, tokens_out=900, tokens_reasoning=300, wall_s=95)
    line["artifacts"].update(patch_path=None, transcript_ref="opencode:ses_abc123")
    del line["provenance"]["gap"]
    line.update(overrides)
    return line
