"""Transcripts a rebuilt ledger would drop or shorten (backfill/losses.py), on small ledger files.

The lines here carry only the fields the comparison reads; test_stages.py and test_assets.py
run the same comparison on real rounds whose stores lost a session or a transcript.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollout_assets.backfill.losses import TranscriptDigest, lost_transcripts

CANDIDATE = "gen0-cand0"


def supervisor(instance: str = "a__a-1", rep: int = 0, *, run: str = "r1") -> dict[str, Any]:
    return {"rollout_id": f"{run}-sup-{instance}-{rep}", "role": "supervisor", "candidate_id": CANDIDATE,
            "task": {"instance_id": instance, "rep": rep}, "messages": [], "artifacts": {"transcript_ref": None}}


def chat(messages: int, text: str = "go") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}] * messages


def worker(session: str | None, messages: int = 2, *, instance: str = "a__a-1", rep: int = 0, run: str = "r1",
           text: str = "go") -> dict[str, Any]:
    """A worker line of the cell (instance, rep); `session` None: a gap line."""
    return {"rollout_id": f"{run}-{session}", "role": "worker", "candidate_id": CANDIDATE,
            "task": {"instance_id": instance, "rep": rep}, "messages": chat(messages if session else 0, text),
            "artifacts": {"transcript_ref": f"opencode:{session}" if session else None}}


def proposer(transcript: str | None, messages: int = 2, *, shot: int = 0, folder: str = "/claude/p") -> dict[str, Any]:
    """A proposer line of shot `shot`; `transcript` None: a gap line."""
    return {"rollout_id": f"shot-{shot}", "role": "proposer", "candidate_id": CANDIDATE,
            "task": {"instance_id": CANDIDATE, "rep": shot}, "messages": chat(messages if transcript else 0),
            "artifacts": {"transcript_ref": f"{folder}/{transcript}.jsonl" if transcript else "/round/receipt.json"}}


def ledger(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rollout-ledger.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def lost(tmp_path: Path, current: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    return [transcript.describe() for transcript in lost_transcripts(ledger(tmp_path, current), new)]


CURRENT = [supervisor(), worker("ses_1", 8), worker("ses_2"), supervisor("b__b-2"), worker("ses_3", instance="b__b-2"),
           proposer("t0", shot=0), proposer("t1", shot=1)]


def test_the_same_transcripts_under_another_run_id_order_and_projects_folder_lose_nothing(tmp_path: Path) -> None:
    rebuilt = [proposer("t1", shot=1, folder="/moved"), proposer("t0", shot=0, folder="/moved"),
               supervisor("b__b-2", run="r2"), worker("ses_3", instance="b__b-2", run="r2"),
               supervisor(run="r2"), worker("ses_2", run="r2"), worker("ses_1", 9, run="r2")]  # ses_1 grew

    assert lost(tmp_path, CURRENT, rebuilt) == []


def test_a_worker_line_become_a_gap_loses_its_transcript(tmp_path: Path) -> None:
    rebuilt = [supervisor(), worker(None), worker("ses_2"), supervisor("b__b-2"), worker("ses_3", instance="b__b-2"),
               proposer("t0", shot=0), proposer("t1", shot=1)]

    assert lost(tmp_path, CURRENT, rebuilt) == ["worker opencode:ses_1 of gen0-cand0 a__a-1 rep 0 (8 messages, dropped)"]


def test_a_session_gone_while_another_of_its_cell_stays_is_lost(tmp_path: Path) -> None:
    rebuilt = [supervisor(), worker("ses_2"), supervisor("b__b-2"), worker("ses_3", instance="b__b-2"),
               proposer("t0", shot=0), proposer("t1", shot=1)]

    assert lost(tmp_path, CURRENT, rebuilt) == ["worker opencode:ses_1 of gen0-cand0 a__a-1 rep 0 (8 messages, dropped)"]


def test_a_cell_that_can_no_longer_list_its_workers_loses_their_transcripts(tmp_path: Path) -> None:
    # Its result.json is gone: the supervisor line stays, with no worker line.
    rebuilt = [supervisor(), supervisor("b__b-2"), worker("ses_3", instance="b__b-2"), proposer("t0", shot=0),
               proposer("t1", shot=1)]

    assert len(lost(tmp_path, CURRENT, rebuilt)) == 2


def test_a_shortened_session_loses_the_messages_it_no_longer_has(tmp_path: Path) -> None:
    rebuilt = [supervisor(), worker("ses_1", 1), worker("ses_2"), supervisor("b__b-2"), worker("ses_3", instance="b__b-2"),
               proposer("t0", shot=0), proposer("t1", shot=1)]

    assert lost(tmp_path, CURRENT, rebuilt) == [
        "worker opencode:ses_1 of gen0-cand0 a__a-1 rep 0 (8 messages of 16 characters, shortened to 1 of 2)"
    ]


def test_a_session_whose_parts_became_unreadable_is_shortened_though_its_messages_stay(tmp_path: Path) -> None:
    # A malformed part is skipped: the message stays, with less (or no) text.
    rebuilt = [supervisor(), worker("ses_1", 8, text=""), worker("ses_2"), supervisor("b__b-2"),
               worker("ses_3", instance="b__b-2"), proposer("t0", shot=0), proposer("t1", shot=1)]

    assert lost(tmp_path, CURRENT, rebuilt) == [
        "worker opencode:ses_1 of gen0-cand0 a__a-1 rep 0 (8 messages of 16 characters, shortened to 8 of 0)"
    ]


def test_a_proposer_line_become_a_gap_or_joined_to_another_shots_transcript_is_a_loss(tmp_path: Path) -> None:
    # Shot 0's transcript was collected; the window then gives shot 0 shot 1's transcript.
    workers = [line for line in CURRENT if line["role"] != "proposer"]
    swapped = lost(tmp_path, CURRENT, [*workers, proposer("t1", shot=0), proposer("t1", shot=1)])
    gap = lost(tmp_path, CURRENT, [*workers, proposer(None, shot=0), proposer("t1", shot=1)])

    assert swapped == gap == ["proposer t0.jsonl of gen0-cand0 gen0-cand0 shot 0 (2 messages, dropped)"]


def test_transcripts_whose_cell_or_shot_left_the_round_are_dropped_too(tmp_path: Path) -> None:
    """A cleaned-up or archived input cannot be told from a deliberate removal: the operator
    who means it moves the ledger aside."""
    assert len(lost(tmp_path, CURRENT, [supervisor("b__b-2"), worker("ses_3", instance="b__b-2")])) == 4


def test_gap_lines_and_unreadable_lines_of_the_current_ledger_hold_nothing_to_lose(tmp_path: Path) -> None:
    path = ledger(tmp_path, [supervisor(), worker(None), proposer(None)])
    with path.open("a") as handle:
        handle.write('{"role": "worker", "messages": [1], "cut off\n42\n[]\n')

    assert lost_transcripts(path, [supervisor(), worker(None), proposer(None)]) == []


def test_the_digest_is_the_transcripts_and_their_lengths_whatever_the_order() -> None:
    def digest(lines: list[dict[str, Any]]) -> TranscriptDigest:
        result = TranscriptDigest()
        for line in lines:
            result.add(line)
        return result

    forward = digest([supervisor(), worker("ses_1"), worker(None), proposer("t0")])
    backward = digest([proposer("t0", folder="/moved"), worker("ses_1", run="r2")])
    halves = digest([worker("ses_1")])
    halves.merge(digest([proposer("t0")]))

    assert forward == backward == halves
    assert forward.count == 2
    assert TranscriptDigest.from_json(forward.to_json()) == forward
    assert digest([worker("ses_1", 3), proposer("t0")]) != forward  # a message more
    assert digest([worker("ses_1", text="went"), proposer("t0")]) != forward  # more text
    assert digest([worker("ses_1"), proposer("t1")]) != forward  # another transcript
    assert [TranscriptDigest.from_json(damaged) for damaged in (None, [], {"count": 1}, {"count": 1, "digest": "xyz"})] == [None] * 4
