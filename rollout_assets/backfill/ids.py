"""Deterministic rollout ids (docs/line-format.md, Ids).

The seed minted random UUIDs, so every re-run of a round produced different ids and no
two ledgers of the same round could be joined or deduplicated. Here an id is a UUIDv5 of
the invocation's identity, so re-materializing a round yields the same ids.
"""

from __future__ import annotations

import hashlib
import uuid

# The one fixed namespace of every rollout id this project mints:
# uuid5(NAMESPACE_URL, "tangle.rollout.v1") = 2d6b1b0e-... (see test_backfill.py).
ROLLOUT_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1")


def _rollout_id(name: str) -> str:
    """`uuid.uuid5(ROLLOUT_ID_NAMESPACE, name)`, but for names holding a lone surrogate too (a
    torn `\\ud83d` escape in a scenarioId, a file name that is not UTF-8): uuid5 encodes the
    name as strict UTF-8 and would fail. For every other name the bytes, and the id, are the same."""
    digest = hashlib.sha1(ROLLOUT_ID_NAMESPACE.bytes + name.encode("utf-8", "surrogatepass")).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def supervisor_rollout_id(run_id: str, candidate_id: str, scenario_id: str, rep: int) -> str:
    return _rollout_id(f"{run_id}|supervisor|{candidate_id}|{scenario_id}|{rep}")


def worker_rollout_id(supervisor_id: str, worker_cwd: str, session_id: str | None) -> str:
    return _rollout_id(f"{supervisor_id}|{worker_cwd}|{session_id if session_id is not None else '-'}")


def proposer_rollout_id(run_id: str, receipt_relative_path: str) -> str:
    return _rollout_id(f"{run_id}|proposer|{receipt_relative_path}")


def subagent_rollout_id(proposer_id: str, transcript_file: str, agent_key: str) -> str:
    """A sub-agent conversation of a proposer's transcript: named by the proposer line's id, the
    file its lines are in (its name in the project folder: `S.jsonl`, `agent-A.jsonl` or
    `S/subagents/agent-A.jsonl`) and the `uuid` of the line that starts it."""
    return _rollout_id(f"{proposer_id}|agent|{transcript_file}|{agent_key}")
