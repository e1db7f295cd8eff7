"""Sub-agent conversations and the one-to-one join, end to end on a small round written here:
the backfill's lines, and the checks on a ledger that drops a sub-agent line, joins one
transcript to two shots, or reads again the lines Claude Code wrote twice.

The transcripts are in the shapes Claude Code writes (docs/input-formats.md §5): inline
`isSidechain: true` lines chained by `parentUuid` (1.0.x), an `agent-<id>.jsonl` file beside
the session whose lines carry the session's `sessionId` and an `agentId` (2.0.x), and one in
the session's `<session id>/subagents/` folder (2.1.x)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from rollout_assets import audit
from rollout_assets.audit import AuditResult
from rollout_assets.ledger import write_ledger
from rollout_assets.sources import claude as claude_reader
from rollout_assets.sources.claude import claude_project_slug
from rollout_assets_tests.backfill_runs import backfill
from rollout_assets_tests.builders import (
    assistant_line,
    campaign_dir,
    cell,
    usage,
    user_line,
    write_cell,
    write_json,
    write_transcript,
)

SHOT0 = {"startedAt": "2025-01-01T10:00:00.000Z", "completedAt": "2025-01-01T10:10:00.000Z", "exitCode": 0}
SHOT1 = {"startedAt": "2025-01-01T10:11:00.000Z", "completedAt": "2025-01-01T10:20:00.000Z", "exitCode": 0}


def _line(
    kind: str, uuid: str, parent: str | None, session: str, *args: Any, **fields: Any
) -> dict[str, Any]:
    build = user_line if kind == "user" else assistant_line
    return build(*args, uuid=uuid, parentUuid=parent, sessionId=session, **fields)


def _round(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A round of one candidate with two shots in one worktree whose windows (±120 s) both
    cover both transcripts, and whose closest is the same: s-a starts 10:10:50 (10 s before
    shot 1's start, 650 s after shot 0's), s-b 10:11:40 (40 s, 700 s). The first holds two inline sub-agents and has an agent file in
    its subagents folder; the second an agent file beside it."""
    out_dir = (tmp_path / "round").absolute()
    write_cell(campaign_dir(out_dir), "a", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 0), "a", cell("a__a-1", 0))
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": SHOT0})
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot1.json", {"receipt": SHOT1})
    claude = tmp_path / "claude"
    folder = claude / claude_project_slug(str(out_dir / "proposer-wt" / "gen0-cand0"))
    write_transcript(
        folder / "s-a.jsonl",
        [
            _line("user", "a1", None, "s-a", "improve the profile", timestamp="2025-01-01T10:10:50.000Z"),
            _line("user", "x1", None, "s-a", "sub task X", isSidechain=True),
            _line("user", "y1", None, "s-a", "sub task Y", isSidechain=True),
            _line(
                "assistant",
                "x2",
                "x1",
                "s-a",
                "msg_x",
                [{"type": "text", "text": "X"}],
                usage=usage(5, 2),
                isSidechain=True,
            ),
            _line(
                "assistant",
                "x3",
                "x2",
                "s-a",
                "msg_x",
                [{"type": "text", "text": "X2"}],
                usage=usage(5, 9),
                isSidechain=True,
            ),
            _line(
                "assistant",
                "y2",
                "y1",
                "s-a",
                "msg_y",
                [{"type": "text", "text": "Y"}],
                usage=usage(7, 3),
                isSidechain=True,
            ),
            _line(
                "assistant", "a2", "a1", "s-a", "msg_a", [{"type": "text", "text": "done"}], usage=usage(1, 1)
            ),
        ],
    )
    (folder / "s-a" / "subagents").mkdir(parents=True)
    write_transcript(
        folder / "s-a" / "subagents" / "agent-f00d.jsonl",
        [
            _line("user", "z1", None, "s-a", "nested task", isSidechain=True, agentId="f00d"),
            _line(
                "assistant",
                "z2",
                "z1",
                "s-a",
                "msg_z",
                [{"type": "text", "text": "Z"}],
                usage=usage(2, 4),
                isSidechain=True,
                agentId="f00d",
            ),
        ],
    )
    write_transcript(
        folder / "s-b.jsonl",
        [
            _line("user", "b1", None, "s-b", "second shot", timestamp="2025-01-01T10:11:40.000Z"),
            _line(
                "assistant", "b2", "b1", "s-b", "msg_b", [{"type": "text", "text": "ok"}], usage=usage(1, 1)
            ),
        ],
    )
    write_transcript(
        folder / "agent-beef.jsonl",
        [
            _line("user", "w1", None, "s-b", "beside task", isSidechain=True, agentId="beef"),
            _line(
                "assistant",
                "w2",
                "w1",
                "s-b",
                "msg_w",
                [{"type": "text", "text": "W"}],
                usage=usage(3, 3),
                isSidechain=True,
                agentId="beef",
            ),
        ],
    )
    return out_dir, claude, tmp_path / "none.db"


def _checks(out_dir: Path, claude: Path, store: Path, ledger: Path) -> dict[str, AuditResult]:
    inputs = audit.recount_inputs(out_dir, store, claude_projects=claude)
    lines = audit.recount_ledger(ledger)
    return {
        "order": audit.inputs_match_verdict(inputs, lines),
        "integrity": audit.integrity_verdict(lines),
        "gaps": audit.gaps_warranted_verdict(inputs, lines),
        "usage": audit.usage_verdict(inputs, lines),
    }


def test_sub_agents_follow_their_proposer_and_the_join_is_one_to_one(tmp_path: Path) -> None:
    out_dir, claude, store = _round(tmp_path)

    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)

    lines = [line for line in run.lines if line["role"] in ("proposer", "agent")]
    shape = [(line["role"], Path(line["artifacts"]["transcript_ref"]).name) for line in lines]
    # Alone, both shots would take s-a: shot 1 (10 s from it) wins it, shot 0 takes its next, s-b.
    assert shape == [
        ("proposer", "s-b.jsonl"),
        ("agent", "agent-beef.jsonl"),
        ("proposer", "s-a.jsonl"),
        ("agent", "s-a.jsonl"),
        ("agent", "s-a.jsonl"),
        ("agent", "agent-f00d.jsonl"),
    ]
    proposers = {line["rollout_id"] for line in lines if line["role"] == "proposer"}
    agents = [line for line in lines if line["role"] == "agent"]
    assert all(line["parent_rollout_id"] in proposers for line in agents)
    x = agents[1]
    assert x["messages"] == [
        {"role": "user", "content": "sub task X"},
        {"role": "assistant", "content": "X\nX2"},
    ]
    assert (x["cost"]["tokens_in"], x["cost"]["tokens_out"]) == (5, 9)  # final usage of msg_x
    assert x["outcome"]["reward_source"] == "swe-arena-official-judge/candidate-resolved-fraction/inherited"
    assert x["outcome"]["reward"] == lines[2]["outcome"]["reward"]
    # The main transcript holds no sidechain line.
    assert [m["content"] for m in lines[2]["messages"]] == ["improve the profile", "done"]
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, run.lines)
    assert all(result.passed for result in _checks(out_dir, claude, store, ledger).values())


def test_the_checks_fail_on_a_ledger_that_drops_a_sub_agent_line(tmp_path: Path) -> None:
    out_dir, claude, store = _round(tmp_path)
    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)
    dropped = [line for line in run.lines if line["outcome"]["metrics"].get("agent_key") != "y1"]
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, dropped)

    order = _checks(out_dir, claude, store, ledger)["order"]

    assert order.passed is False
    assert (order.expected, order.seen) == (len(run.lines), len(run.lines) - 1)
    assert "expected sub-agent conversation y1" in order.sample[0]


def test_the_checks_fail_on_a_ledger_that_joins_one_transcript_to_two_shots(tmp_path: Path) -> None:
    out_dir, claude, store = _round(tmp_path)
    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)
    lines = copy.deepcopy(run.lines)
    proposers = [line for line in lines if line["role"] == "proposer"]
    # What the join did before: shot 0 takes its closest in its window too, the file shot 1 has.
    proposers[0]["artifacts"]["transcript_ref"] = proposers[1]["artifacts"]["transcript_ref"]
    proposers[0]["messages"] = proposers[1]["messages"]
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, lines)

    checks = _checks(out_dir, claude, store, ledger)

    assert checks["integrity"].passed is False
    assert checks["integrity"].details["transcripts_joined_twice"] == 1
    assert checks["gaps"].passed is False
    assert "by the one-to-one join the shot takes" in checks["gaps"].sample[0]
    assert os.path.basename(proposers[0]["artifacts"]["transcript_ref"]) == "s-a.jsonl"


def _folder(claude: Path, out_dir: Path) -> Path:
    return claude / claude_project_slug(str(out_dir / "proposer-wt" / "gen0-cand0"))


def _repeat_lines(claude: Path, out_dir: Path) -> None:
    """Append to s-a lines it already holds, same uuids and times, as a session reopened in VS Code
    makes Claude Code do: a streamed partial-usage line of sub-agent X (after its final one),
    sub-agent Y's first line, and the main thread's user/assistant pair; and repeat a line of
    the nested agent file right after its original."""
    session = _folder(claude, out_dir) / "s-a.jsonl"
    by_uuid = {json.loads(raw)["uuid"]: raw for raw in session.read_text().splitlines()}
    session.write_text(session.read_text() + "".join(by_uuid[key] + "\n" for key in ("x2", "y1", "a1", "a2")))
    nested = _folder(claude, out_dir) / "s-a" / "subagents" / "agent-f00d.jsonl"
    first, second = nested.read_text().splitlines()
    nested.write_text(f"{first}\n{second}\n{second}\n")


def _by_thread(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The proposer and agent lines by file name and agent key ("s-a.jsonl", "s-a.jsonl x1")."""
    found = {}
    for line in lines:
        if line["role"] in ("proposer", "agent"):
            key = line["outcome"]["metrics"].get("agent_key")
            name = Path(line["artifacts"]["transcript_ref"]).name
            found[name if key is None else f"{name} {key}"] = line
    return found


class _Forgetful(set):  # type: ignore[type-arg]
    """A set of seen uuids that never holds one: the reader as it was, reading every repeat."""

    def __contains__(self, item: object) -> bool:
        return False


def test_repeated_transcript_lines_are_read_once_and_the_checks_agree(tmp_path: Path) -> None:
    out_dir, claude, store = _round(tmp_path)
    _repeat_lines(claude, out_dir)

    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)

    threads = _by_thread(run.lines)
    assert sorted(threads) == [
        "agent-beef.jsonl w1",
        "agent-f00d.jsonl z1",
        "s-a.jsonl",
        "s-a.jsonl x1",
        "s-a.jsonl y1",
        "s-b.jsonl",
    ]
    assert [m["content"] for m in threads["s-a.jsonl"]["messages"]] == ["improve the profile", "done"]
    assert threads["s-a.jsonl x1"]["messages"][1] == {"role": "assistant", "content": "X\nX2"}
    assert threads["s-a.jsonl x1"]["cost"]["tokens_out"] == 9  # its final usage, not the repeated partial
    assert [m["content"] for m in threads["agent-f00d.jsonl z1"]["messages"]] == ["nested task", "Z"]
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, run.lines)
    checks = _checks(out_dir, claude, store, ledger)
    assert {name: result.passed for name, result in checks.items()} == dict.fromkeys(checks, True)


def test_a_ledger_that_reads_the_repeated_lines_again_fails_the_order_and_usage_checks(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The reader as it was: Y's repeated first line starts a second conversation under Y's key
    (a line the inputs do not name), and X's repeated partial usage becomes its last. No check
    recounts a Claude transcript's messages: the main thread's repeated pair alone would pass."""
    out_dir, claude, store = _round(tmp_path)
    _repeat_lines(claude, out_dir)
    init = claude_reader._TranscriptParser.__init__

    def forgetful_init(self: Any, transcript: Any) -> None:
        init(self, transcript)
        self.seen_uuids = _Forgetful()

    monkeypatch.setattr(claude_reader._TranscriptParser, "__init__", forgetful_init)
    run = backfill(out_dir, opencode_db=store, claude_projects_dir=claude)
    monkeypatch.undo()
    proposer = _by_thread(run.lines)["s-a.jsonl"]
    assert [m["content"] for m in proposer["messages"]] == ["improve the profile", "done"] * 2
    ledger = tmp_path / "rollout-ledger.jsonl"
    write_ledger(ledger, run.lines)

    checks = _checks(out_dir, claude, store, ledger)

    passed = {name: result.passed for name, result in checks.items()}
    assert passed == {"order": False, "integrity": False, "gaps": True, "usage": False}
    assert checks["integrity"].details["duplicated_ids"] == 1  # Y's second conversation has Y's id
    assert any("cost.tokens_out is 2, but" in problem for problem in checks["usage"].sample)
