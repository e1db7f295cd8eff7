"""every_usage_is_its_transcripts: every line's token counts (and a worker's spend) are what its
records hold, summed by the audit's own reading, and a count no record holds is null.

A small round is built on disk in the shapes the harnesses write: a Claude Code session file
whose API messages stream their usage (1.0.x: one line per content block, the earlier lines of
an id with a partial `output_tokens`, only the last final), repeat it (2.x), or carry no id; its
sub-agent conversations inline, in an `agent-*.jsonl` file beside it and in its `subagents/`
folder; and a real opencode store whose sessions record their spend in the session row, only in
their assistant messages (an import's 0s), or nowhere. The join's ledger of it passes. Then the
join is broken where a real change could break it (monkeypatched for one test: sub-agent usage
not counted, a streamed partial usage kept instead of the final one, a worker's tokens off by
one) and the check fails naming each line, in the audit and through Dagster, where it stops the
round before its stats while every other check passes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from dagster import DagsterInstance, instance_for_test

from rollout_assets import audit
from rollout_assets.backfill import worker_line as worker_line_module
from rollout_assets.backfill.join import RoundBackfill
from rollout_assets.defs.assets import rollout_ledger
from rollout_assets.defs.resources import (
    ClaudeProjects,
    LedgerRoot,
    OpencodeDatabase,
    RoundLocations,
    RoundsRoot,
)
from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout
from rollout_assets.ledger import write_ledger
from rollout_assets.sources import claude as claude_reader
from rollout_assets.sources.claude import claude_project_slug
from rollout_assets_tests.builders import (
    LEGACY_SESSION_COLUMNS,
    SESSION_COLUMNS,
    artifact,
    assistant_line,
    campaign_dir,
    cell,
    message,
    part,
    session,
    usage,
    user_line,
    write_cell,
    write_json,
    write_opencode_db,
    write_transcript,
)
from rollout_assets_tests.dagster_rounds import (
    cli_backfill,
    evaluations,
    materialize_round,
    materializations,
    metadata_values,
    read_jsonl,
    run_checks_of,
    write_jsonl,
    write_rounds,
)

Line = dict[str, Any]
TOKENS = ("tokens_in", "tokens_out", "cache_read", "cache_write")
ROUND_KEY = "round-usage"
CHECK = "every_usage_is_its_transcripts"
RECEIPT = {"startedAt": "2025-01-01T10:00:00.000Z", "completedAt": "2025-01-01T10:10:00.000Z", "exitCode": 0}
T0 = "2025-01-01T10:00:05.000Z"


# ---------------------------------------------------------------------------
# The round
# ---------------------------------------------------------------------------


def _thread(kind: str, uuid: str, parent: str | None, *args: Any, **fields: Any) -> Line:
    build = user_line if kind == "user" else assistant_line
    return build(*args, uuid=uuid, parentUuid=parent, sessionId="s-main", **fields)


def _text(text: str) -> list[Line]:
    return [{"type": "text", "text": text}]


def _main_session() -> list[Any]:
    """The proposer's session: msg_1 streamed over three block lines (output 1, 1, then 42),
    the tool result its last block asked for, msg_2 with its final usage on both lines, two
    lines without an id and one whose id is a number (each a message of its own); inline, a
    sub-agent whose msg_x streams (output 1, then 9) and one that records no usage at all."""
    thinking = [{"type": "thinking", "thinking": "plan"}]
    tool = [{"type": "tool_use", "id": "tu_1", "name": "Read", "input": {"path": "a.py"}}]
    numbered = assistant_line(None, _text("numbered"), usage=usage(1, 1), uuid="m9", sessionId="s-main")
    numbered["message"]["id"] = 17
    return [
        _thread("user", "m1", None, "improve the profile", timestamp=T0),
        _thread("assistant", "m2", "m1", "msg_1", thinking, usage=usage(100, 1, 50, 10)),
        _thread("assistant", "m3", "m2", "msg_1", _text("I will read a.py"), usage=usage(100, 1, 50, 10)),
        _thread("user", "x1", None, "sub task X", isSidechain=True),
        _thread("assistant", "m4", "m3", "msg_1", tool, usage=usage(100, 42, 50, 10)),
        _thread("user", "m5", "m4", [{"type": "tool_result", "tool_use_id": "tu_1", "content": "print(1)"}]),
        _thread("assistant", "x2", "x1", "msg_x", _text("X"), usage=usage(5, 1), isSidechain=True),
        _thread("assistant", "m6", "m5", "msg_2", _text("done"), usage=usage(120, 7, 150)),
        _thread("assistant", "m7", "m6", "msg_2", _text("really"), usage=usage(120, 7, 150)),
        _thread("assistant", "x3", "x2", "msg_x", _text("X2"), usage=usage(5, 9), isSidechain=True),
        _thread("assistant", "m8", "m7", None, _text("aside"), usage=usage(3, 4)),
        _thread("assistant", "m10", "m8", None, _text("aside again"), usage=usage(3, 4)),
        numbered,
        _thread("user", "y1", None, "sub task Y", isSidechain=True),
        _thread("assistant", "y2", "y1", "msg_y", _text("Y"), isSidechain=True),
    ]


# What docs/input-formats.md §5 makes of it, counted by hand: each message's final usage, once.
PROPOSER_TOKENS = {
    "tokens_in": 100 + 120 + 3 + 3 + 1,
    "tokens_out": 42 + 7 + 4 + 4 + 1,
    "cache_read": 50 + 150,
    "cache_write": 10,
}
AGENT_TOKENS = {
    "x1": {"tokens_in": 5, "tokens_out": 9, "cache_read": 0, "cache_write": 0},
    "y1": {"tokens_in": None, "tokens_out": None, "cache_read": None, "cache_write": None},
    "w1": {"tokens_in": 3, "tokens_out": 3, "cache_read": 1, "cache_write": 1},
    "z1": {"tokens_in": 2, "tokens_out": 4, "cache_read": 0, "cache_write": 0},
    "c1": {"tokens_in": 900, "tokens_out": 60, "cache_read": 0, "cache_write": 0},
}


def _transcripts(claude: Path, worktree: str) -> None:
    folder = claude / claude_project_slug(worktree)
    write_transcript(folder / "s-main.jsonl", _main_session())
    beside = {"isSidechain": True, "agentId": "beef"}
    write_transcript(
        folder / "agent-beef.jsonl",
        [
            _thread("user", "w1", None, "beside task", **beside),
            _thread("assistant", "w2", "w1", "msg_w", _text("W"), usage=usage(3, 3, 1, 1), **beside),
        ],
    )
    nested = {"isSidechain": True, "agentId": "f00d"}
    write_transcript(
        folder / "s-main" / "subagents" / "agent-f00d.jsonl",
        [
            _thread("user", "z1", None, "nested task", **nested),
            _thread("assistant", "z2", "z1", "msg_z", _text("Z"), usage=usage(2, 1), **nested),
            _thread("assistant", "z3", "z2", "msg_z", _text("Z2"), usage=usage(2, 4), **nested),
        ],
    )
    compact = {"isSidechain": True, "agentId": "acompact-1"}
    write_transcript(
        folder / "s-main" / "subagents" / "agent-acompact-1.jsonl",
        [
            _thread("user", "c1", None, "summarize the conversation", **compact),
            _thread("assistant", "c2", "c1", "msg_c", _text("summary"), usage=usage(900, 60), **compact),
        ],
    )


def _spend(cost: float, tokens_in: int, tokens_out: int) -> dict[str, Any]:
    """An assistant message's spend fields (docs/input-formats.md §4)."""
    tokens = {"input": tokens_in, "output": tokens_out, "reasoning": 1, "cache": {"read": 2, "write": 0}}
    return {"cost": cost, "tokens": tokens}


def _store(path: Path, legacy: bool) -> Path:
    """ses_a: its row records its spend (its messages record another); ses_e, the same cwd's
    second session, has no message rows (a "no readable message parts" gap); ses_b's row holds
    an import's 0s and its assistant messages record floats, in a time order that is not their
    id order, and one failed message without parts still cost; ses_c's row holds 0s and its
    messages record nothing. /wt/d has no session. A legacy store has no spend columns."""
    imported = {column: 0 for column in SESSION_COLUMNS[5:11]}
    return write_opencode_db(
        path,
        sessions=[
            session("ses_a", "/wt/a"),
            session("ses_e", "/wt/a", time_created=2_000),
            session("ses_b", "/wt/b", **imported),
            session("ses_c", "/wt/c", **imported),
        ],
        messages=[
            message("ma1", "ses_a", "user"),
            message("ma2", "ses_a", "assistant", time_created=2_000, **_spend(0.5, 1, 2)),
            message("mb1", "ses_b", "user", time_created=500),
            message("mb2", "ses_b", "assistant", time_created=4_000, **_spend(0.1, 10, 1)),
            message("mb3", "ses_b", "assistant", time_created=3_000, **_spend(0.2, 20, 2)),
            message("mb4", "ses_b", "assistant", time_created=2_000, **_spend(0.3, 30, 3)),
            message(
                "mb5", "ses_b", "assistant", time_created=5_000,
                error={"name": "APIError", "data": {"message": "Overloaded"}}, **_spend(0.05, 5, 0),
            ),
            message("mc1", "ses_c", "user"),
            message("mc2", "ses_c", "assistant", time_created=2_000),
        ],  # fmt: skip
        parts=[
            part("pa1", "ma1", "text", text="fix it"),
            part("pa2", "ma2", "text", text="fixed"),
            part("pb1", "mb1", "text", text="go"),
            part("pb2", "mb2", "text", text="one"),
            part("pb3", "mb3", "text", text="two"),
            part("pb4", "mb4", "text", text="three"),
            part("pc1", "mc1", "text", text="hello"),
            part("pc2", "mc2", "text", text="hi"),
        ],
        session_columns=LEGACY_SESSION_COLUMNS if legacy else SESSION_COLUMNS,
    )


class Built(NamedTuple):
    out_dir: Path  # <root>/rounds/round-usage
    store: Path
    claude: Path

    def backfill(self, ledger: Path) -> list[Line]:
        """The join's ledger of the round, written to `ledger`."""
        with RoundBackfill(self.out_dir, opencode_db=self.store, claude_projects_dir=self.claude) as run:
            write_ledger(ledger, run.lines())
        return read_jsonl(ledger)

    def verdict(self, ledger: Path) -> audit.AuditResult:
        inputs = audit.recount_inputs(self.out_dir, self.store, claude_projects=self.claude)
        return audit.usage_verdict(inputs, audit.recount_ledger(ledger))


def build_round(root: Path, *, legacy: bool = False) -> Built:
    """One cell listing the worker cwds /wt/a to /wt/d, and one shot joined to s-main.jsonl."""
    out_dir = (root / "rounds" / ROUND_KEY).absolute()
    run_dir = out_dir / "runs" / "arm0"
    write_cell(campaign_dir(out_dir), "a", cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir))))
    cwds = ["/wt/a", "/wt/b", "/wt/c", "/wt/d"]
    write_json(run_dir / "result.json", {"spawned": 4, "recoveredSpend": {"workerCwds": cwds}})
    write_cell(campaign_dir(out_dir, 0, 0), "a", cell("a__a-1", 0))
    write_json(out_dir / "proposer-shots" / "gen0-cand0-shot0.json", {"receipt": RECEIPT})
    claude = root / "claude"
    _transcripts(claude, str(out_dir / "proposer-wt" / "gen0-cand0"))
    return Built(out_dir, _store(root / "opencode.db", legacy), claude)


def _tokens(line: Line) -> dict[str, Any]:
    return {name: line["cost"][name] for name in TOKENS}


def _changed(lines: list[Line], good: list[Line]) -> list[int]:
    """The lines whose cost differs from the good ledger's."""
    pairs = enumerate(zip(lines, good, strict=True))
    return [index for index, (line, right) in pairs if line["cost"] != right["cost"]]


def _of_role(lines: list[Line], role: str) -> list[int]:
    return [index for index, line in enumerate(lines) if line["role"] == role]


def _named(result: audit.AuditResult, ledger: Path, lines: list[Line], indexes: list[int]) -> None:
    """The check failed on exactly the lines `indexes`, each named by file:line and rollout_id."""
    assert (result.passed, result.missing) == (False, len(indexes))
    assert [problem.split(": ", 2)[:2] for problem in result.sample] == [
        [f"{ledger}:{index + 1}", f"rollout_id {lines[index]['rollout_id']}"] for index in indexes
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_round(tmp_path_factory.mktemp("usage"))


# ---------------------------------------------------------------------------
# The join's ledger passes, with the usage the docs give
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("legacy", [False, True], ids=["spend columns", "legacy store"])
def test_the_joins_usage_is_the_docs_and_passes(tmp_path: Path, legacy: bool) -> None:
    built = build_round(tmp_path, legacy=legacy)
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)

    result = built.verdict(ledger)

    assert (result.passed, result.sample) == (True, [])
    roles = {"supervisor": 2, "worker": 5, "proposer": 1, "agent": 5}
    assert result.details == {
        **{f"{role}_lines": count for role, count in roles.items()},
        **{f"wrong_usage_{role}": 0 for role in roles},
    }
    (proposer,) = [line for line in lines if line["role"] == "proposer"]
    assert _tokens(proposer) == PROPOSER_TOKENS and proposer["cost"]["tokens_reasoning"] is None
    agents = {line["outcome"]["metrics"]["agent_key"]: line for line in lines if line["role"] == "agent"}
    assert {key: _tokens(line) for key, line in agents.items()} == AGENT_TOKENS
    assert all(line["cost"]["usd"] is None for line in agents.values())
    workers = {_worker_key(line): _spend_of(line) for line in lines if line["role"] == "worker"}
    assert workers == (LEGACY_WORKERS if legacy else WORKERS)


def _worker_key(line: Line) -> str:
    return line["artifacts"]["transcript_ref"] or line["outcome"]["metrics"]["worker_cwd"]


def _spend_of(line: Line) -> tuple[Any, ...]:
    cost = line["cost"]
    usd = cost["usd"] if cost["usd"] is None else round(cost["usd"], 9)
    tokens = ("tokens_in", "tokens_out", "tokens_reasoning", "cache_read", "cache_write")
    return (usd, *(cost[name] for name in tokens))


# Each worker's (usd, tokens_in, tokens_out, tokens_reasoning, cache_read, cache_write), by the
# docs: the session row's columns, unless all are null or 0 while its messages record spend.
ROW = (0.25, 100, 20, 5, 40, 8)
NOTHING = (None,) * 6
# ses_b's four assistant messages (the failed one too): 0.3 + 0.2 + 0.1 + 0.05 in time order.
MESSAGES_B = (0.65, 65, 6, 4, 8, 0)
WORKERS = {
    "opencode:ses_a": ROW,
    "opencode:ses_e": ROW,
    "opencode:ses_b": MESSAGES_B,
    "opencode:ses_c": (0,) * 6,
    "/wt/d": NOTHING,
}
LEGACY_WORKERS = {
    "opencode:ses_a": (0.5, 1, 2, 1, 2, 0),
    "opencode:ses_e": NOTHING,
    "opencode:ses_b": MESSAGES_B,
    "opencode:ses_c": NOTHING,
    "/wt/d": NOTHING,
}


def test_the_audit_adds_floats_in_another_order_than_the_join_and_still_passes(
    built: Built, tmp_path: Path
) -> None:
    """ses_b's costs, added by the join in time order (0.3, 0.2, 0.1, 0.05) and by the audit in
    id order (0.1, 0.2, 0.3, 0.05), differ in the last place; a cent more does not pass."""
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)
    (index,) = [i for i, line in enumerate(lines) if line["artifacts"]["transcript_ref"] == "opencode:ses_b"]
    in_time_order = 0.3 + 0.2 + 0.1 + 0.05
    in_id_order = 0.1 + 0.2 + 0.3 + 0.05
    assert in_time_order != in_id_order and lines[index]["cost"]["usd"] == in_time_order

    assert built.verdict(ledger).passed
    lines[index]["cost"]["usd"] += 0.01
    result = built.verdict(write_jsonl(ledger, lines))

    _named(result, ledger, lines, [index])
    assert result.sample[0].endswith(
        f"cost.usd is {lines[index]['cost']['usd']!r}, but the assistant messages of opencode session ses_b,"
        f" summed, gives {in_id_order!r}"
    )


def test_without_the_store_every_worker_line_has_no_spend_and_passes(built: Built, tmp_path: Path) -> None:
    """The store unavailable: every worker line is a gap of its cwd, with no session and no spend."""
    gone = built._replace(store=tmp_path / "no-such.db")
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = gone.backfill(ledger)

    result = gone.verdict(ledger)

    assert (result.passed, result.details["worker_lines"]) == (True, 4)
    assert all(_spend_of(lines[index]) == NOTHING for index in _of_role(lines, "worker"))


# ---------------------------------------------------------------------------
# A count no record holds is null, and a recorded one is never null
# ---------------------------------------------------------------------------


def test_a_zero_where_no_message_records_a_count_fails(built: Built, tmp_path: Path) -> None:
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)
    (index,) = [i for i, line in enumerate(lines) if line["outcome"]["metrics"].get("agent_key") == "y1"]
    lines[index]["cost"]["tokens_in"] = 0
    for supervisor in _of_role(lines, "supervisor"):
        lines[supervisor]["cost"]["tokens_out"] = 0

    result = built.verdict(write_jsonl(ledger, lines))

    _named(result, ledger, lines, sorted([index, *_of_role(lines, "supervisor")]))
    problems = dict(problem.rsplit(": ", 1) for problem in result.sample)
    assert problems[f"{ledger}:{index + 1}: rollout_id {lines[index]['rollout_id']}"].startswith(
        "cost.tokens_in is 0, but the final usage of each API message of sub-agent conversation y1 of"
    )
    assert result.sample[0].endswith(
        "cost.tokens_out is 0, but a supervisor's brain.jsonl (per-request stats only) records none"
    )
    assert result.details["wrong_usage_supervisor"] == 2


def test_a_worker_without_a_session_must_have_no_spend(built: Built, tmp_path: Path) -> None:
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)
    (index,) = [i for i, line in enumerate(lines) if line["outcome"]["metrics"].get("worker_cwd") == "/wt/d"]
    lines[index]["cost"]["usd"] = 0

    result = built.verdict(write_jsonl(ledger, lines))

    _named(result, ledger, lines, [index])
    assert result.sample[0].endswith(
        "cost.usd is 0, but a worker line without an opencode session records none"
    )


# ---------------------------------------------------------------------------
# Three broken joins, each caught naming every line it broke
# ---------------------------------------------------------------------------


def _subagent_usage_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transcript parser sums its main thread's usage and forgets its sub-agents'."""

    def count_usage(self: Any) -> None:
        for final in self.final_usage.values():
            self.transcript.usage.add(final)

    monkeypatch.setattr(claude_reader._TranscriptParser, "count_usage", count_usage)


def _streamed_partial_usage_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser keeps the first usage of each message id (a streamed partial one) instead of the last."""
    assistant = claude_reader._TranscriptParser._assistant

    def first_usage_kept(self: Any, message: dict[str, Any]) -> None:
        api_id = message.get("id")
        kept = self.final_usage.get(api_id) if isinstance(api_id, str) else None
        assistant(self, message)
        if kept is not None:
            self.final_usage[api_id] = kept

    monkeypatch.setattr(claude_reader._TranscriptParser, "_assistant", first_usage_kept)


def _worker_tokens_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker line's input tokens counted one too many."""
    worker_cost = worker_line_module._worker_cost

    def off_by_one(session: Any, transcript: Any) -> dict[str, Any]:
        cost = worker_cost(session, transcript)
        if cost["tokens_in"] is not None:
            cost["tokens_in"] += 1
        return cost

    monkeypatch.setattr(worker_line_module, "_worker_cost", off_by_one)


def _broken_lines(bug: str, lines: list[Line]) -> list[int]:
    """The lines each bug changes in the round built here."""
    if bug == "subagent usage not counted":
        return [i for i in _of_role(lines, "agent") if lines[i]["outcome"]["metrics"]["agent_key"] != "y1"]
    if bug == "streamed partial usage kept":
        streamed = ("x1", "z1")
        return [
            i
            for i, line in enumerate(lines)
            if line["role"] == "proposer" or line["outcome"]["metrics"].get("agent_key") in streamed
        ]
    return [i for i in _of_role(lines, "worker") if lines[i]["cost"]["tokens_in"] is not None]


BUGS = {
    "subagent usage not counted": _subagent_usage_not_counted,
    "streamed partial usage kept": _streamed_partial_usage_kept,
    "worker tokens off by one": _worker_tokens_off_by_one,
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_broken_join_fails_the_usage_check_naming_every_line_it_broke(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bug: str
) -> None:
    good = built.backfill(tmp_path / "good.jsonl")
    BUGS[bug](monkeypatch)
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)
    broken = _changed(lines, good)

    result = built.verdict(ledger)

    assert broken == _broken_lines(bug, lines)
    _named(result, ledger, lines, broken)
    inputs = audit.recount_inputs(built.out_dir, built.store, claude_projects=built.claude)
    recounted = audit.recount_ledger(ledger)
    # Nothing else sees it: every line is there, in order, valid, with warranted gaps.
    assert audit.gaps_warranted_verdict(inputs, recounted).passed
    assert audit.inputs_match_verdict(inputs, recounted).passed
    assert audit.integrity_verdict(recounted).passed


def test_a_streamed_partial_usage_is_named_with_its_final_sum(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _streamed_partial_usage_kept(monkeypatch)
    ledger = tmp_path / "rollout-ledger.jsonl"
    lines = built.backfill(ledger)

    result = built.verdict(ledger)

    (index,) = _of_role(lines, "proposer")
    transcript = lines[index]["artifacts"]["transcript_ref"]
    assert result.sample[0] == (
        f"{ledger}:{index + 1}: rollout_id {lines[index]['rollout_id']}: cost.tokens_out is"
        f" {PROPOSER_TOKENS['tokens_out'] - 41}, but the final usage of each API message of the main chain"
        f" of {transcript}, summed, gives {PROPOSER_TOKENS['tokens_out']}"
    )


# ---------------------------------------------------------------------------
# The demo rounds
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoLayout, dict[str, Path]]:
    layout = write_rounds(tmp_path_factory.mktemp("demo"), DEFAULT_ROUNDS)
    ledgers = {}
    for out_dir in layout.rounds:
        ledgers[out_dir.name] = tmp_path_factory.mktemp("ledgers") / "rollout-ledger.jsonl"
        cli_backfill(layout, out_dir, ledgers[out_dir.name])
    return layout, ledgers


@pytest.mark.parametrize("name", [spec.name for spec in DEFAULT_ROUNDS])
def test_every_demo_rounds_usage_passes_and_a_worker_off_by_one_fails(
    demo: tuple[DemoLayout, dict[str, Path]], tmp_path: Path, name: str
) -> None:
    layout, ledgers = demo
    out_dir = layout.rounds_root / name
    inputs = audit.recount_inputs(out_dir, layout.opencode_db, claude_projects=layout.claude_projects_dir)
    real = audit.usage_verdict(inputs, audit.recount_ledger(ledgers[name]))
    lines = read_jsonl(ledgers[name])
    counted = [i for i in _of_role(lines, "worker") if lines[i]["cost"]["tokens_out"] is not None]
    for index in counted:
        lines[index]["cost"]["tokens_out"] += 1
    broken = write_jsonl(tmp_path / "rollout-ledger.jsonl", lines)

    result = audit.usage_verdict(inputs, audit.recount_ledger(broken))

    assert (real.passed, real.sample) == (True, [])
    assert counted, "the round has worker lines with token counts"
    assert (result.passed, result.missing) == (False, len(counted))
    assert result.details["wrong_usage_worker"] == len(counted)


# ---------------------------------------------------------------------------
# Through Dagster
# ---------------------------------------------------------------------------


def _resources(root: Path, built: Built) -> dict[str, Any]:
    locations = RoundLocations(
        rounds_root=RoundsRoot(root_dir=str(built.out_dir.parent)),
        opencode=OpencodeDatabase(path=str(built.store)),
        claude=ClaudeProjects(projects_dir=str(built.claude)),
        ledger_root=LedgerRoot(root_dir=str(root / "ledgers")),
    )
    return {"locations": locations}


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as found:
        yield found


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_broken_join_run_by_dagster_fails_the_usage_check_alone_and_stops_the_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: DagsterInstance, bug: str
) -> None:
    built = build_round(tmp_path)
    good = built.backfill(tmp_path / "good.jsonl")
    BUGS[bug](monkeypatch)

    result = materialize_round(instance, _resources(tmp_path, built), ROUND_KEY)

    ledger = tmp_path / "ledgers" / ROUND_KEY / "rollout-ledger.jsonl"
    lines = read_jsonl(ledger)
    broken = _changed(lines, good)
    found = evaluations(result)
    assert broken == _broken_lines(bug, lines)
    assert not result.success
    assert {name for name, check in found.items() if not check.passed} == {CHECK}
    metadata = metadata_values(found[CHECK].metadata)
    assert (metadata["missing"], metadata["expected"]) == (len(broken), len(lines))
    assert [problem.split(": ", 2)[:2] for problem in metadata["sample"]] == [
        [f"{ledger}:{index + 1}", f"rollout_id {lines[index]['rollout_id']}"] for index in broken
    ]
    assert "rollout_stats" not in materializations(result)


def test_the_usage_check_run_by_dagster_passes_on_the_joins_ledger_and_fails_on_an_edited_one(
    tmp_path: Path, instance: DagsterInstance
) -> None:
    resources = _resources(tmp_path, build_round(tmp_path))
    assert materialize_round(instance, resources, ROUND_KEY).success
    ledger = tmp_path / "ledgers" / ROUND_KEY / "rollout-ledger.jsonl"
    lines = read_jsonl(ledger)
    (index,) = _of_role(lines, "proposer")
    lines[index]["cost"]["cache_read"] = None
    write_jsonl(ledger, lines)

    result = run_checks_of(instance, resources, rollout_ledger, ROUND_KEY)

    found = evaluations(result)
    assert {name for name, check in found.items() if not check.passed} == {CHECK}
    metadata = metadata_values(found[CHECK].metadata)
    assert (metadata["missing"], metadata["wrong_usage_proposer"], metadata["proposer_lines"]) == (1, 1, 1)
    assert metadata["sample"][0].endswith(
        f"cost.cache_read is null, but the final usage of each API message of the main chain of"
        f" {lines[index]['artifacts']['transcript_ref']}, summed, gives {PROPOSER_TOKENS['cache_read']}"
    )
    assert json.loads(json.dumps(metadata["sample"]))  # plain JSON metadata
