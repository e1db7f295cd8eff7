"""every_gap_is_warranted: a gap line passes only when the inputs, read by the audit's own path,
hold what its reason says; a proposer line joined to a transcript only when that transcript is
a file of its worktree that qualifies for the shot.

A small round built on disk (real cells, a real SQLite store, real transcript files) is
backfilled by the join, whose ledger carries one line of every reason and passes; each test then
makes one claim false, by rewriting the ledger as a broken join would, and the check fails naming
the line, the session or transcript, and what the inputs hold. The two join bugs that passed
every other check (worker sessions read by the wrong key, the proposer window built around the
wrong end) are reproduced on every demo round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import instance_for_test

from rollout_assets import audit
from rollout_assets.audit import stores as audit_stores
from rollout_assets.audit.times import UNREAD, epoch_ms
from rollout_assets.audit.worker_cwds import WorkerCwds
from rollout_assets.backfill.join import RoundBackfill
from rollout_assets.backfill.jsdate import js_date_parse_ms
from rollout_assets.defs.assets import rollout_ledger
from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout
from rollout_assets.ledger import write_ledger
from rollout_assets.sources.claude import claude_project_slug
from rollout_assets.sources.opencode import OpencodeStore
from rollout_assets_tests.audit_runs import audit_inputs_match, count_sessions
from rollout_assets_tests.builders import (
    artifact,
    assistant_line,
    campaign_dir,
    cell,
    message,
    part,
    session,
    tool_part,
    user_line,
    write_cell,
    write_json,
    write_opencode_db,
    write_transcript,
)
from rollout_assets_tests.dagster_rounds import (
    ROUND,
    cli_backfill,
    evaluations,
    materialize_round,
    metadata_values,
    read_jsonl,
    round_resources,
    run_checks_of,
    write_jsonl,
    write_rounds,
)

Line = dict[str, Any]
STARTED, COMPLETED = "2025-01-01T10:00:00.000Z", "2025-01-01T10:10:00.000Z"
WINDOW = "the shot's window 2025-01-01T09:58:00.000Z to 2025-01-01T10:12:00.000Z"
IN_WINDOW, LATE = "2025-01-01T10:00:05.000Z", "2025-01-01T13:00:00.000Z"
SUPERVISOR_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"


@dataclass
class Round:
    """A built round, its store and Claude projects folder, and the join's ledger of it."""

    out_dir: Path
    store: Path
    claude: Path
    ledger: Path
    lines: list[Line]

    def worktree(self, shot: str) -> str:
        return os.path.join(self.out_dir, "proposer-wt", shot)

    def folder(self, shot: str) -> Path:
        return self.claude / claude_project_slug(self.worktree(shot))

    def verdict(self, lines: list[Line] | None = None, *, store: Path | None = None) -> audit.AuditResult:
        if lines is not None:
            write_jsonl(self.ledger, lines)
        inputs = audit.recount_inputs(self.out_dir, store or self.store, claude_projects=self.claude)
        return audit.gaps_warranted_verdict(inputs, audit.recount_ledger(self.ledger))

    def index(self, predicate: Callable[[Line], bool]) -> int:
        found = [i for i, line in enumerate(self.lines) if predicate(line)]
        assert len(found) == 1, f"{len(found)} lines match"
        return found[0]

    def worker(self, cwd: str) -> int:
        return self.index(
            lambda line: line["role"] == "worker" and line["outcome"]["metrics"]["worker_cwd"] == cwd
        )

    def proposer(self, shot: str) -> int:
        return self.index(
            lambda line: line["role"] == "proposer" and line["artifacts"]["run_dir"] == self.worktree(shot)
        )

    def supervisor(self, instance: str) -> int:
        return self.index(
            lambda line: line["role"] == "supervisor" and line["task"]["instance_id"] == instance
        )

    def problem(self, index: int, what: str) -> str:
        """The check's words for the line at `index` (0-based)."""
        return f"{self.ledger}:{index + 1}: rollout_id {self.lines[index]['rollout_id']}: {what}"


def _conversation(name: str, start: str) -> list[Line]:
    return [
        user_line("improve the profile", timestamp=start),
        assistant_line(f"msg_{name}", [{"type": "text", "text": "done"}], timestamp=start),
    ]


def _receipt(out_dir: Path, shot: str, **times: str) -> None:
    write_json(
        out_dir / "proposer-shots" / f"{shot}-shot0.json", {"receipt": {"harness": "claude-code", **times}}
    )


def _build(root: Path) -> Round:
    """Cell a__a-1 lists four worker cwds: w0 with a session holding a conversation, w1 with a
    session without message rows, w2 with a session whose one message has no part that makes a
    message, w3 with no session. Cell a__a-2's result.json is missing; a__a-3's reports spawned
    workers but lists none. Shots: gen0-cand0 has a transcript in its window and a late one;
    gen0-cand1 only a late one; gen0-cand2 an in-window transcript without conversation; gen0-cand3
    a project folder that cannot be listed (a symlink loop); gen0-cand4 no times and one transcript."""
    out_dir, claude = root / "round", root / "claude"
    baseline = campaign_dir(out_dir)
    for instance, result in (
        (
            "a__a-1",
            {"spawned": 4, "recoveredSpend": {"workerCwds": ["/wt/w0", "/wt/w1", "/wt/w2", "/wt/w3"]}},
        ),
        ("a__a-2", None),
        ("a__a-3", {"spawned": 2}),
    ):
        run_dir = root / "runs" / instance
        write_cell(baseline, instance, cell(instance, 0, artifact=artifact(runDir=str(run_dir))))
        run_dir.mkdir(parents=True)
        if result is not None:
            write_json(run_dir / "result.json", result)
    store = write_opencode_db(
        root / "opencode.db",
        sessions=[session("ses_w0", "/wt/w0"), session("ses_w1", "/wt/w1"), session("ses_w2", "/wt/w2")],
        messages=[
            message("m1", "ses_w0", "user"),
            message("m2", "ses_w0", "assistant", time_created=2_000),
            message("m3", "ses_w2", "assistant"),
        ],
        parts=[
            part("p1", "m1", "text", text="fix the bug"),
            part("p2", "m2", "text", text="fixed"),
            tool_part("p3", "m2", "call_1", input={"command": "ls"}, output="a.py"),
            part("p4", "m3", "step-start"),
            part("p5", "m3", "step-finish"),
        ],
    )
    built = Round(out_dir, store, claude, root / "rollout-ledger.jsonl", [])
    for shot in ("gen0-cand0", "gen0-cand1", "gen0-cand2", "gen0-cand3"):
        _receipt(out_dir, shot, startedAt=STARTED, completedAt=COMPLETED)
    _receipt(out_dir, "gen0-cand4")
    write_transcript(built.folder("gen0-cand0") / "in.jsonl", _conversation("in", IN_WINDOW))
    write_transcript(built.folder("gen0-cand0") / "late.jsonl", _conversation("late", LATE))
    write_transcript(built.folder("gen0-cand1") / "late.jsonl", _conversation("late", LATE))
    write_transcript(
        built.folder("gen0-cand2") / "image.jsonl",
        [user_line([{"type": "image", "source": {"type": "base64", "data": "AAAA"}}], timestamp=IN_WINDOW)],
    )
    os.symlink(built.folder("gen0-cand3"), built.folder("gen0-cand3"))  # a loop: there, but cannot be listed
    write_transcript(built.folder("gen0-cand4") / "only.jsonl", _conversation("only", LATE))
    with RoundBackfill(out_dir, opencode_db=store, claude_projects_dir=claude) as run:
        write_ledger(built.ledger, run.lines())
    built.lines = read_jsonl(built.ledger)
    return built


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Round:
    return _build(tmp_path_factory.mktemp("gaps"))


@pytest.fixture
def rnd(built: Round) -> Iterator[Round]:
    """The built round, its ledger restored after the test rewrote it."""
    yield built
    write_jsonl(built.ledger, built.lines)


@pytest.fixture
def lines(built: Round) -> list[Line]:
    """A private copy of the join's lines, to break."""
    return json.loads(json.dumps(built.lines))


def _fails_with(rnd: Round, lines: list[Line], index: int, what: str, kind: str) -> None:
    result = rnd.verdict(lines)
    assert (result.passed, result.missing, result.sample) == (False, 1, [rnd.problem(index, what)])
    assert result.details[f"unwarranted_{kind}"] == 1


# ---------------------------------------------------------------------------
# The join's ledger carries every reason, and every one is warranted
# ---------------------------------------------------------------------------


def test_the_joins_ledger_carries_a_gap_of_every_reason_and_passes(rnd: Round) -> None:
    gaps = [line["provenance"].get("gap") for line in rnd.lines]
    cand3 = rnd.folder("gen0-cand3")

    assert gaps == [
        SUPERVISOR_GAP,
        None,
        "opencode session ses_w1 has no readable message parts",
        "opencode session ses_w2 has no readable message parts",
        "no opencode session found for worker cwd /wt/w3",
        SUPERVISOR_GAP + "; result.json missing: this cell's worker sessions cannot be listed",
        SUPERVISOR_GAP
        + "; result.json reports spawned workers but lists no worker cwds: this cell's worker sessions cannot be listed",
        None,
        f"no claude transcript matched worktree {rnd.worktree('gen0-cand1')} in the shot's time window",
        f"claude transcript {rnd.folder('gen0-cand2') / 'image.jsonl'} matched the shot's time window but holds no conversation messages",
        f"claude transcripts of worktree {rnd.worktree('gen0-cand3')} cannot be read ({cand3}: Too many levels of symbolic links)",
        None,
    ]
    result = rnd.verdict()
    assert (result.passed, result.expected, result.seen, result.missing, result.sample) == (
        True,
        12,
        12,
        0,
        [],
    )
    assert (
        result.details["gap_lines"],
        result.details["joined_proposer_lines"],
        result.details["joined_worker_lines"],
    ) == (9, 2, 1)
    # Its token counts are those of its transcripts and sessions (every_usage_is_its_transcripts).
    inputs = audit.recount_inputs(rnd.out_dir, rnd.store, claude_projects=rnd.claude)
    usage = audit.usage_verdict(inputs, audit.recount_ledger(rnd.ledger))
    assert (usage.passed, usage.expected, usage.sample) == (True, 12, [])


# ---------------------------------------------------------------------------
# Worker gaps
# ---------------------------------------------------------------------------


def test_a_session_with_message_parts_said_to_have_none_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w0")
    lines[index]["messages"] = []
    lines[index]["provenance"]["gap"] = "opencode session ses_w0 has no readable message parts"

    _fails_with(
        rnd,
        lines,
        index,
        "opencode session ses_w0: the store holds 2 message row(s) of it, with 3 part row(s) that make a message",
        "opencode_session_empty",
    )


def test_a_session_said_empty_must_be_a_session_of_the_lines_cwd(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w1")
    lines[index]["provenance"]["gap"] = "opencode session ses_w0 has no readable message parts"

    _fails_with(
        rnd,
        lines,
        index,
        "the gap does not name the line's opencode session ses_w1",
        "opencode_session_empty",
    )


def test_a_cwd_with_a_session_said_to_have_none_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w0")
    lines[index]["messages"] = []
    lines[index]["provenance"]["gap"] = "no opencode session found for worker cwd /wt/w0"

    _fails_with(
        rnd,
        lines,
        index,
        "worker cwd /wt/w0: the opencode store holds its session(s) ses_w0",
        "no_opencode_session",
    )


def test_a_joined_worker_line_missing_a_message_fails_naming_both_counts(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w0")
    held = len(lines[index]["messages"])
    lines[index]["messages"].pop()

    _fails_with(
        rnd,
        lines,
        index,
        f"opencode session ses_w0: the line holds {held - 1} message(s), the store's rows make {held}",
        "joined_worker",
    )


def test_a_joined_worker_line_with_a_message_too_many_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w0")
    held = len(lines[index]["messages"])
    lines[index]["messages"].append({"role": "user", "content": "not in the store"})

    _fails_with(
        rnd,
        lines,
        index,
        f"opencode session ses_w0: the line holds {held + 1} message(s), the store's rows make {held}",
        "joined_worker",
    )


# Sessions of every shape the count's rules name, each with what the reader makes of it.
def _counted_sessions() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    sessions, messages, parts = [], [], []

    def add(name: str, rows: list[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> None:
        sessions.append(session(name, f"/wt/{name}"))
        for n, (role, data, its_parts) in enumerate(rows):
            message_id = f"{name}-m{n}"
            messages.append(message(message_id, name, role, 1_000 + n, **data))
            for k, body in enumerate(its_parts):
                parts.append(part(f"{message_id}-p{k}", message_id, raw_data=json.dumps(body)))

    text = {"type": "text", "text": "hello"}
    tool = {"type": "tool", "callID": "c1", "tool": "bash", "state": {"status": "completed", "output": "ok"}}
    add("plain", [("user", {}, [text]), ("assistant", {}, [text, tool])])
    add("ignored", [("user", {}, [{**text, "ignored": True}]), ("assistant", {}, [text])])
    add("placeholders", [("user", {}, [{"type": "compaction"}]), ("user", {}, [{"type": "subtask"}])])
    add("files", [("user", {}, [{"type": "file", "mime": "image/png"}]), ("user", {}, [{"type": "file", "mime": "text/plain"}])])
    add("no-parts", [("user", {}, []), ("assistant", {"system": ["you are"]}, [])])
    add("system", [("user", {}, [text]), ("assistant", {"system": ["", ""]}, [text])])
    add("system-empty", [("user", {}, [text]), ("assistant", {"system": [""]}, [text])])
    add("system-alone", [("assistant", {"system": "prompt"}, [{"type": "step-start"}])])
    add("errored", [("user", {}, [text]), ("assistant", {"error": {"name": "APIError"}}, [text, tool])])
    add("falsy-error", [("assistant", {"error": {}}, [text]), ("assistant", {"error": 0}, [text])])
    add("aborted", [("assistant", {"error": {"name": "MessageAbortedError"}}, [{"type": "step-start"}, text])])
    add("aborted-thinking", [("assistant", {"error": {"name": "MessageAbortedError"}}, [{"type": "reasoning", "text": "hm"}])])
    add(
        "steps",
        [
            (
                "assistant",
                {},
                [
                    {"type": "step-start"},
                    {"type": "reasoning", "text": "think"},
                    {"type": "step-start"},
                    {"type": "text", "text": ""},
                    {"type": "step-finish"},
                    {"type": "step-start"},
                    {"type": "text", "text": ""},
                    {"type": "text", "text": ""},
                    {"type": "step-start"},
                    {**tool, "callID": "c2"},
                    {**tool, "callID": "c3"},
                    {"type": "tool", "tool": "bash"},
                ],
            )
        ],
    )
    add("other-roles", [("system", {}, [text]), ("user", {}, ["not an object", {"type": "text", "text": 3}])])
    messages.append({"id": "broken-m0", "session_id": "plain", "time_created": 5, "data": "{not json"})
    return sessions, messages, parts


def test_the_audits_count_of_a_sessions_messages_is_the_readers(tmp_path: Path) -> None:
    """The count by the audit's own SQL agrees with the reader on every rule of
    docs/input-formats.md §4, each in a session of its own, in one query."""
    sessions, messages, parts = _counted_sessions()
    db = write_opencode_db(tmp_path / "opencode.db", sessions=sessions, messages=messages, parts=parts)
    names = {row["id"] for row in sessions}
    reading = audit_stores.read_store(db, WorkerCwds.of(f"/wt/{name}" for name in names))
    counts = count_sessions(reading, names)
    store = OpencodeStore.open(db)
    assert store is not None
    try:
        readers = {name: len(store.session_messages(name)) for name in sorted(names)}
    finally:
        store.close()

    assert {name: counts.get(name, (0, 0, 0))[2] for name in sorted(names)} == readers
    assert readers == {
        "aborted": 1,
        "aborted-thinking": 0,
        "errored": 1,
        "falsy-error": 2,
        "files": 1,
        "ignored": 1,
        "no-parts": 0,
        "other-roles": 0,
        "placeholders": 2,
        "plain": 3,
        "steps": 5,
        "system": 3,
        "system-alone": 0,
        "system-empty": 2,
    }


def test_a_store_the_audit_reads_said_unavailable_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w3")
    lines[index]["provenance"]["gap"] = "opencode store unavailable; worker cwd /wt/w3 unrecoverable"

    _fails_with(
        rnd,
        lines,
        index,
        f"worker cwd /wt/w3: the audit reads the opencode store {rnd.store}, which holds no session of it",
        "opencode_store_unavailable",
    )


def test_a_store_neither_the_join_nor_the_audit_can_read_warrants_its_gaps(
    rnd: Round, tmp_path: Path
) -> None:
    garbage = tmp_path / "opencode.db"
    garbage.write_bytes(b"this is no database" * 100)
    with RoundBackfill(rnd.out_dir, opencode_db=garbage, claude_projects_dir=rnd.claude) as run:
        write_ledger(rnd.ledger, run.lines())
    workers = [line for line in read_jsonl(rnd.ledger) if line["role"] == "worker"]

    result = rnd.verdict(store=garbage)

    assert [line["provenance"]["gap"] for line in workers] == [
        f"opencode store unavailable; worker cwd /wt/w{n} unrecoverable ({garbage}: not an SQLite database)"
        for n in range(4)
    ]
    assert (result.passed, result.sample) == (True, [])


# Holds the store locked from another process until its standard input closes: rollback-journal
# mode, a writer in the middle of committing; WAL mode, a connection in exclusive locking mode.
HOLD_LOCK = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "wal":
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA locking_mode=EXCLUSIVE")
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("UPDATE session SET agent = agent")
    connection.execute("COMMIT")
else:
    connection.execute("BEGIN EXCLUSIVE")
    connection.execute("UPDATE session SET agent = agent")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("mode", ["rollback", "wal"])
def test_a_busy_store_is_no_unavailable_one(
    rnd: Round, lines: list[Line], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A join that met a store locked by a writer wrote "store unavailable"; the audit, meeting the
    lock too (held by another process), does not take it for a store that cannot be read."""
    monkeypatch.setattr(audit_stores, "_BUSY_TIMEOUT_S", 0.05)
    index = rnd.worker("/wt/w3")
    lines[index]["provenance"]["gap"] = "opencode store unavailable; worker cwd /wt/w3 unrecoverable"
    write_jsonl(rnd.ledger, lines)
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(rnd.store), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "held\n"
        result = rnd.verdict()
    finally:
        writer.communicate(timeout=30)

    assert (result.passed, result.details["unwarranted_opencode_store_unavailable"]) == (False, 1)
    assert result.sample[-1] == rnd.problem(
        index,
        f"the opencode store {rnd.store} is there but was busy (database is locked): a busy store is no unavailable one",
    )


def test_worker_gaps_against_a_store_the_audit_cannot_read_prove_nothing(rnd: Round, tmp_path: Path) -> None:
    garbage = tmp_path / "opencode.db"
    garbage.write_bytes(b"this is no database" * 100)

    result = rnd.verdict(store=garbage)

    assert (result.passed, result.missing) == (False, 4)
    assert result.sample == [
        rnd.problem(
            rnd.worker(f"/wt/w{n}"),
            f"worker cwd /wt/w{n}: the audit cannot read the opencode store {garbage} (file is not a database),"
            " so it proves nothing of it",
        )
        for n in (0, 1, 2, 3)
    ]


# ---------------------------------------------------------------------------
# Supervisor gaps
# ---------------------------------------------------------------------------


def test_a_supervisors_gap_on_a_worker_line_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w3")
    lines[index]["provenance"]["gap"] = SUPERVISOR_GAP

    _fails_with(
        rnd,
        lines,
        index,
        f"a worker line cannot carry a supervisor's gap {SUPERVISOR_GAP!r}",
        "supervisor_transcript_not_persisted",
    )


def test_a_result_json_the_audit_reads_said_missing_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.supervisor("a__a-1")
    lines[index]["provenance"]["gap"] = (
        SUPERVISOR_GAP + "; result.json missing: this cell's worker sessions cannot be listed"
    )
    result_json = rnd.out_dir.parent / "runs" / "a__a-1" / "result.json"

    _fails_with(
        rnd,
        lines,
        index,
        f"supervisor baseline/a__a-1/rep0: the audit reads {result_json}, which lists 4 worker cwd(s)",
        "supervisor_worker_list_missing",
    )


def test_a_result_json_said_to_list_no_cwd_when_it_is_missing_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.supervisor("a__a-2")
    lines[index]["provenance"]["gap"] = (
        SUPERVISOR_GAP
        + "; result.json reports spawned workers but lists no worker cwds: this cell's worker sessions cannot be listed"
    )
    result_json = rnd.out_dir.parent / "runs" / "a__a-2" / "result.json"

    _fails_with(
        rnd,
        lines,
        index,
        f"supervisor baseline/a__a-2/rep0: the audit cannot read {result_json}: it is missing, not listing no cwd",
        "supervisor_worker_list_missing",
    )


# ---------------------------------------------------------------------------
# Proposer gaps and joins
# ---------------------------------------------------------------------------


def _unjoin(line: Line, gap: str) -> None:
    line["messages"] = []
    line["provenance"]["gap"] = gap


def test_a_shot_with_a_transcript_in_its_window_said_to_have_none_fails(
    rnd: Round, lines: list[Line]
) -> None:
    index = rnd.proposer("gen0-cand0")
    _unjoin(
        lines[index],
        f"no claude transcript matched worktree {rnd.worktree('gen0-cand0')} in the shot's time window",
    )

    _fails_with(
        rnd,
        lines,
        index,
        f"the transcript {rnd.folder('gen0-cand0') / 'in.jsonl'} starts at {IN_WINDOW} and qualifies, by {WINDOW}",
        "no_claude_transcript",
    )


def test_a_shot_without_times_and_one_transcript_said_to_have_none_fails(
    rnd: Round, lines: list[Line]
) -> None:
    index = rnd.proposer("gen0-cand4")
    _unjoin(
        lines[index],
        f"no claude transcript matched worktree {rnd.worktree('gen0-cand4')} in the shot's time window",
    )

    _fails_with(
        rnd,
        lines,
        index,
        f"the transcript {rnd.folder('gen0-cand4') / 'only.jsonl'} starts at {LATE} and qualifies, by a receipt"
        " without both startedAt and completedAt (then only the worktree's only transcript qualifies)",
        "no_claude_transcript",
    )


def test_a_transcript_with_conversation_said_empty_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.proposer("gen0-cand0")
    transcript = rnd.folder("gen0-cand0") / "in.jsonl"
    _unjoin(
        lines[index],
        f"claude transcript {transcript} matched the shot's time window but holds no conversation messages",
    )

    _fails_with(
        rnd,
        lines,
        index,
        f"the transcript {transcript} holds conversation messages",
        "claude_transcript_empty",
    )


def test_a_transcript_outside_the_window_said_to_have_matched_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.proposer("gen0-cand1")
    late = rnd.folder("gen0-cand1") / "late.jsonl"
    lines[index]["provenance"]["gap"] = (
        f"claude transcript {late} matched the shot's time window but holds no conversation messages"
    )

    _fails_with(
        rnd,
        lines,
        index,
        f"the transcript {late} starts at {LATE} and does not qualify, by {WINDOW}",
        "claude_transcript_empty",
    )


def test_a_project_folder_the_audit_lists_said_unreadable_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.proposer("gen0-cand0")
    folder = rnd.folder("gen0-cand0")
    _unjoin(
        lines[index],
        f"claude transcripts of worktree {rnd.worktree('gen0-cand0')} cannot be read ({folder}: Permission denied)",
    )

    _fails_with(
        rnd, lines, index, f"the audit lists the project folder {folder}", "claude_transcripts_unreadable"
    )


def test_a_joined_line_naming_a_transcript_outside_its_window_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.proposer("gen0-cand0")
    late = rnd.folder("gen0-cand0") / "late.jsonl"
    lines[index]["artifacts"]["transcript_ref"] = str(late)

    _fails_with(
        rnd,
        lines,
        index,
        f"the transcript {late} starts at {LATE} and does not qualify, by {WINDOW}",
        "joined_proposer",
    )


def test_a_joined_line_naming_a_file_of_another_worktree_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.proposer("gen0-cand0")
    other = rnd.folder("gen0-cand4") / "only.jsonl"
    lines[index]["artifacts"]["transcript_ref"] = str(other)

    folders = str(rnd.folder("gen0-cand0"))
    _fails_with(
        rnd,
        lines,
        index,
        f"{other} is no transcript file of the worktree's project folders ({folders})",
        "joined_proposer",
    )


def test_a_reason_no_input_can_warrant_fails(rnd: Round, lines: list[Line]) -> None:
    index = rnd.worker("/wt/w3")
    lines[index]["provenance"]["gap"] = "the worker was shy"

    _fails_with(
        rnd,
        lines,
        index,
        "gap 'the worker was shy' is no reason of the line format: no input can warrant it",
        "other",
    )


# ---------------------------------------------------------------------------
# The two join bugs every other check let through, on every demo round
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoLayout, dict[str, Path]]:
    """The shipped demo rounds and the command-line backfill's ledger of each."""
    layout = write_rounds(tmp_path_factory.mktemp("demo"), DEFAULT_ROUNDS)
    ledgers = {}
    for out_dir in layout.rounds:
        ledgers[out_dir.name] = tmp_path_factory.mktemp("ledgers") / "rollout-ledger.jsonl"
        cli_backfill(layout, out_dir, ledgers[out_dir.name])
    return layout, ledgers


def _sessions_read_by_the_wrong_key(line: Line) -> bool:
    """The join's worker sessions looked up by a key that finds no message: every joined
    worker line becomes a "no readable message parts" gap."""
    if line["role"] != "worker" or not line["messages"]:
        return False
    session = line["artifacts"]["transcript_ref"].removeprefix("opencode:")
    _unjoin(line, f"opencode session {session} has no readable message parts")
    return True


def _window_around_the_wrong_end(line: Line) -> bool:
    """The proposer window built around the wrong end of the shot: no transcript falls in it, and
    every joined proposer line becomes a "no transcript matched" gap."""
    if line["role"] != "proposer" or not line["messages"]:
        return False
    worktree = line["artifacts"]["run_dir"]
    _unjoin(line, f"no claude transcript matched worktree {worktree} in the shot's time window")
    line["artifacts"]["transcript_ref"] = None
    return True


@pytest.mark.parametrize("name", [spec.name for spec in DEFAULT_ROUNDS])
@pytest.mark.parametrize("bug", [_sessions_read_by_the_wrong_key, _window_around_the_wrong_end])
def test_a_join_that_loses_every_transcript_of_a_kind_fails_the_gap_check_alone(
    demo: tuple[DemoLayout, dict[str, Path]], tmp_path: Path, name: str, bug: Callable[[Line], bool]
) -> None:
    layout, ledgers = demo
    out_dir = layout.rounds_root / name
    inputs = audit.recount_inputs(out_dir, layout.opencode_db, claude_projects=layout.claude_projects_dir)
    real = audit.gaps_warranted_verdict(inputs, audit.recount_ledger(ledgers[name]))
    lines = read_jsonl(ledgers[name])
    lost = [index for index, line in enumerate(lines) if bug(line)]
    broken = write_jsonl(tmp_path / "rollout-ledger.jsonl", lines)

    result = audit.gaps_warranted_verdict(inputs, audit.recount_ledger(broken))

    assert (real.passed, real.sample) == (True, [])
    assert lost, "the round has transcripts of that kind"
    assert (result.passed, result.missing) == (False, len(lost))
    assert [problem.split(": ", 2)[:2] for problem in result.sample] == [
        [f"{broken}:{index + 1}", f"rollout_id {lines[index]['rollout_id']}"]
        for index in lost[: len(result.sample)]
    ]
    # The order check allows either gap for any session or any shot with transcript files: blind to both.
    assert audit_inputs_match(out_dir, broken, layout.opencode_db, layout.claude_projects_dir).passed


def test_the_gap_check_run_by_dagster_stops_a_ledger_that_lost_its_worker_transcripts(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo")
    resources = round_resources(layout, tmp_path / "ledgers")
    with instance_for_test() as instance:
        assert materialize_round(instance, resources).success
        ledger = tmp_path / "ledgers" / ROUND / "rollout-ledger.jsonl"
        lines = read_jsonl(ledger)
        lost = [index for index, line in enumerate(lines) if _sessions_read_by_the_wrong_key(line)]
        write_jsonl(ledger, lines)

        result = run_checks_of(instance, resources, rollout_ledger)

    found = evaluations(result)
    assert {name for name, check in found.items() if not check.passed} == {"every_gap_is_warranted"}
    metadata = metadata_values(found["every_gap_is_warranted"].metadata)
    assert (metadata["missing"], metadata["unwarranted_opencode_session_empty"]) == (len(lost), len(lost))
    assert metadata["sample"][0].startswith(
        f"{ledger}:{lost[0] + 1}: rollout_id {lines[lost[0]]['rollout_id']}: "
    )


# ---------------------------------------------------------------------------
# The audit's reading of time stamps, and the reader's order of messages
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2025-01-01T10:00:00.000Z",
        "2025-01-01T10:00:00Z",
        "2025-01-01T10:00Z",
        "2025-01-01T10:00:00.5Z",
        "2025-01-01T10:00:00.123456789Z",
        "2025-01-01T11:58:00.000+02:00",
        "2025-01-01T07:00:00.000-03:30",
        "2024-02-29T23:59:59.999Z",
    ],
)
def test_the_audit_reads_the_iso_form_as_the_joins_date_parse_does(text: str) -> None:
    assert epoch_ms(text) == js_date_parse_ms(text)


@pytest.mark.parametrize(
    "text",
    [
        "2025-01-01T10:00:00",
        "2025-01-01",
        "Wed, 01 Jan 2025 10:00:00 GMT",
        "2025-02-30T10:00:00Z",
        "2025-01-01T24:00Z",
        "soon",
    ],
)
def test_a_time_in_another_form_is_one_the_audit_does_not_place(text: str) -> None:
    assert epoch_ms(text) is UNREAD
    assert epoch_ms(None) is None


def test_the_reader_reads_a_sessions_messages_in_time_order_whatever_their_ids(tmp_path: Path) -> None:
    """Ids that sort against time (a clock set back, ids from another generator): the
    transcript follows time_created, as docs/input-formats.md §4 orders the messages."""
    store = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("ses_1", "/wt/w0")],
        messages=[
            message("msg_c", "ses_1", "user", time_created=1_000),
            message("msg_b", "ses_1", "assistant", time_created=2_000),
            message("msg_a", "ses_1", "user", time_created=3_000),
        ],
        parts=[
            part("prt_3", "msg_c", "text", text="first"),
            part("prt_2", "msg_b", "text", text="second"),
            part("prt_1", "msg_a", "text", text="third"),
        ],
    )
    opened = OpencodeStore.open(store)
    assert opened is not None
    with opened:
        chat = opened.session_messages("ses_1")

    assert [(turn["role"], turn["content"]) for turn in chat] == [
        ("user", "first"),
        ("assistant", "second"),
        ("user", "third"),
    ]
