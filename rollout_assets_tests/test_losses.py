"""Transcripts a rebuilt ledger would lose (backfill/losses.py), on small ledger files.

The lines here carry only the fields the comparison reads; test_stages.py and test_assets.py
run the same comparison on real rounds whose stores lost a session or a transcript.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollout_assets.backfill.losses import TranscriptDigest, lost_transcripts

SUPERVISOR = "sup-1"
CWD = "/clones/w1"


def worker(rollout_id: str, *, messages: int = 2, parent: str = SUPERVISOR, cwd: str = CWD) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "parent_rollout_id": parent,
        "role": "worker",
        "candidate_id": "gen0-cand0",
        "task": {"instance_id": "a__a-1"},
        "messages": [{"role": "user", "content": "go"}] * messages,
        "outcome": {"metrics": {"worker_cwd": cwd}},
        "artifacts": {"transcript_ref": f"opencode:{rollout_id}" if messages else None},
    }


def proposer(rollout_id: str, *, messages: int = 2) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "parent_rollout_id": None,
        "role": "proposer",
        "candidate_id": "gen0-cand0",
        "task": {"instance_id": "gen0-cand0"},
        "messages": [{"role": "user", "content": "go"}] * messages,
        "outcome": {"metrics": {}},
        "artifacts": {"transcript_ref": f"/claude/{rollout_id}.jsonl" if messages else "/round/receipt.json"},
    }


def supervisor(rollout_id: str = SUPERVISOR) -> dict[str, Any]:
    return {"rollout_id": rollout_id, "parent_rollout_id": None, "role": "supervisor", "messages": []}


def ledger(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rollout-ledger.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def lost_ids(tmp_path: Path, current: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    return [lost.rollout_id for lost in lost_transcripts(ledger(tmp_path, current), new)]


def test_the_same_transcripts_in_another_order_lose_nothing(tmp_path: Path) -> None:
    lines = [supervisor(), worker("w1"), worker("w2"), proposer("p1")]

    assert lost_ids(tmp_path, lines, [proposer("p1"), worker("w2"), worker("w1")]) == []


def test_a_worker_line_become_a_gap_loses_its_transcript(tmp_path: Path) -> None:
    current = [supervisor(), worker("w1"), worker("w2")]
    rebuilt = [worker("gap-for-cwd", messages=0), worker("w2")]

    (lost,) = lost_transcripts(ledger(tmp_path, current), rebuilt)

    assert (lost.role, lost.rollout_id, lost.transcript_ref) == ("worker", "w1", "opencode:w1")
    assert "worker opencode:w1 (gen0-cand0 a__a-1, rollout w1)" == lost.describe()


def test_a_session_gone_while_another_of_its_cwd_stays_is_lost(tmp_path: Path) -> None:
    # No gap line at all: the cwd's other session still joins.
    assert lost_ids(tmp_path, [worker("w1"), worker("w2")], [worker("w2")]) == ["w1"]


def test_a_session_whose_parts_are_gone_is_lost_although_its_id_stays(tmp_path: Path) -> None:
    assert lost_ids(tmp_path, [worker("w1")], [worker("w1", messages=0)]) == ["w1"]


def test_a_proposer_line_become_a_gap_loses_its_transcript(tmp_path: Path) -> None:
    assert lost_ids(tmp_path, [proposer("p1"), proposer("p2")], [proposer("p1"), proposer("p2", messages=0)]) == ["p2"]


def test_transcripts_whose_invocation_left_the_round_are_not_lost(tmp_path: Path) -> None:
    current = [worker("w1"), worker("w2", cwd="/clones/dropped"), worker("w3", parent="sup-removed"), proposer("p1")]

    assert lost_ids(tmp_path, current, [worker("w1")]) == []


def test_gap_lines_and_unreadable_lines_of_the_current_ledger_hold_nothing_to_lose(tmp_path: Path) -> None:
    path = ledger(tmp_path, [worker("gap", messages=0), proposer("p0", messages=0)])
    with path.open("a") as handle:
        handle.write('{"role": "worker", "messages": [1], "cut off\n')

    assert lost_transcripts(path, [worker("other"), proposer("p0", messages=0)]) == []


def test_the_digest_is_the_set_of_transcript_ids_whatever_the_order() -> None:
    def digest(lines: list[dict[str, Any]]) -> TranscriptDigest:
        result = TranscriptDigest()
        for line in lines:
            result.add(line)
        return result

    forward = digest([supervisor(), worker("w1"), worker("w2", messages=0), proposer("p1")])
    backward = digest([proposer("p1"), worker("w1")])
    halves = digest([worker("w1")])
    halves.merge(digest([proposer("p1")]))

    assert forward == backward == halves
    assert forward.count == 2
    assert TranscriptDigest.from_json(forward.to_json()) == forward
    assert digest([worker("w1"), proposer("p2")]) != forward
    assert digest([worker("w1")]) != forward
