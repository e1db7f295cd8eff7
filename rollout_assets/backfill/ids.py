"""Deterministic rollout ids (rollout-v1.md, Ids).

The seed minted random UUIDs, so every re-run of a round produced different ids and no
two ledgers of the same round could be joined or deduplicated. Here an id is a UUIDv5 of
the invocation's identity, so re-materializing a round yields the same ids.
"""

from __future__ import annotations

import uuid

# The one fixed namespace of every rollout id this project mints:
# uuid5(NAMESPACE_URL, "tangle.rollout.v1") = 2d6b1b0e-... (see test_backfill.py).
ROLLOUT_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1")


def _rollout_id(name: str) -> str:
    return str(uuid.uuid5(ROLLOUT_ID_NAMESPACE, name))


def supervisor_rollout_id(run_id: str, candidate_id: str, scenario_id: str, rep: int) -> str:
    return _rollout_id(f"{run_id}|supervisor|{candidate_id}|{scenario_id}|{rep}")


def worker_rollout_id(supervisor_id: str, worker_cwd: str, session_id: str | None) -> str:
    return _rollout_id(f"{supervisor_id}|{worker_cwd}|{session_id if session_id is not None else '-'}")


def proposer_rollout_id(run_id: str, receipt_relative_path: str) -> str:
    return _rollout_id(f"{run_id}|proposer|{receipt_relative_path}")
