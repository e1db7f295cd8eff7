"""A matrix of bad inputs, one named test each, on real files, real SQLite and real processes.

Every case ends one of two ways:

(a) fail loud: `rollout-assets backfill` exits 1 with ONE line naming the file and the problem
    (no traceback), writes no ledger, and the ledger that was already at OUT stays
    byte-identical (no temp or lock file left beside it); or
(b) labeled gaps: the backfill succeeds, the damaged invocation carries a labeled gap (or
    exactly the part of its transcript that was damaged is missing, or replaced by U+FFFD),
    and every other invocation of the round still has its normal line, byte for byte apart
    from `captured_at`.

The reference ("before") is the in-process backfill of the undamaged round; the damaged round
is always run through the real command line in a subprocess. The Dagster cases run the real
assets on a real (temporary) instance.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, instance_for_test, materialize

from rollout_assets import audit
from rollout_assets.backfill import gaps
from rollout_assets.defs.assets import ROUND_ASSETS
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME, InvalidRoundKey, round_key_problem
from rollout_assets.defs.resources import LedgerRoot, RoundsRoot
from rollout_assets.demo import DemoLayout, RoundSpec, write_demo
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets.sources.claude import claude_project_slug
from rollout_assets_tests.audit_runs import audit_inputs_match, cells_without_worker_list
from rollout_assets_tests.backfill_runs import backfill
from rollout_assets_tests.dagster_rounds import (
    ALL_ROUND_DEFS,
    materialize_round,
    round_resources,
    step_failures,
)
from rollout_assets_tests.ledger_processes import backfill_command
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged

SPEC = RoundSpec(
    name="bad-round",
    instances=2,
    reps=1,
    generations=1,
    candidates_per_generation=2,
    workers_per_cell=2,
    steps_per_session=2,
    shots_per_candidate=1,
    edge_cases=False,
    seed=11,
)
# 2 instances x 1 rep x (baseline + 2 candidates) = 6 cells, 2 worker cwds each, 2 shots.
CELLS, WORKERS, SHOTS = 6, 12, 2
OLD_LEDGER = b'{"a previous ledger": "must survive byte for byte"}\n'
BAD_UTF8 = b"\xff\xfe"  # two bytes that are never UTF-8: each decodes to U+FFFD
REPLACED = "\ufffd\ufffd"
DEEP = 100_000  # nested arrays: beyond any recursive parser
# Deep enough that orjson (1,024 levels) parses it, but Python's json cannot write it back
# (about 990 levels): the window where a reader used to accept what no writer could write.
PARSEABLE_DEEP = 1_000
SUPERVISOR_GAP = gaps.supervisor_gap(False)


# ---------------------------------------------------------------------------
# The round under test
# ---------------------------------------------------------------------------


@dataclass
class Round:
    layout: DemoLayout
    out_dir: Path
    ledger: Path  # OUT: holds OLD_LEDGER before the test runs the backfill
    before: list[dict[str, Any]]  # the undamaged round's lines, in ledger order

    @property
    def db(self) -> Path:
        return self.layout.opencode_db

    @property
    def claude(self) -> Path:
        return self.layout.claude_projects_dir

    def campaign(self, name: str) -> Path:
        return self.out_dir / "improve-run" / name

    def cell_cache(
        self, campaign: str = "gen-0/candidate-0", scenario: str = "astropy__astropy-12907"
    ) -> Path:
        return self.campaign(campaign) / f"{scenario}__rep0" / "cached-result.json"

    def run_dir(self, cache: Path) -> Path:
        return Path(json.loads(cache.read_bytes())["artifact"]["runDir"])

    def supervisor(
        self, candidate: str, scenario: str, lines: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        found = [
            line
            for line in (self.before if lines is None else lines)
            if line["role"] == "supervisor"
            and line["candidate_id"] == candidate
            and line["task"]["instance_id"] == scenario
        ]
        assert len(found) == 1
        return found[0]

    def workers_of(
        self, supervisor: dict[str, Any], lines: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        return [
            line
            for line in (self.before if lines is None else lines)
            if line["parent_rollout_id"] == supervisor["rollout_id"]
        ]

    def proposers(self, lines: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        return [line for line in (self.before if lines is None else lines) if line["role"] == "proposer"]

    def proposer_of(self, worktree: str, lines: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        found = [
            line for line in self.proposers(lines) if line["artifacts"]["run_dir"].endswith(f"/{worktree}")
        ]
        assert len(found) == 1
        return found[0]

    def transcript_of(self, proposer: dict[str, Any]) -> Path:
        return Path(proposer["artifacts"]["transcript_ref"])


def make_round(root: Path) -> Round:
    layout = write_demo(root / "demo", rounds=[SPEC])
    ledgers = root / "ledgers"
    ledgers.mkdir()
    ledger = ledgers / "out.jsonl"
    ledger.write_bytes(OLD_LEDGER)
    before = backfill(
        layout.rounds[0], opencode_db=layout.opencode_db, claude_projects_dir=layout.claude_projects_dir
    )
    assert before.stats.by_role == {"supervisor": CELLS, "worker": WORKERS, "proposer": SHOTS}
    assert before.stats.full_transcripts == WORKERS + SHOTS  # a clean round: only supervisor gaps
    return Round(layout, layout.rounds[0], ledger, before.lines)


@pytest.fixture
def rnd(tmp_path: Path) -> Round:
    """A fresh small round per test (about 0.1 s), so each test may damage it freely."""
    return make_round(tmp_path)


def cli_backfill(
    rnd: Round, *, opencode_db: Path | None = None, claude: Path | None = None, out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout_assets.cli",
            "backfill",
            str(rnd.out_dir),
            str(out or rnd.ledger),
            "--opencode-db",
            str(opencode_db or rnd.db),
            "--claude-projects",
            str(claude or rnd.claude),
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


def assert_fails_loud(result: subprocess.CompletedProcess[str], rnd: Round, *fragments: str) -> str:
    """(a): exit 1, one line naming the file and the problem, the previous ledger untouched."""
    assert result.returncode == 1, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rollout-assets: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""
    assert rnd.ledger.read_bytes() == OLD_LEDGER
    assert sorted(p.name for p in rnd.ledger.parent.iterdir()) == ["out.jsonl"]  # no temp, no lock
    return lines[0]


def backfilled(result: subprocess.CompletedProcess[str], rnd: Round) -> list[dict[str, Any]]:
    """(b): the backfill succeeded; its ledger validates line by line and matches its stats."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    stats_text, summary = result.stdout.rsplit("\nrollout ledger → ", 1)
    lines = list(read_ledger_dicts(rnd.ledger))
    assert json.loads(stats_text)["lines"] == len(lines)
    assert summary == f"{rnd.ledger} ({len(lines)} lines)\n"
    assert sorted(p.name for p in rnd.ledger.parent.iterdir()) == ["out.jsonl"]
    return lines


def stripped(line: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(line))
    del copy["provenance"]["captured_at"]
    return copy


def changed_lines(
    before: list[dict[str, Any]], after: list[dict[str, Any]], *, removed: set[str] = frozenset()
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Nothing lost: `after` holds every line of `before` (but `removed`) in the same order, and every
    line not returned here is identical apart from captured_at. Returns id -> (before, after)."""
    assert [line["rollout_id"] for line in after] == [
        line["rollout_id"] for line in before if line["rollout_id"] not in removed
    ]
    old = {line["rollout_id"]: stripped(line) for line in before}
    changed = {}
    for line in after:
        new = stripped(line)
        if new != old[line["rollout_id"]]:
            changed[line["rollout_id"]] = (old[line["rollout_id"]], new)
    return changed


def with_bad_bytes(value: Any, marker: str = "@@BAD@@") -> bytes:
    """The compact JSON of `value` with `marker` (inside a string) replaced by invalid UTF-8."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8").replace(marker.encode(), BAD_UTF8)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ---------------------------------------------------------------------------
# opencode store helpers (plain SQL, not the reader under test)
# ---------------------------------------------------------------------------


def session_of(worker: dict[str, Any]) -> str:
    ref = worker["artifacts"]["transcript_ref"]
    assert ref.startswith("opencode:")
    return ref.removeprefix("opencode:")


def user_message_and_parts(db: Path, session_id: str) -> tuple[str, list[tuple[str, str]]]:
    """The first (user) message of a session and its parts (id, raw data), read with plain SQL."""
    with sqlite3.connect(db) as connection:
        message_id, data = connection.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id LIMIT 1",
            (session_id,),
        ).fetchone()
        assert json.loads(data)["role"] == "user"
        parts = connection.execute(
            "SELECT id, data FROM part WHERE message_id = ? ORDER BY id", (message_id,)
        ).fetchall()
    connection.close()
    return message_id, parts


def set_raw(db: Path, table: str, row_id: str, data: str | bytes) -> None:
    """Store `data` verbatim as the row's TEXT (bytes are stored as-is, invalid UTF-8 included)."""
    with sqlite3.connect(db) as connection:
        if isinstance(data, bytes):
            connection.execute(f"UPDATE {table} SET data = CAST(? AS TEXT) WHERE id = ?", (data, row_id))
        else:
            connection.execute(f"UPDATE {table} SET data = ? WHERE id = ?", (data, row_id))
    connection.close()


def first_worker(rnd: Round) -> dict[str, Any]:
    """The first worker line of gen0-cand0 / astropy (a session with a two-text-part user prompt)."""
    return rnd.workers_of(rnd.supervisor("gen0-cand0", "astropy__astropy-12907"))[0]


def assert_only_user_prompt_changed(
    rnd: Round, after: list[dict[str, Any]], worker: dict[str, Any], content: str
) -> None:
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {worker["rollout_id"]}
    old, new = changed[worker["rollout_id"]]
    assert new["messages"][0] == {"role": "user", "content": content}
    assert new["messages"][1:] == old["messages"][1:]  # every later message kept
    old["messages"][0]["content"] = content
    assert new == old  # and nothing else of the line changed


# ===========================================================================
# (a) corrupt evidence fails loud
# ===========================================================================


def test_corrupt_cached_result_json_fails_loud(rnd: Round) -> None:
    cache = rnd.cell_cache()
    cache.write_bytes(cache.read_bytes()[:-40])  # cut off mid-object

    message = assert_fails_loud(cli_backfill(rnd), rnd, str(cache), "not valid JSON")
    assert message.startswith(f"rollout-assets: error: {cache}: cell cache is not valid JSON")


def test_cell_without_scenario_id_fails_loud(rnd: Round) -> None:
    cache = rnd.cell_cache()
    record = json.loads(cache.read_bytes())
    del record["scenarioId"]
    cache.write_text(json.dumps(record), encoding="utf-8")

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache has no string scenarioId")


def test_cell_without_rep_fails_loud(rnd: Round) -> None:
    cache = rnd.cell_cache("baseline", "django__django-11532")
    record = json.loads(cache.read_bytes())
    del record["rep"]
    cache.write_text(json.dumps(record), encoding="utf-8")

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache has no numeric rep")


def test_candidate_directory_mixing_commits_fails_loud(rnd: Round) -> None:
    candidate = rnd.campaign("gen-0/candidate-1")
    cache = candidate / "django__django-11532__rep0" / "cached-result.json"
    record = json.loads(cache.read_bytes())
    original = record["artifact"]["commit"]
    record["artifact"]["commit"] = "f" * 40
    cache.write_text(json.dumps(record), encoding="utf-8")

    assert_fails_loud(
        cli_backfill(rnd), rnd, f"{candidate}: candidate cells name more than one commit", original, "f" * 40
    )


def test_nan_in_a_cell_cache_fails_loud(rnd: Round) -> None:
    # JavaScript's JSON.parse refuses NaN, so the seed failed on this file: so do we.
    cache = rnd.cell_cache()
    cache.write_bytes(cache.read_bytes().replace(b'"costUsd":', b'"costUsd":NaN,"was":', 1))

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache is not valid JSON", "NaN")


def test_infinity_in_a_cell_cache_fails_loud(rnd: Round) -> None:
    cache = rnd.cell_cache("baseline", "astropy__astropy-12907")
    cache.write_bytes(cache.read_bytes().replace(b'"costUsd":', b'"costUsd":-Infinity,"was":', 1))

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache is not valid JSON", "Infinity")


def test_cell_cache_nested_100000_deep_fails_loud_without_recursion_error(rnd: Round) -> None:
    cache = rnd.cell_cache()
    cache.write_bytes(
        cache.read_bytes().replace(b'"costUsd":', f'"deep":{nested(DEEP)},"costUsd":'.encode(), 1)
    )

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache is not valid JSON", "nested deeper than")


def test_cell_cache_nested_1000_deep_fails_loud_instead_of_crashing_the_writer(rnd: Round) -> None:
    # orjson parses 1,000 levels; the cell's non-string `error` is then written back as JSON
    # text, which no JSON writer here can do at that depth: refused at read time instead.
    cache = rnd.cell_cache()
    record = json.loads(cache.read_bytes())
    record["error"] = "@@DEEP@@"
    cache.write_bytes(json.dumps(record).encode().replace(b'"@@DEEP@@"', nested(PARSEABLE_DEEP).encode()))

    assert_fails_loud(cli_backfill(rnd), rnd, f"{cache}: cell cache is not valid JSON", "nested deeper than")


# ===========================================================================
# (b) missing or damaged evidence: labeled gaps, nothing else lost
# ===========================================================================


def assert_every_worker_is_one_store_gap(
    rnd: Round, after: list[dict[str, Any]], problem: str | None = None
) -> None:
    """Supervisors and proposers unchanged; each worker cwd has exactly one store-unavailable gap
    line, saying why (`problem`)."""
    non_workers = [stripped(line) for line in after if line["role"] != "worker"]
    assert non_workers == [stripped(line) for line in rnd.before if line["role"] != "worker"]
    for supervisor in (line for line in rnd.before if line["role"] == "supervisor"):
        cwds = [line["outcome"]["metrics"]["worker_cwd"] for line in rnd.workers_of(supervisor)]
        gap_lines = rnd.workers_of(supervisor, after)
        assert [line["outcome"]["metrics"]["worker_cwd"] for line in gap_lines] == cwds
        for line, cwd in zip(gap_lines, cwds, strict=True):
            assert line["messages"] == []
            assert line["provenance"]["gap"] == gaps.opencode_unavailable(cwd, problem)
            assert line["outcome"]["metrics"]["has_session"] is False


def test_opencode_database_of_garbage_bytes_gives_labeled_gap_lines(rnd: Round, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 64)

    result = cli_backfill(rnd, opencode_db=garbage)

    after = backfilled(result, rnd)
    assert_every_worker_is_one_store_gap(rnd, after, f"{garbage}: not an SQLite database")
    assert json.loads(result.stdout.rsplit("\nrollout ledger", 1)[0])["opencodeDbAvailable"] is False


def test_opencode_database_with_a_damaged_session_table_gives_labeled_gap_lines(rnd: Round) -> None:
    # The schema, message and part pages stay intact: only the session table's page is garbage,
    # so the store opens and its first reads succeed; its sessions cannot be looked up.
    with sqlite3.connect(rnd.db) as connection:
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
        (root,) = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'session'").fetchone()
    connection.close()
    with open(rnd.db, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xde\xad\xbe\xef" * (page_size // 4))

    result = cli_backfill(rnd)

    after = backfilled(result, rnd)
    assert_every_worker_is_one_store_gap(rnd, after, f"{rnd.db}: database disk image is malformed")
    assert json.loads(result.stdout.rsplit("\nrollout ledger", 1)[0])["opencodeDbAvailable"] is False
    # The checks' own recount reads the store as unreadable too, so they expect these gaps.
    assert audit.recount_inputs(rnd.out_dir, rnd.db).store_readable is False


def test_missing_opencode_database_gives_labeled_gap_lines(rnd: Round, tmp_path: Path) -> None:
    result = cli_backfill(rnd, opencode_db=tmp_path / "no-such" / "opencode.db")

    after = backfilled(result, rnd)
    assert_every_worker_is_one_store_gap(rnd, after)


WAL_WRITER = textwrap.dedent(
    """
    import itertools, sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], timeout=30)
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    padding = "x" * 4000  # a few pages per transaction, so the WAL grows and checkpoints run
    for n in itertools.count():
        sid = f"ses_concurrent_{n:09d}"
        connection.execute(
            "INSERT INTO session (id, directory, time_created, time_updated) VALUES (?, ?, ?, ?)",
            (sid, "/elsewhere/another-project", n, n),
        )
        connection.execute(
            "INSERT INTO message (id, session_id, time_created, data) VALUES (?, ?, ?, ?)",
            ("msg_" + sid, sid, n, '{"role":"user"}'),
        )
        connection.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, data) VALUES (?, ?, ?, ?, ?)",
            ("prt_" + sid, "msg_" + sid, sid, n, '{"type":"text","text":"' + padding + '"}'),
        )
        connection.commit()
        if n == 0:
            print("writing", flush=True)
    """
)


def count_sessions(db: Path) -> int:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return connection.execute("SELECT count(*) FROM session").fetchone()[0]
    finally:
        connection.close()


def test_database_written_by_another_process_during_the_backfill_joins_every_session(
    rnd: Round, tmp_path: Path
) -> None:
    store = tmp_path / "live" / "opencode.db"
    store.parent.mkdir()
    shutil.copy(rnd.db, store)
    writer = subprocess.Popen(
        [sys.executable, "-c", WAL_WRITER, str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "writing\n", writer.stderr.read() if writer.stderr else ""
        sessions_at_start = count_sessions(store)

        result = cli_backfill(rnd, opencode_db=store)

        sessions_at_end = count_sessions(store)
        assert writer.poll() is None, "the writer stopped before the backfill ended"
    finally:
        writer.kill()
        writer.wait(timeout=30)
    # The writer committed rows all through the backfill ...
    assert sessions_at_end > sessions_at_start
    # ... and the backfill still completed with every session of the round joined, unchanged.
    after = backfilled(result, rnd)
    assert changed_lines(rnd.before, after) == {}
    assert sum(1 for line in after if line["role"] == "worker" and line["messages"]) == WORKERS


def test_malformed_message_json_is_skipped_and_the_rest_kept(rnd: Round) -> None:
    worker = first_worker(rnd)
    message_id, _ = user_message_and_parts(rnd.db, session_of(worker))
    set_raw(rnd.db, "message", message_id, '{"role": "user", "time": {"created": 17')

    after = backfilled(cli_backfill(rnd), rnd)

    changed = changed_lines(rnd.before, after)
    assert set(changed) == {worker["rollout_id"]}
    old, new = changed[worker["rollout_id"]]
    assert old["messages"][0]["role"] == "user"
    assert new["messages"] == old["messages"][1:]  # only the malformed message is gone
    old["messages"] = new["messages"]
    assert new == old


def test_malformed_part_json_is_skipped_and_the_rest_kept(rnd: Round) -> None:
    worker = first_worker(rnd)
    _, parts = user_message_and_parts(rnd.db, session_of(worker))
    (_, first), (second_id, _) = parts  # the prompt, then its <context> part
    set_raw(rnd.db, "part", second_id, '{"type": "text", "text": "<context>\\nrepository')

    after = backfilled(cli_backfill(rnd), rnd)

    assert_only_user_prompt_changed(rnd, after, worker, json.loads(first)["text"])


def test_invalid_utf8_in_a_cell_cache_reads_as_replacement_characters(rnd: Round) -> None:
    cache = rnd.cell_cache()
    record = json.loads(cache.read_bytes())
    record["resolvedModel"] = "anthropic/claude-@@BAD@@sonnet"
    cache.write_bytes(with_bad_bytes(record))

    after = backfilled(cli_backfill(rnd), rnd)

    supervisor = rnd.supervisor("gen0-cand0", "astropy__astropy-12907")
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {supervisor["rollout_id"]}
    old, new = changed[supervisor["rollout_id"]]
    assert (new["policy"]["provider"], new["policy"]["model"]) == ("anthropic", f"claude-{REPLACED}sonnet")
    old["policy"].update(provider="anthropic", model=f"claude-{REPLACED}sonnet")
    assert new == old


def test_invalid_utf8_in_a_result_json_reads_as_replacement_characters(rnd: Round) -> None:
    result_json = rnd.run_dir(rnd.cell_cache()) / "result.json"
    result = json.loads(result_json.read_bytes())
    result["sup_verdict"] = "resolved @@BAD@@ verdict"
    result_json.write_bytes(with_bad_bytes(result))

    after = backfilled(cli_backfill(rnd), rnd)

    supervisor = rnd.supervisor("gen0-cand0", "astropy__astropy-12907")
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {supervisor["rollout_id"]}  # its worker lines are all still there
    old, new = changed[supervisor["rollout_id"]]
    assert new["outcome"]["metrics"]["sup_verdict"] == f"resolved {REPLACED} verdict"
    old["outcome"]["metrics"]["sup_verdict"] = f"resolved {REPLACED} verdict"
    assert new == old


def test_invalid_utf8_in_a_shot_receipt_reads_as_replacement_characters(rnd: Round) -> None:
    receipt_path = rnd.out_dir / "proposer-shots" / "gen0-cand0-shot0.json"
    receipt = json.loads(receipt_path.read_bytes())
    receipt["receipt"]["harness"] = "claude-code@@BAD@@"
    receipt_path.write_bytes(with_bad_bytes(receipt))

    after = backfilled(cli_backfill(rnd), rnd)

    proposer = rnd.proposer_of("gen0-cand0")
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {proposer["rollout_id"]}
    old, new = changed[proposer["rollout_id"]]
    assert new["policy"]["harness"] == f"claude-code{REPLACED}"
    old["policy"]["harness"] = f"claude-code{REPLACED}"
    assert new == old


def test_invalid_utf8_in_an_opencode_part_reads_as_replacement_characters(rnd: Round) -> None:
    worker = first_worker(rnd)
    _, parts = user_message_and_parts(rnd.db, session_of(worker))
    (_, first), (second_id, second) = parts
    assert "<context>" in second
    set_raw(
        rnd.db,
        "part",
        second_id,
        second.encode("utf-8").replace(b"<context>", b"<cont" + BAD_UTF8 + b"ext>", 1),
    )

    after = backfilled(cli_backfill(rnd), rnd)

    expected_second = json.loads(second)["text"].replace("<context>", f"<cont{REPLACED}ext>", 1)
    assert_only_user_prompt_changed(rnd, after, worker, json.loads(first)["text"] + "\n" + expected_second)


def test_invalid_utf8_in_a_transcript_reads_as_replacement_characters(rnd: Round) -> None:
    proposer = rnd.proposer_of("gen0-cand0")
    transcript = rnd.transcript_of(proposer)
    prompt = proposer["messages"][0]["content"]
    head = prompt[:12]
    assert json.dumps(head)[1:-1] == head  # written as-is in the file: no escapes to step over
    raw_lines = transcript.read_bytes().split(b"\n")
    index = next(
        i
        for i, raw in enumerate(raw_lines)
        if raw.strip()
        and json.loads(raw).get("type") == "user"
        and json.loads(raw)["message"]["content"] == prompt
    )
    raw_lines[index] = raw_lines[index].replace(
        head.encode(), head[:6].encode() + BAD_UTF8 + head[6:].encode(), 1
    )
    transcript.write_bytes(b"\n".join(raw_lines))

    after = backfilled(cli_backfill(rnd), rnd)

    changed = changed_lines(rnd.before, after)
    assert set(changed) == {proposer["rollout_id"]}
    old, new = changed[proposer["rollout_id"]]
    expected = prompt.replace(head, head[:6] + REPLACED + head[6:], 1)
    assert new["messages"][0] == {"role": "user", "content": expected}
    old["messages"][0]["content"] = expected
    assert new == old


def test_transcript_whose_last_line_is_cut_off_keeps_every_earlier_message(rnd: Round) -> None:
    proposer = rnd.proposer_of("gen0-cand1-atlas")
    transcript = rnd.transcript_of(proposer)
    raw = transcript.read_bytes()
    assert raw.endswith(b"\n")
    last = raw[:-1].rsplit(b"\n", 1)[1]
    last_entry = json.loads(last)
    assert last_entry["type"] == "assistant"
    last_text = "\n".join(b["text"] for b in last_entry["message"]["content"] if b["type"] == "text")
    assert proposer["messages"][-1]["content"] == last_text  # the last line is the last message
    transcript.write_bytes(raw[: len(raw) - 1 - len(last) // 2])  # half the last line, no newline

    after = backfilled(cli_backfill(rnd), rnd)

    changed = changed_lines(rnd.before, after)
    assert set(changed) == {proposer["rollout_id"]}
    old, new = changed[proposer["rollout_id"]]
    assert new["messages"] == old["messages"][:-1]
    assert (
        new["provenance"].get("gap") is None
        and new["outcome"]["is_completed"] == old["outcome"]["is_completed"]
    )


# -- an unreadable transcript folder ------------------------------------------------

# Runs the command line as `nobody`. Every lazy import is warmed first by one run as root
# (into a scratch ledger), so nothing is imported after the privileges are gone.
BACKFILL_AS_NOBODY = (
    textwrap.dedent(
        """
        import contextlib, io, sys
        import rollout_assets.cli as cli
        scratch = sys.argv.pop(1)
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli.main(["backfill", *sys.argv[1:2], scratch, *sys.argv[3:]]) == 0
        from rollout_assets.sources.opencode_store import remove_snapshots
        remove_snapshots()  # root's store snapshot: `nobody` could not remove it at exit
        """
    )
    + DROP_TO_NOBODY
    + 'sys.exit(cli.main(["backfill", *sys.argv[1:]]))\n'
)


def backfill_as_nobody(rnd: Round, scratch: Path) -> subprocess.CompletedProcess[str]:
    """The command line's backfill of `rnd`, as `nobody` (who must be able to write OUT's folder)."""
    rnd.ledger.parent.chmod(0o777)
    args = [
        str(rnd.out_dir),
        str(rnd.ledger),
        "--opencode-db",
        str(rnd.db),
        "--claude-projects",
        str(rnd.claude),
    ]
    return run_unprivileged(BACKFILL_AS_NOBODY, str(scratch), *args)


@pytest.mark.parametrize(
    ("closed", "why"),
    [
        (
            "improve-run/gen-0/candidate-0/astropy__astropy-12907__rep0",
            "cannot tell whether it holds a cached-result.json",
        ),
        ("proposer-shots", "cannot list directory"),
    ],
    ids=["a cell folder it cannot search", "a receipts folder it cannot list"],
)
def test_a_round_folder_the_backfill_cannot_look_into_stops_it_naming_the_folder(
    world_readable_tmp: Path, closed: str, why: str
) -> None:
    # Skipping it would drop its cell (or shots) without a line or a gap.
    rnd = make_round(world_readable_tmp)
    (rnd.out_dir / closed).chmod(0o600 if closed.startswith("improve-run") else 0o311)

    result = backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl")

    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"rollout-assets: error: {rnd.out_dir / closed}: {why} (Permission denied)"
    ]
    assert rnd.ledger.read_bytes() == OLD_LEDGER


def assert_only_proposer_became_unreadable_gap(
    rnd: Round, after: list[dict[str, Any]], proposer: dict[str, Any], path: Path, why: str
) -> dict[str, Any]:
    """Only `proposer` changed: a gap naming `path` and `why`, not "no transcript matched" (its
    transcript may be the very file that could not be read), counted as a shot missed."""
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {proposer["rollout_id"]}
    old, new = changed[proposer["rollout_id"]]
    assert old["messages"] != [] and new["messages"] == []
    worktree = new["artifacts"]["run_dir"]
    assert new["provenance"]["gap"] == gaps.claude_transcripts_unreadable(worktree, str(path), why)
    assert new["provenance"]["gap"] == f"claude transcripts of worktree {worktree} cannot be read ({path}: {why})"
    assert gaps.gap_kind(new["provenance"]["gap"]) == gaps.KIND_CLAUDE_TRANSCRIPTS_UNREADABLE
    # Nothing was joined: no transcript's usage counted, the receipt is the reference.
    assert new["cost"]["tokens_in"] is None
    assert new["artifacts"]["transcript_ref"] != old["artifacts"]["transcript_ref"]
    assert new["artifacts"]["transcript_ref"].endswith(".json")
    return new


def test_unreadable_transcript_folder_gives_a_gap_naming_the_folder(world_readable_tmp: Path) -> None:
    rnd = make_round(world_readable_tmp)
    proposer = rnd.proposer_of("gen0-cand0")
    folder = rnd.transcript_of(proposer).parent
    folder.chmod(0o000)

    result = backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl")

    after = backfilled(result, rnd)
    # The other proposer's transcript (a readable folder) was joined as before, as nobody:
    # so the gap is the folder's permission, not a user who can read nothing.
    assert_only_proposer_became_unreadable_gap(rnd, after, proposer, folder, "Permission denied")
    stats = json.loads(result.stdout.rsplit("\nrollout ledger → ", 1)[0])
    assert stats["proposerShotsMissed"] == 1 and stats["proposerShotsJoined"] == SHOTS - 1
    assert stats["byGapReason"]["claude_transcripts_unreadable"] == 1


def test_unreadable_transcript_file_leaves_its_shot_unjoined_naming_the_file(world_readable_tmp: Path) -> None:
    # Another file of the folder may match the window, but the unread one may be the closer match.
    rnd = make_round(world_readable_tmp)
    proposer = rnd.proposer_of("gen0-cand0")
    transcript = rnd.transcript_of(proposer)
    shutil.copy(transcript, transcript.with_name("0-also-in-the-window.jsonl"))
    transcript.chmod(0o000)

    result = backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl")

    after = backfilled(result, rnd)
    assert_only_proposer_became_unreadable_gap(rnd, after, proposer, transcript, "Permission denied")


def test_transcript_folder_that_is_a_symlink_loop_gives_a_gap_the_checks_expect(rnd: Round) -> None:
    proposer = rnd.proposer_of("gen0-cand0")
    folder = rnd.transcript_of(proposer).parent
    shutil.rmtree(folder)
    folder.symlink_to(folder.name)  # there, but ELOOP on every listing

    after = backfilled(cli_backfill(rnd), rnd)

    new = assert_only_proposer_became_unreadable_gap(
        rnd, after, proposer, folder, os.strerror(errno.ELOOP)
    )
    assert audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed
    # The checks expect that gap and no other: "no transcript matched" would hide the cause.
    line = next(line for line in after if line["rollout_id"] == new["rollout_id"])
    line["provenance"]["gap"] = gaps.no_claude_transcript(new["artifacts"]["run_dir"])
    rnd.ledger.write_text("".join(json.dumps(line) + "\n" for line in after), encoding="utf-8")
    verdict = audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude)
    assert not verdict.passed
    assert any("cannot be read" in sample for sample in verdict.sample), verdict.sample


def test_a_socket_named_like_a_transcript_is_no_transcript(rnd: Round) -> None:
    # Opening a socket fails ("No such device or address") before its type is seen; it is still
    # no file, like a FIFO, not an unreadable transcript that would block the whole worktree.
    import socket

    proposer = rnd.proposer_of("gen0-cand0")
    folder = rnd.transcript_of(proposer).parent
    server = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(folder)  # bound by a relative name: a socket's path may not exceed 107 bytes
    try:
        server.bind("0-socket.jsonl")
    finally:
        os.chdir(cwd)
    try:
        after = backfilled(cli_backfill(rnd), rnd)
    finally:
        server.close()

    assert changed_lines(rnd.before, after) == {}
    assert audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed


def test_a_folder_named_like_a_transcript_that_cannot_be_entered_is_no_transcript(world_readable_tmp: Path) -> None:
    rnd = make_round(world_readable_tmp)
    proposer = rnd.proposer_of("gen0-cand0")
    rnd.transcript_of(proposer).with_name("0-closed.jsonl").mkdir(mode=0o000)

    # As nobody: opening the folder fails ("Permission denied") before its type is seen.
    after = backfilled(backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl"), rnd)

    assert changed_lines(rnd.before, after) == {}


def test_a_project_folder_name_too_long_to_exist_hides_no_transcript(rnd: Round, tmp_path: Path) -> None:
    """The round is given by a short path, a symlink to where it really is, whose worktree
    paths are too long to name a project folder (over 255 bytes): that spelling's folder cannot
    exist, and the transcripts in the folder of the given spelling are joined as before."""
    real = tmp_path / ("r" * 120) / ("e" * 120) / "round"
    real.parent.mkdir(parents=True)
    rnd.out_dir.rename(real)
    rnd.out_dir.symlink_to(real)
    proposer = rnd.proposer_of("gen0-cand0")
    real_worktree = os.path.realpath(proposer["artifacts"]["run_dir"])
    assert len(claude_project_slug(real_worktree).encode()) > 255

    after = backfilled(cli_backfill(rnd), rnd)

    assert changed_lines(rnd.before, after) == {}
    assert audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed


def test_transcript_file_that_is_a_symlink_loop_is_a_gap_the_checks_accept(rnd: Round) -> None:
    proposer = rnd.proposer_of("gen0-cand0")
    loop = rnd.transcript_of(proposer).with_name("0-loop.jsonl")
    loop.symlink_to(loop.name)

    after = backfilled(cli_backfill(rnd), rnd)

    new = assert_only_proposer_became_unreadable_gap(rnd, after, proposer, loop, os.strerror(errno.ELOOP))
    assert audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed
    # A file the round's Claude folder does not hold is no excuse for the gap.
    line = next(line for line in after if line["rollout_id"] == new["rollout_id"])
    line["provenance"]["gap"] = new["provenance"]["gap"].replace("0-loop.jsonl", "elsewhere.jsonl")
    rnd.ledger.write_text("".join(json.dumps(line) + "\n" for line in after), encoding="utf-8")
    assert not audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed


def test_symlink_loops_in_a_campaign_dir_and_in_proposer_shots_change_nothing(rnd: Round) -> None:
    campaign = rnd.campaign("gen-0/candidate-0")
    shots = rnd.out_dir / "proposer-shots"
    for folder in (campaign, shots, rnd.out_dir / "improve-run"):
        (folder / "loop").symlink_to("loop")  # ELOOP on every access
        (folder / "ping").symlink_to("pong")  # a two-link loop
        (folder / "pong").symlink_to("ping")
        (folder / "again").symlink_to(".")  # a cycle back to the folder itself
    (rnd.out_dir / "improve-run" / "gen-7").symlink_to("gen-7")  # a loop named like a generation
    (shots / "zeta").symlink_to("zeta")  # a loop named like an author folder

    after = backfilled(cli_backfill(rnd), rnd)

    assert changed_lines(rnd.before, after) == {}


def test_nan_in_a_result_json_reads_as_unreadable_and_is_labeled(rnd: Round) -> None:
    cache = rnd.cell_cache("gen-0/candidate-1", "django__django-11532")
    result_json = rnd.run_dir(cache) / "result.json"
    result_json.write_bytes(result_json.read_bytes().replace(b'"spawned":', b'"spawned":NaN,"was":', 1))

    after = backfilled(cli_backfill(rnd), rnd)

    supervisor = rnd.supervisor("gen0-cand1", "django__django-11532")
    workers = {line["rollout_id"] for line in rnd.workers_of(supervisor)}
    assert len(workers) == 2
    changed = changed_lines(rnd.before, after, removed=workers)
    assert set(changed) == {supervisor["rollout_id"]}
    new = changed[supervisor["rollout_id"]][1]
    # Its worker cwds cannot be listed any more: the supervisor line says so.
    assert new["provenance"]["gap"] == gaps.supervisor_gap(True)
    assert new["outcome"]["metrics"]["worker_list_missing"] is True
    assert new["outcome"]["metrics"]["sup_status"] is None


@pytest.mark.parametrize("listed", ["absent", [], [None, 7]], ids=["no list", "empty list", "no string"])
def test_result_json_counting_workers_without_listing_them_is_labeled(rnd: Round, listed: Any) -> None:
    cache = rnd.cell_cache("gen-0/candidate-1", "django__django-11532")
    result_json = rnd.run_dir(cache) / "result.json"
    result = json.loads(result_json.read_bytes())
    assert result["spawned"] > 0
    if listed == "absent":
        del result["recoveredSpend"]["workerCwds"]
    else:
        result["recoveredSpend"]["workerCwds"] = listed
    result_json.write_text(json.dumps(result))

    completed = cli_backfill(rnd)
    after = backfilled(completed, rnd)

    supervisor = rnd.supervisor("gen0-cand1", "django__django-11532")
    workers = {line["rollout_id"] for line in rnd.workers_of(supervisor)}
    assert len(workers) == 2
    changed = changed_lines(rnd.before, after, removed=workers)
    assert set(changed) == {supervisor["rollout_id"]}
    old, new = changed[supervisor["rollout_id"]]
    # The workers ran, yet none can be named: the supervisor line says so, as the stats do.
    assert new["provenance"]["gap"] == gaps.supervisor_gap(False, workers_unlisted=True)
    assert gaps.gap_kind(new["provenance"]["gap"]) == gaps.KIND_WORKER_LIST_MISSING
    assert new["outcome"]["metrics"].pop("worker_list_missing") is True
    old["provenance"]["gap"] = new["provenance"]["gap"]
    assert new == old
    assert json.loads(completed.stdout.rsplit("\nrollout ledger → ", 1)[0])["cellsWithoutWorkerList"] == 1
    assert cells_without_worker_list(rnd.out_dir) == ["gen0-cand1/django__django-11532/rep0"]
    assert audit_inputs_match(rnd.out_dir, rnd.ledger, rnd.db, rnd.claude).passed


def test_infinity_in_a_shot_receipt_reads_like_an_unreadable_receipt(rnd: Round) -> None:
    receipt_path = rnd.out_dir / "proposer-shots" / "atlas" / "gen0-cand1-shot0.json"
    original = receipt_path.read_bytes()
    receipt_path.write_bytes(original.replace(b'"costUsd":', b'"costUsd": Infinity, "was":', 1))
    with_infinity = backfilled(cli_backfill(rnd), rnd)
    receipt_path.write_bytes(original[: len(original) // 2])  # a receipt cut in half: plainly not JSON
    with_garbage = backfilled(cli_backfill(rnd), rnd)

    proposer = rnd.proposer_of("gen0-cand1-atlas")
    changed = changed_lines(rnd.before, with_infinity)
    assert set(changed) == {proposer["rollout_id"]}
    new = changed[proposer["rollout_id"]][1]
    assert new["policy"]["harness"] is None and new["outcome"]["metrics"]["exit_code"] is None
    assert new["cost"]["usd"] is None  # never Infinity, never 0
    assert [stripped(line) for line in with_infinity] == [stripped(line) for line in with_garbage]


def test_numbers_beyond_a_double_read_as_null_and_change_only_their_fields(rnd: Round) -> None:
    # JSON.parse makes 1e400 Infinity and the seed writes it as null; a line holds finite numbers.
    receipt_path = rnd.out_dir / "proposer-shots" / "atlas" / "gen0-cand1-shot0.json"
    receipt = json.loads(receipt_path.read_bytes())
    receipt_path.write_text(
        json.dumps(receipt)
        .replace(f'"costUsd": {receipt["receipt"]["costUsd"]}', '"costUsd": 1e400', 1)
        .replace(f'"durationMs": {receipt["receipt"]["durationMs"]}', '"durationMs": -1e400', 1)
    )
    cache = rnd.cell_cache()
    cache.write_bytes(cache.read_bytes().replace(b'"costUsd":', b'"costUsd":' + b"9" * 400 + b',"was":', 1))

    after = backfilled(cli_backfill(rnd), rnd)

    proposer = rnd.proposer_of("gen0-cand1-atlas")
    supervisor = rnd.supervisor("gen0-cand0", "astropy__astropy-12907")
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {proposer["rollout_id"], supervisor["rollout_id"]}
    old, new = changed[proposer["rollout_id"]]
    assert (new["cost"]["usd"], new["cost"]["wall_s"]) == (None, None)
    old["cost"]["usd"] = old["cost"]["wall_s"] = None
    assert new == old
    old, new = changed[supervisor["rollout_id"]]
    assert new["cost"]["usd"] is None
    old["cost"]["usd"] = None
    assert new == old


def test_costs_whose_sum_overflows_are_reported_as_null_in_strict_json(rnd: Round) -> None:
    for receipt_path in sorted((rnd.out_dir / "proposer-shots").rglob("*.json")):
        receipt = json.loads(receipt_path.read_bytes())
        receipt["receipt"]["costUsd"] = 1.5e308  # finite; two of them are not
        receipt_path.write_text(json.dumps(receipt))

    result = cli_backfill(rnd)
    backfilled(result, rnd)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the stats: not JSON")

    stats = json.loads(result.stdout.rsplit("\nrollout ledger → ", 1)[0], parse_constant=refuse)
    assert stats["costUsdByRole"]["proposer"] == {"usd": None, "linesWithCost": SHOTS}


def test_infinite_numbers_in_a_session_row_read_as_null(rnd: Round) -> None:
    worker = first_worker(rnd)
    with sqlite3.connect(rnd.db) as connection:
        connection.execute(
            "UPDATE session SET cost = 1e999, time_updated = 1e999, agent = X'00' WHERE id = ?",
            (session_of(worker),),
        )
    connection.close()

    after = backfilled(cli_backfill(rnd), rnd)

    changed = changed_lines(rnd.before, after)
    assert set(changed) == {worker["rollout_id"]}
    old, new = changed[worker["rollout_id"]]
    assert (new["cost"]["usd"], new["cost"]["wall_s"], new["outcome"]["metrics"]["session_agent"]) == (
        None,
        None,
        None,
    )
    old["cost"]["usd"] = old["cost"]["wall_s"] = old["outcome"]["metrics"]["session_agent"] = None
    assert new == old


def test_part_nested_100000_deep_is_skipped_and_the_rest_kept(rnd: Round) -> None:
    worker = first_worker(rnd)
    _, parts = user_message_and_parts(rnd.db, session_of(worker))
    (_, first), (second_id, _) = parts
    set_raw(rnd.db, "part", second_id, '{"type": "text", "text": "<context>", "deep": ' + nested(DEEP) + "}")

    after = backfilled(cli_backfill(rnd), rnd)

    assert_only_user_prompt_changed(rnd, after, worker, json.loads(first)["text"])


def first_tool_part(db: Path, session_id: str) -> tuple[str, dict[str, Any]]:
    """The first `tool` part of a session's assistant steps: (part id, its data), by plain SQL."""
    with sqlite3.connect(db) as connection:
        part_id, data = connection.execute(
            "SELECT p.id, p.data FROM part AS p JOIN message AS m ON m.id = p.message_id "
            'WHERE m.session_id = ? AND p.data LIKE \'{"type":"tool"%\' ORDER BY p.id LIMIT 1',
            (session_id,),
        ).fetchone()
    connection.close()
    return part_id, json.loads(data)


def test_a_tool_part_nested_1000_deep_keeps_its_call_with_the_input_as_json_text(rnd: Round) -> None:
    # orjson reads 1,024 levels but writes 254: the call's arguments are written by the
    # standard module instead. Only text reaches the line, so the call is kept, not dropped.
    worker = first_worker(rnd)
    part_id, part = first_tool_part(rnd.db, session_of(worker))
    call_id = part["callID"]
    part["state"]["input"] = "@@DEEP@@"
    set_raw(rnd.db, "part", part_id, json.dumps(part).replace('"@@DEEP@@"', nested(PARSEABLE_DEEP)))

    after = backfilled(cli_backfill(rnd), rnd)

    changed = changed_lines(rnd.before, after)
    assert set(changed) == {worker["rollout_id"]}
    old, new = changed[worker["rollout_id"]]
    calls = [call for message in new["messages"] for call in message.get("tool_calls", []) if call["id"] == call_id]
    assert [call["function"]["arguments"] for call in calls] == [nested(PARSEABLE_DEEP)]
    calls[0]["function"]["arguments"] = next(
        call for message in old["messages"] for call in message.get("tool_calls", []) if call["id"] == call_id
    )["function"]["arguments"]
    assert new == old


# -- a 50 MB tool output -------------------------------------------------------------

BIG_OUTPUT_BYTES = 50 * 1024 * 1024
# Peak RSS bound of the whole `rollout-assets backfill`: os.wait4 reports the largest RSS of
# the process and its forked workers. Measured here: 34 MiB for this round without the big
# part, 332 MiB with it, i.e. the 50 MiB output exists about six times at once while its
# session is read and written (SQLite's temp B-tree for `ORDER BY p.id` and its value buffer,
# the row's bytes, the parsed string, the encoded ledger line and its growing buffer).
# 400 MiB = that, plus room for a little more than one copy: a change that holds two more
# copies for good (the transcript turned into models, the round's lines collected in a list)
# fails it.
PEAK_RSS_BOUND_MIB = 400
# Linux carries the high-water RSS of the address space a process replaces across execve
# into its ru_maxrss: a child of pytest (hundreds of MiB by then) reports at least pytest's
# RSS. So a tiny interpreter (`-S`: no site packages) forks and execs the backfill and reads
# its rusage with os.wait4.
RSS_PROBE = textwrap.dedent(
    """
    import os, sys
    pid = os.fork()
    if pid == 0:
        os.execv(sys.argv[2], sys.argv[2:])
    _, status, usage = os.wait4(pid, 0)
    with open(sys.argv[1], "w") as out:
        out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
    """
)


def big_output() -> str:
    line = "0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ -=+ tool output line\n"
    text = line * (BIG_OUTPUT_BYTES // len(line) + 1)
    return text[:BIG_OUTPUT_BYTES]


def test_50_mb_tool_output_is_kept_whole_within_bounded_memory(rnd: Round, tmp_path: Path) -> None:
    worker = first_worker(rnd)
    part_id, part = first_tool_part(rnd.db, session_of(worker))
    output = big_output()
    part["state"]["output"] = output
    set_raw(rnd.db, "part", part_id, json.dumps(part))
    digest = hashlib.sha256(output.encode()).hexdigest()
    del output, part["state"]["output"]

    stdout, measured = tmp_path / "stdout.txt", tmp_path / "rusage.txt"
    command = [
        str(Path(sys.executable).parent / "rollout-assets"),
        "backfill",
        str(rnd.out_dir),
        str(rnd.ledger),
        "--opencode-db",
        str(rnd.db),
        "--claude-projects",
        str(rnd.claude),
    ]
    with open(stdout, "wb") as sink:
        probe = subprocess.run(
            [sys.executable, "-S", "-c", RSS_PROBE, str(measured), *command],
            stdout=sink,
            stderr=subprocess.PIPE,
            timeout=300,
            check=False,
        )
    assert probe.returncode == 0, probe.stderr
    exit_code, max_rss_kib = map(int, measured.read_text().split())
    peak_mib = max_rss_kib / 1024  # Linux reports KiB

    after = backfilled(
        subprocess.CompletedProcess(command, exit_code, stdout.read_text(), probe.stderr.decode()), rnd
    )
    assert peak_mib < PEAK_RSS_BOUND_MIB, f"peak RSS {peak_mib:.0f} MiB"
    changed = changed_lines(rnd.before, after)
    assert set(changed) == {worker["rollout_id"]}
    tool_messages = [
        m for m in changed[worker["rollout_id"]][1]["messages"] if m.get("tool_call_id") == part["callID"]
    ]
    assert len(tool_messages) == 1
    content = tool_messages[0]["content"]
    assert len(content) == BIG_OUTPUT_BYTES
    assert hashlib.sha256(content.encode()).hexdigest() == digest


# ===========================================================================
# Through Dagster: rounds changing or disappearing mid-run, hostile round names
# ===========================================================================


@pytest.fixture(scope="module")
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as test_instance:
        yield test_instance


def ledger_state(folder: Path) -> dict[str, str]:
    """sha256 of every file under a round's ledger folder (the ledger, stats and stage files)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def materialize_assets(
    instance: DagsterInstance, resources: dict[str, Any], key: str, names: list[str]
) -> Any:
    return materialize(
        ALL_ROUND_DEFS,
        selection=names,
        partition_key=key,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )


def test_round_directory_removed_during_a_run_fails_naming_it(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    layout = write_demo(tmp_path / "demo", rounds=[SPEC])
    resources = round_resources(layout, tmp_path / "ledgers")
    assert materialize_round(instance, resources, SPEC.name).success
    outputs = tmp_path / "ledgers" / SPEC.name
    assert materialize_assets(instance, resources, SPEC.name, ["round_manifest"]).success
    previous = ledger_state(outputs)

    shutil.rmtree(layout.rounds[0])
    result = materialize_assets(
        instance,
        resources,
        SPEC.name,
        ["campaign_cells", "worker_sessions", "proposer_transcripts", "rollout_ledger", "rollout_stats"],
    )

    assert not result.success
    failures = step_failures(result)
    assert "campaign_cells" in failures
    for step, message in failures.items():
        assert str(layout.rounds[0]) in message, (step, message)
        assert "Traceback" not in message
    # No stage succeeded on a round that is gone (the proposer stage would list no receipts
    # and store an empty file), and the previous ledger and stages are byte-identical.
    assert {e.step_key for e in result.get_step_success_events()} == set()
    assert ledger_state(outputs) == previous


def test_cells_appearing_during_a_run_fail_with_round_changed_error(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    layout = write_demo(tmp_path / "demo", rounds=[SPEC])
    resources = round_resources(layout, tmp_path / "ledgers")
    assert materialize_round(instance, resources, SPEC.name).success
    outputs = tmp_path / "ledgers" / SPEC.name
    assert materialize_assets(instance, resources, SPEC.name, ["round_manifest"]).success
    previous_ledger = (outputs / "rollout-ledger.jsonl").read_bytes()

    campaign = layout.rounds[0] / "improve-run" / "gen-0" / "candidate-0"
    new_cell = campaign / "astropy__astropy-12907__rep1"
    shutil.copytree(campaign / "astropy__astropy-12907__rep0", new_cell)
    record = json.loads((new_cell / "cached-result.json").read_bytes())
    record["rep"] = 1
    (new_cell / "cached-result.json").write_text(json.dumps(record), encoding="utf-8")
    result = materialize_assets(
        instance,
        resources,
        SPEC.name,
        ["campaign_cells", "worker_sessions", "rollout_ledger", "rollout_stats"],
    )

    assert not result.success
    message = step_failures(result)["campaign_cells"]
    assert message.startswith(
        f"round {layout.rounds[0]} changed since its round_manifest was materialized: 1 cell(s) added"
    )
    assert str(new_cell / "cached-result.json") in message
    failure = next(e for e in result.get_step_failure_events() if e.step_key == "campaign_cells")
    assert failure.step_failure_data.user_failure_data.metadata["error"].value == "RoundChangedError"
    assert (outputs / "rollout-ledger.jsonl").read_bytes() == previous_ledger


HOSTILE_NAMES = {
    "space": "round 001",
    "dot-dot": "..",
    "dot-dot-inside": "round..001",
    "parent-escape": "../escape",
    "three-hundred-chars": "r" * 300,
    "non-ascii": "ründe-001",
    "slash": "rounds/001",
    "absolute": "/tmp/rollout-hostile-absolute",
    "trailing-newline": "round-001\n",
    "leading-dash": "-round",
}


@pytest.mark.parametrize("name", HOSTILE_NAMES.values(), ids=HOSTILE_NAMES.keys())
def test_hostile_round_name_is_refused_by_the_resources(name: str, tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    (sandbox / "rounds").mkdir(parents=True)
    ledger_root = LedgerRoot(root_dir=str(sandbox / "ledgers"))
    rounds_root = RoundsRoot(root_dir=str(sandbox / "rounds"))

    assert round_key_problem(name) is not None
    for refuse in (ledger_root.outputs, ledger_root.writable_outputs, rounds_root.round_dir):
        with pytest.raises(InvalidRoundKey, match="is not a valid partition key"):
            refuse(name)
    assert sorted(str(p.relative_to(sandbox)) for p in sandbox.rglob("*")) == ["rounds"]
    assert not Path("/tmp/rollout-hostile-absolute").exists()


def tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (without following links): files by content hash."""
    entries = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs:
            entries[os.path.relpath(os.path.join(base, name), folder)] = "dir"
        for name in files:
            path = Path(base, name)
            entries[os.path.relpath(path, folder)] = (
                "link" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
            )
    return entries


def test_hostile_round_names_make_no_asset_write_outside_the_ledger_root(tmp_path: Path) -> None:
    # A real round sits where several hostile keys would point (`..` is the demo folder,
    # `rounds/001` a nested round, ...), so only the key's validation can stop the write.
    # Dagster itself accepts every one of these keys as a dynamic partition.
    sandbox = tmp_path / "sandbox"
    layout = write_demo(sandbox / "demo", rounds=[SPEC])
    for alias in ("round 001", "ründe-001", "rounds/001", "round..001", "-round"):
        shutil.copytree(layout.rounds[0], layout.rounds_root / alias, symlinks=True)
    ledger_root = sandbox / "ledgers"
    ledger_root.mkdir()
    resources = round_resources(layout, ledger_root)
    outside = Path("/tmp/rollout-hostile-absolute")
    assert not outside.exists()
    before = tree(sandbox)
    # An in-memory instance: 60 runs in a few seconds (a SQLite one takes 0.3-0.5 s a run).
    instance = DagsterInstance.ephemeral()
    keys = list(HOSTILE_NAMES.values())
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, keys)

    for key in keys:
        for asset in ROUND_ASSETS:  # each asset on its own: a failed upstream must not hide one
            name = asset.key.to_user_string()
            result = materialize_assets(instance, resources, key, [name])
            assert not result.success, (key, name)
            (failure,) = result.get_step_failure_events()
            user = failure.step_failure_data.user_failure_data
            assert user is not None, (key, name, failure.step_failure_data.error)  # a Failure, no traceback
            assert user.metadata["error"].value == "InvalidRoundKey"
            assert f"round name {key!r} is not a valid partition key" in (user.description or "")

    assert tree(sandbox) == before  # nothing written anywhere: not outside, not inside the root
    assert list(ledger_root.iterdir()) == []
    assert not outside.exists()


def test_result_json_nested_100000_deep_is_labeled_and_the_checks_pass(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    # The reader and the checks' independent recount must both read it as unreadable (and
    # neither may die of a RecursionError): the supervisor is labeled, and the checks agree.
    layout = write_demo(tmp_path / "demo", rounds=[SPEC])
    cache = layout.rounds[0] / "improve-run" / "gen-0" / "candidate-0" / "astropy__astropy-12907__rep0"
    result_json = (
        Path(json.loads((cache / "cached-result.json").read_bytes())["artifact"]["runDir"]) / "result.json"
    )
    data = result_json.read_bytes().rstrip()
    assert data.endswith(b"}")
    result_json.write_bytes(data[:-1] + f',"deep":{nested(DEEP)}}}'.encode())

    result = materialize_round(instance, round_resources(layout, tmp_path / "ledgers"), SPEC.name)

    assert result.success, step_failures(result)
    ledger = list(read_ledger_dicts(tmp_path / "ledgers" / SPEC.name / "rollout-ledger.jsonl"))
    labeled = [line for line in ledger if line["outcome"]["metrics"].get("worker_list_missing") is True]
    assert len(labeled) == 1 and labeled[0]["provenance"]["gap"] == gaps.supervisor_gap(True)
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert all(e.passed for name, e in evaluations.items() if name != "every_cell_lists_its_workers")
    assert evaluations["every_cell_lists_its_workers"].passed is False  # the WARN names the cell


# ---------------------------------------------------------------------------
# Lone surrogates: a torn `\ud83d` escape in an input is text the ledger carries as an escape
# ---------------------------------------------------------------------------

TORN = "\ud83d"  # half of an emoji's UTF-16 pair: no UTF-8 form


def test_a_lone_surrogate_in_a_scenario_id_is_kept_in_the_ledger_and_the_manifest(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    layout = write_demo(tmp_path / "demo", rounds=[SPEC])
    cache = layout.rounds[0] / "improve-run" / "gen-0" / "candidate-0" / "astropy__astropy-12907__rep0"
    record = json.loads((cache / "cached-result.json").read_bytes())
    record["scenarioId"] += TORN
    (cache / "cached-result.json").write_text(json.dumps(record))  # ASCII: the escape as written
    ledger = tmp_path / "out.jsonl"

    completed = subprocess.run(
        backfill_command(layout, ledger),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    result = materialize_round(instance, round_resources(layout, tmp_path / "ledgers"), SPEC.name)

    assert completed.returncode == 0, completed.stderr[-2000:]
    assert b"\\ud83d" in ledger.read_bytes()
    torn = [line for line in read_ledger_dicts(ledger) if line["task"]["instance_id"].endswith(TORN)]
    assert [line["role"] for line in torn] == ["supervisor", "worker", "worker"]
    assert result.success, step_failures(result)
    assert all(e.passed for e in result.get_asset_check_evaluations())
    dagster_ledger = tmp_path / "ledgers" / SPEC.name / "rollout-ledger.jsonl"
    assert [stripped(line) for line in read_ledger_dicts(dagster_ledger)] == [
        stripped(line) for line in read_ledger_dicts(ledger)
    ]


def test_a_worker_cwd_with_a_lone_surrogate_is_a_labeled_gap(rnd: Round) -> None:
    cache = rnd.cell_cache("gen-0/candidate-1", "django__django-11532")
    result_json = rnd.run_dir(cache) / "result.json"
    result = json.loads(result_json.read_bytes())
    first_cwd = result["recoveredSpend"]["workerCwds"][0]
    result["recoveredSpend"]["workerCwds"][0] = first_cwd + TORN
    result_json.write_text(json.dumps(result))

    after = backfilled(cli_backfill(rnd), rnd)

    supervisor = rnd.supervisor("gen0-cand1", "django__django-11532")
    (old_worker, _) = rnd.workers_of(supervisor)
    new_workers = rnd.workers_of(supervisor, after)
    assert len(new_workers) == 2 and new_workers[1] == next(
        line for line in after if line["rollout_id"] == rnd.workers_of(supervisor)[1]["rollout_id"]
    )
    torn = new_workers[0]
    assert torn["outcome"]["metrics"]["worker_cwd"] == first_cwd + TORN
    # No stored directory can equal it: the store decodes its text with replacement characters.
    assert torn["provenance"]["gap"] == gaps.no_opencode_session(first_cwd + TORN)
    assert torn["rollout_id"] != old_worker["rollout_id"]


def test_claude_usage_whose_sum_overflows_a_double_is_null_and_the_round_is_written(tmp_path: Path) -> None:
    out_dir = tmp_path / "round"
    shots = out_dir / "proposer-shots"
    shots.mkdir(parents=True)
    (shots / "gen0-cand0-shot0.json").write_text('{"receipt": {}}', encoding="utf-8")
    worktree = os.path.join(out_dir, "proposer-wt", "gen0-cand0")
    folder = tmp_path / "claude" / claude_project_slug(worktree)
    folder.mkdir(parents=True)
    # Two turns of 1e308 output tokens each: their sum is Infinity, which JSON cannot write
    # (JSON.stringify writes null), so the line's tokens_out is null, not a failed round.
    (folder / "s.jsonl").write_text(
        '{"type":"user","message":{"role":"user","content":"go"},"timestamp":"2025-01-01T10:00:00.000Z"}\n'
        '{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"a"}],'
        '"usage":{"input_tokens":3,"output_tokens":1e308}},"timestamp":"2025-01-01T10:00:01.000Z"}\n'
        '{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"b"}],'
        '"usage":{"input_tokens":4,"output_tokens":1e308}},"timestamp":"2025-01-01T10:00:02.000Z"}\n',
        encoding="utf-8",
    )

    (proposer,) = backfill(
        out_dir, opencode_db=tmp_path / "none.db", claude_projects_dir=tmp_path / "claude"
    ).lines

    assert proposer["messages"] != []
    assert proposer["cost"]["tokens_out"] is None
    assert proposer["cost"]["tokens_in"] == 7


# ---------------------------------------------------------------------------
# Inputs that are no files: a FIFO, a folder, a symlink to nothing or a loop
# ---------------------------------------------------------------------------


def _replace_with(path: Path, kind: str) -> None:
    """Put a FIFO, a folder, a symlink to nothing or a symlink loop where the file `path` was."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling symlink":
        path.symlink_to(path.parent / "gone")
    else:
        path.symlink_to(path.name)  # a loop


def _receipt(rnd: Round) -> Path:
    return next((rnd.out_dir / "proposer-shots").rglob("gen*-cand*-shot*.json"))


@pytest.mark.parametrize(
    ("what", "kind", "why"),
    [
        ("cell cache", "fifo", "cannot read cell cache (it is not a regular file)"),
        ("cell cache", "folder", "cannot read cell cache (it is a folder)"),
        ("cell cache", "dangling symlink", "cannot read cell cache (a symlink to nothing)"),
        ("cell cache", "loop", "cannot read cell cache (a symlink loop)"),
        ("loop provenance", "fifo", "cannot read the loop provenance (it is not a regular file)"),
        ("loop provenance", "folder", "cannot read the loop provenance (it is a folder)"),
        ("cost ledger", "fifo", "cannot read the cost ledger (it is not a regular file)"),
    ],
)
def test_an_input_file_that_is_no_file_fails_loud_instead_of_blocking_or_dropping_it(
    rnd: Round, what: str, kind: str, why: str
) -> None:
    """A FIFO used to block the backfill (and the sensor's tick) for ever; a cell cache that is a
    folder or a dead link used to drop its cell, and an unreadable provenance changed every id."""
    path = {
        "cell cache": rnd.cell_cache("gen-0/candidate-1", "django__django-11532"),
        "loop provenance": rnd.out_dir / "improve-run" / "loop-provenance.json",
        "cost ledger": rnd.out_dir / "improve-run" / "cost-ledger.jsonl",
    }[what]
    _replace_with(path, kind)

    result = cli_backfill(rnd)

    assert assert_fails_loud(result, rnd) == f"rollout-assets: error: {path}: {why}"


def test_a_loop_provenance_that_is_not_json_fails_loud_instead_of_changing_every_id(rnd: Round) -> None:
    provenance = rnd.out_dir / "improve-run" / "loop-provenance.json"
    provenance.write_text('{"runId": "improve-bad-round"', encoding="utf-8")  # cut short

    result = cli_backfill(rnd)

    assert_fails_loud(result, rnd, f"{provenance}: loop provenance is not valid JSON")


@pytest.mark.parametrize("damage", ["receipts folder is a file", "a folder named like a receipt"])
def test_a_receipts_layout_that_would_hide_shots_fails_loud(rnd: Round, damage: str) -> None:
    shots = rnd.out_dir / "proposer-shots"
    if damage == "receipts folder is a file":
        shutil.rmtree(shots)
        shots.write_text("not a folder", encoding="utf-8")
        expected = f"{shots}: not a folder, so its shot receipts cannot be listed"
    else:
        receipt = _receipt(rnd)
        _replace_with(receipt, "folder")
        expected = f"{receipt}: a folder named like a shot receipt"

    result = cli_backfill(rnd)

    assert assert_fails_loud(result, rnd) == f"rollout-assets: error: {expected}"


@pytest.mark.parametrize("what", ["result.json", "judge.json", "shot receipt", "claude transcript", "opencode journal"])
def test_a_fifo_read_as_an_unreadable_file_never_blocks(rnd: Round, what: str) -> None:
    """Files the seed reads as absent when unreadable: a FIFO reads the same way, at once."""
    cache = rnd.cell_cache("gen-0/candidate-1", "django__django-11532")
    path = {
        "result.json": rnd.run_dir(cache) / "result.json",
        "judge.json": rnd.run_dir(cache) / "judge.json",
        "shot receipt": _receipt(rnd),
        "claude transcript": rnd.transcript_of(rnd.proposer_of("gen0-cand0")),
        "opencode journal": Path(f"{rnd.db}-journal"),
    }[what]
    if path.exists():
        path.unlink()
    os.mkfifo(path)

    result = cli_backfill(rnd)  # 120 s timeout: a blocked read fails the test

    after = backfilled(result, rnd)
    if what == "result.json":  # its workers cannot be listed: the supervisor says so
        supervisor = rnd.supervisor("gen0-cand1", "django__django-11532")
        workers = {line["rollout_id"] for line in rnd.workers_of(supervisor)}
        changed = changed_lines(rnd.before, after, removed=workers)
        assert changed[supervisor["rollout_id"]][1]["provenance"]["gap"] == gaps.supervisor_gap(True)
    elif what == "opencode journal":  # the store is not opened: every worker line says so
        assert "opencode database" in result.stderr
        assert sum(line["role"] == "worker" and not line["messages"] for line in after) == WORKERS
    elif what == "judge.json":  # no verdict to keep
        supervisor = rnd.supervisor("gen0-cand1", "django__django-11532")
        changed = changed_lines(rnd.before, after)
        assert set(changed) == {supervisor["rollout_id"]}
        assert changed[supervisor["rollout_id"]][1]["outcome"]["verdict"] is None
    elif what == "claude transcript":  # an empty transcript: a labeled gap
        proposer = rnd.proposer_of("gen0-cand0")
        changed = changed_lines(rnd.before, after)
        assert set(changed) == {proposer["rollout_id"]}
        assert changed[proposer["rollout_id"]][1]["messages"] == []
        assert changed[proposer["rollout_id"]][1]["provenance"]["gap"]
    else:  # a receipt read as malformed: its shot keeps its line
        assert [line["rollout_id"] for line in after] == [line["rollout_id"] for line in rnd.before]


def test_an_improve_run_folder_the_backfill_cannot_search_names_the_folder_not_out(
    world_readable_tmp: Path,
) -> None:
    rnd = make_round(world_readable_tmp)
    (rnd.out_dir / "improve-run").chmod(0o600)  # listed, not searched

    result = backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl")

    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        # The first file under it the backfill reads, not OUT ("ledger OUT not written").
        f"rollout-assets: error: {rnd.out_dir / 'improve-run' / 'loop-provenance.json'}: cannot read the loop "
        "provenance (Permission denied)"
    ]
    assert rnd.ledger.read_bytes() == OLD_LEDGER


def test_a_claude_projects_folder_the_backfill_cannot_read_is_warned_about(world_readable_tmp: Path) -> None:
    rnd = make_round(world_readable_tmp)
    rnd.claude.chmod(0o000)

    result = backfill_as_nobody(rnd, world_readable_tmp / "scratch.jsonl")

    after = backfilled(result, rnd)
    assert result.stderr.splitlines() == [
        f"rollout-assets: warning: Claude projects folder {rnd.claude} cannot be read (Permission denied): every "
        "proposer line is a gap line; run as a user who may read it"
    ]
    assert [line["messages"] for line in after if line["role"] == "proposer"] == [[]] * SHOTS


@pytest.mark.parametrize("mode", [0o000, 0o444], ids=["closed", "listable but not searchable"])
def test_the_dagster_resource_names_a_claude_projects_folder_it_cannot_read(world_readable_tmp: Path, mode: int) -> None:
    # Either way no project folder in it can be read: every shot becomes a gap line.
    folder = world_readable_tmp / "claude-projects"
    folder.mkdir(mode=mode)
    script = (
        "import sys\nfrom rollout_assets.defs.resources import ClaudeProjects\n"
        + DROP_TO_NOBODY
        + "print(ClaudeProjects(projects_dir=sys.argv[1]).unavailable_reason())\n"
    )

    result = run_unprivileged(script, str(folder))

    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"Claude projects folder {folder} cannot be read (Permission denied): proposer shots become labeled gap "
        "lines; run Dagster as a user who may read it\n"
    )
