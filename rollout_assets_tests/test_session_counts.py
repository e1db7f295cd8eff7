"""The audit's count of the messages a session's rows make does not depend on how the rows are
read: in one process or several, the sessions found by the session index or every message read
in runs of ids (audit/session_counts.py, audit/store_counts.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.audit import session_counts, store_counts
from rollout_assets.audit import stores as audit_stores
from rollout_assets.audit.worker_cwds import WorkerCwds
from rollout_assets_tests.audit_runs import count_sessions
from rollout_assets_tests.builders import session, write_opencode_db


def _rows(seed: int) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """Sessions whose messages and parts take every shape the count's rules name, with rows the
    rules pass over: ids that are NULL or BLOBs, rows that are no JSON object, orphan parts."""
    rng = random.Random(seed)
    names = [f"ses_{n:03d}" for n in range(60)]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    role = ["user", "user", "assistant", "assistant", "assistant", "system", None]
    error = [None] * 8 + [0, "", {}, [], {"name": "MessageAbortedError"}, {"name": "APIError"}, "x"]
    system = [None, "", "prompt", [""], ["", ""], ["you are"], 5]
    kinds = [
        "text",
        "text",
        "reasoning",
        "tool",
        "tool",
        "step-start",
        "step-start",
        "step-finish",
        "file",
        "compaction",
        "subtask",
        None,
    ]
    texts = [None, "", "", "words", "words", "words", 3]
    for name in names:
        for _ in range(rng.randrange(6)):
            message_id = None if rng.random() < 0.03 else f"msg_{rng.randrange(10**9):09d}"
            session_id: Any = name.encode() if rng.random() < 0.02 else name  # a BLOB is no TEXT id
            fields = {"role": rng.choice(role), "error": rng.choice(error), "system": rng.choice(system)}
            data = json.dumps({key: value for key, value in fields.items() if value is not None})
            data = rng.choice([data] * 12 + ["{not json", "[1]"])
            messages.append({"id": message_id, "session_id": session_id, "time_created": 1, "data": data})
            for _ in range(rng.randrange(8) if message_id else 0):
                body = {
                    "type": rng.choice(kinds),
                    "text": rng.choice(texts),
                    "callID": rng.choice([None, "call", 3]),
                    "ignored": rng.choice([None, None, True]),
                    "mime": rng.choice([None, "text/plain", "application/x-directory", "image/png"]),
                }
                raw = json.dumps({key: value for key, value in body.items() if value is not None})
                parts.append(
                    {
                        "id": f"prt_{rng.randrange(10**9):09d}",
                        "message_id": message_id,
                        "data": rng.choice([raw] * 12 + ["{bad", '"text"']),
                    }
                )
    parts += [
        {"id": f"prt_orphan{n}", "message_id": f"msg_gone{n}", "data": '{"type":"text","text":"x"}'}
        for n in range(3)
    ]
    return names, messages, parts


def _counts(db: Path, names: list[str], wanted: set[str]) -> dict[str, tuple[int, int, int]]:
    reading = audit_stores.read_store(db, WorkerCwds.of(f"/wt/{name}" for name in names))
    return count_sessions(reading, wanted)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_plan_and_split_counts_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    names, messages, parts = _rows(seed)
    sessions = [session(name, f"/wt/{name}") for name in names]
    whole = write_opencode_db(
        tmp_path / "whole" / "opencode.db", sessions=sessions, messages=messages, parts=parts
    )
    # The same rows in a store whose sessions are mostly others: the session index's plan.
    others = [session(f"other_{n:04d}", f"/elsewhere/{n}") for n in range(200)]
    shared = write_opencode_db(
        tmp_path / "shared" / "opencode.db", sessions=sessions + others, messages=messages, parts=parts
    )
    wanted_sets = [set(names), set(names[::3]) | {"ses_none"}]

    results = []
    monkeypatch.setattr(store_counts, "_PARALLEL_MIN_SESSIONS", 0)
    # Tallies handed on after every message: a session's add up over the flushes, and the
    # processes, as when they are held to the end.
    for cores, flush_at in ((1, 2_048), (3, 2_048), (1, 1), (3, 1)):
        monkeypatch.setattr(store_counts.os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)))
        monkeypatch.setattr(session_counts, "FLUSH_AT", flush_at)
        for db in (whole, shared):
            results.append([_counts(db, names, wanted) for wanted in wanted_sets])

    assert all(result == results[0] for result in results[1:])
    every, some = results[0]
    assert {name: every[name] for name in some} == some
    assert set(some) <= set(names[::3])
    assert sum(made for _, _, made in every.values()) > 30
    assert sum(narrow for _, narrow, _ in every.values()) > 15
    assert sum(1 for _, _, made in every.values() if made) > 15
