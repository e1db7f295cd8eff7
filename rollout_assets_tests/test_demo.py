"""The demo generator on real files: deterministic, counted, and every planted case where documented.

These tests read the generated files with json and sqlite3 only: no reader of this project is
involved, so a reader bug cannot make its own fixture look right.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import (
    DEFAULT_ROUNDS,
    EDGE_CASE_LOCATIONS,
    FIX_CASES,
    DemoLayout,
    EdgeCaseSite,
    RoundSpec,
    edge_case_sites,
    write_demo,
)

ROUND_001, ROUND_002, ROUND_003 = DEFAULT_ROUNDS
SMALL = RoundSpec(
    name="small", instances=2, reps=2, generations=1, candidates_per_generation=2, edge_cases=False
)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def slug(path: str | Path) -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", str(path))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def parse_iso(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def connect(layout: DemoLayout) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{layout.opencode_db}?mode=ro", uri=True)


def sessions_of(db: sqlite3.Connection, cwd: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT id, parent_id, time_created, time_updated FROM session WHERE directory = ? ORDER BY time_created",
        (cwd,),
    ).fetchall()


def message_rows(db: sqlite3.Connection, session_id: str) -> list[tuple[str, str]]:
    return db.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (session_id,)
    ).fetchall()


def part_rows(db: sqlite3.Connection, message_id: str) -> list[str]:
    return [
        row[0] for row in db.execute("SELECT data FROM part WHERE message_id = ? ORDER BY id", (message_id,))
    ]


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def session_parts(db: sqlite3.Connection, session_id: str) -> list[dict[str, Any]]:
    """Every readable part of the session's readable messages, in order."""
    parts = []
    for message_id, data in message_rows(db, session_id):
        if is_json(data):
            parts += [json.loads(p) for p in part_rows(db, message_id) if is_json(p)]
    return parts


def cells_of(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob("improve-run/**/cached-result.json"))


def receipts_of(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob("proposer-shots/**/gen*-cand*-shot*.json"))


def result_json(cell_dir: Path) -> Any:
    run_dir = Path(read_json(cell_dir / "cached-result.json")["artifact"]["runDir"])
    return read_json(run_dir / "result.json")


def window_of(receipt: dict[str, Any]) -> tuple[float, float]:
    return parse_iso(receipt["startedAt"]) - 120, parse_iso(receipt["completedAt"]) + 120


def first_timestamp(lines: list[dict[str, Any]]) -> float:
    talk = [
        line for line in lines if line.get("type") in {"user", "assistant"} and not line.get("isSidechain")
    ]
    return parse_iso(talk[0]["timestamp"])


def snapshot(root: Path) -> dict[str, Any]:
    """Every file and table row under `root`, with the root path (and its slug) replaced."""

    def normal(text: str) -> str:
        return text.replace(str(root), "<ROOT>").replace(slug(root), "<ROOT-SLUG>")

    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != "opencode.db":
            files[normal(str(path.relative_to(root)))] = normal(path.read_text(encoding="utf-8"))
    db = sqlite3.connect(root / "opencode.db")
    tables = {
        table: [
            tuple(normal(v) if isinstance(v, str) else v for v in row)
            for row in db.execute(f"SELECT * FROM {table} ORDER BY id")
        ]
        for table in ("session", "message", "part")
    }
    db.close()
    return {"files": files, "tables": tables}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    """The default demo: round-001 (edge cases), round-002 (clean, larger), round-003 (+ fixes)."""
    return write_demo(tmp_path_factory.mktemp("demo") / "root")


@pytest.fixture(scope="module")
def db(demo: DemoLayout) -> Iterator[sqlite3.Connection]:
    connection = connect(demo)
    yield connection
    connection.close()


def sites(demo: DemoLayout, spec: RoundSpec) -> dict[str, EdgeCaseSite]:
    return edge_case_sites(demo.root, spec)


# ---------------------------------------------------------------------------
# layout, determinism, refusal, appending
# ---------------------------------------------------------------------------


def test_layout_paths_are_absolute_and_exist(demo: DemoLayout) -> None:
    assert demo.root.is_absolute()
    assert demo.rounds_root == demo.root / "rounds"
    assert demo.opencode_db == demo.root / "opencode.db" and demo.opencode_db.is_file()
    assert demo.claude_projects_dir == demo.root / "claude-projects" and demo.claude_projects_dir.is_dir()
    assert demo.rounds == tuple(demo.rounds_root / spec.name for spec in DEFAULT_ROUNDS)
    assert all(out_dir.is_dir() for out_dir in demo.rounds)


def test_relative_root_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    layout = write_demo("rel", [SMALL])

    assert layout.root == (tmp_path / "rel").resolve()
    cell = read_json(cells_of(layout.rounds[0])[0])
    assert cell["artifact"]["runDir"].startswith(str(layout.root) + "/")


def test_two_roots_hold_the_same_content_modulo_the_root(tmp_path: Path) -> None:
    first = write_demo(tmp_path / "a", [ROUND_001, SMALL]).root
    second = write_demo(tmp_path / "second-root", [ROUND_001, SMALL]).root

    assert snapshot(first) == snapshot(second)


def test_writing_a_round_twice_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    layout = write_demo(tmp_path, [SMALL])
    before = snapshot(tmp_path)

    with pytest.raises(ValueError, match=re.escape(str(layout.rounds[0]))):
        write_demo(tmp_path, [RoundSpec(name="other", edge_cases=False), SMALL])

    assert snapshot(tmp_path) == before
    assert not (tmp_path / "rounds" / "other").exists()


def test_a_second_call_appends_rounds_to_the_same_stores(tmp_path: Path) -> None:
    write_demo(tmp_path, [SMALL])
    second = write_demo(
        tmp_path,
        [
            RoundSpec(
                name="later",
                instances=1,
                reps=1,
                generations=1,
                candidates_per_generation=1,
                edge_cases=False,
            )
        ],
    )

    assert second.rounds == (tmp_path.resolve() / "rounds" / "later",)
    db = connect(second)
    directories = [row[0] for row in db.execute("SELECT directory FROM session")]
    db.close()
    clones = second.root / "worker-clones"
    assert sum(d.startswith(f"{clones}/small/") for d in directories) == 2 * 2 * 3 * 2
    assert sum(d.startswith(f"{clones}/later/") for d in directories) == 1 * 1 * 2 * 2
    folders = [p.name for p in second.claude_projects_dir.iterdir()]
    assert any("-rounds-small-" in name for name in folders)
    assert any("-rounds-later-" in name for name in folders)


def test_legacy_store_has_no_cost_columns(tmp_path: Path) -> None:
    layout = write_demo(tmp_path, [SMALL], legacy_opencode_schema=True)

    db = connect(layout)
    columns = [row[1] for row in db.execute("PRAGMA table_info(session)")]
    count = db.execute("SELECT count(*) FROM session").fetchone()[0]
    db.close()
    assert columns == [
        "id",
        "parent_id",
        "directory",
        "agent",
        "model",
        "time_created",
        "time_updated",
        "title",
    ]
    assert count == 2 * 2 * 3 * 2


def test_appending_the_other_schema_is_refused(tmp_path: Path) -> None:
    write_demo(tmp_path, [SMALL])

    with pytest.raises(ValueError, match="other schema"):
        write_demo(tmp_path, [RoundSpec(name="old", edge_cases=False)], legacy_opencode_schema=True)
    assert not (tmp_path / "rounds" / "old").exists()


def test_store_schema_and_indexes(demo: DemoLayout, db: sqlite3.Connection) -> None:
    columns = [row[1] for row in db.execute("PRAGMA table_info(session)")]
    assert columns[:5] == ["id", "parent_id", "directory", "agent", "model"]
    assert {
        "cost",
        "tokens_input",
        "tokens_output",
        "tokens_reasoning",
        "tokens_cache_read",
        "tokens_cache_write",
    } <= set(columns)
    assert [row[1] for row in db.execute("PRAGMA table_info(part)")] == [
        "id",
        "message_id",
        "session_id",
        "time_created",
        "data",
    ]
    indexed = {
        (table, row[2])
        for table in ("session", "message", "part")
        for index in db.execute(f"PRAGMA index_list({table})")
        for row in db.execute(f"PRAGMA index_info({index[1]})")
    }
    assert ("message", "session_id") in indexed and ("part", "message_id") in indexed
    assert ("session", "directory") not in indexed


@pytest.mark.parametrize(
    "spec, message",
    [
        (RoundSpec(name="tiny", instances=1, reps=1, generations=1, candidates_per_generation=1), "cells"),
        (
            RoundSpec(name="few-shots", instances=4, reps=3, generations=1, candidates_per_generation=2),
            "proposer shots",
        ),
        (RoundSpec(name="typo", edge_cases=False, fixes=frozenset({"error-nul"})), "unknown fixes"),
        (
            RoundSpec(name="lone", edge_cases=False, fixes=frozenset({"agent-file-of-another-session"})),
            "needs another shot in the worktree",
        ),
        (RoundSpec(name="a/b"), "plain directory name"),
        (RoundSpec(name="zero", reps=0), "reps must be >= 1"),
    ],
)
def test_bad_specs_are_refused_before_writing(tmp_path: Path, spec: RoundSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_demo(tmp_path, [spec])
    assert not (tmp_path / "rounds").exists()


def test_duplicate_round_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appears twice"):
        write_demo(tmp_path, [SMALL, SMALL])


# ---------------------------------------------------------------------------
# counts
# ---------------------------------------------------------------------------


def test_clean_round_counts_match_the_spec(demo: DemoLayout, db: sqlite3.Connection) -> None:
    spec = ROUND_002
    out_dir = demo.rounds_root / spec.name
    campaigns = 1 + spec.generations * spec.candidates_per_generation
    cells = spec.instances * spec.reps * campaigns

    assert len(cells_of(out_dir)) == cells
    assert len(list((out_dir / "improve-run").glob("gen-*/candidate-*"))) == campaigns - 1
    clones = f"{demo.root}/worker-clones/{spec.name}/"
    sessions = db.execute("SELECT id FROM session WHERE directory LIKE ?", (clones + "%",)).fetchall()
    assert len(sessions) == cells * spec.workers_per_cell
    steps = db.execute(
        'SELECT count(*) FROM part WHERE session_id = ? AND data LIKE \'{"type":"step-start"%\'',
        (sessions[0][0],),
    ).fetchone()[0]
    assert steps == spec.steps_per_session
    shots = spec.generations * spec.candidates_per_generation * spec.shots_per_candidate
    assert len(receipts_of(out_dir)) == shots
    transcripts = [p for p in demo.claude_projects_dir.glob(f"{slug(out_dir)}-*/*.jsonl")]
    assert len(transcripts) == shots
    assert len(list((out_dir / "candidates").glob("*.patch"))) == campaigns - 1
    ledger = (out_dir / "improve-run" / "cost-ledger.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(ledger) == 2 * cells + 1


def test_edge_round_counts_match_the_spec(demo: DemoLayout, db: sqlite3.Connection) -> None:
    spec = ROUND_001
    out_dir = demo.rounds_root / spec.name
    cells = spec.instances * spec.reps * (1 + spec.generations * spec.candidates_per_generation)

    assert len(cells_of(out_dir)) == cells
    clones = f"{demo.root}/worker-clones/{spec.name}/"
    sessions = db.execute("SELECT count(*) FROM session WHERE directory LIKE ?", (clones + "%",)).fetchone()[
        0
    ]
    # The errored cell has no workers; one cwd has no session, another has two.
    assert sessions == (cells - 1) * spec.workers_per_cell - 1 + 1
    assert (
        len(receipts_of(out_dir))
        == spec.generations * spec.candidates_per_generation * spec.shots_per_candidate
    )
    assert (
        len(list((out_dir / "candidates").glob("*.patch")))
        == spec.generations * spec.candidates_per_generation - 1
    )


def test_every_campaign_cell_names_its_campaign_commit(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    for campaign in [
        out_dir / "improve-run" / "baseline",
        *sorted(out_dir.glob("improve-run/gen-*/candidate-*")),
    ]:
        commits = {read_json(p)["artifact"]["commit"] for p in campaign.glob("*/cached-result.json")}
        assert len(commits) == 1 and re.fullmatch(r"[0-9a-f]{40}", commits.pop())


# ---------------------------------------------------------------------------
# formats
# ---------------------------------------------------------------------------


def test_files_are_utf8_json_except_the_planted_malformed_ones(demo: DemoLayout) -> None:
    malformed = {
        sites(demo, ROUND_001)["receipt_not_json"].receipt_path,
        sites(demo, ROUND_003)["receipt_not_json"].receipt_path,
        sites(demo, ROUND_003)["result-json-corrupt"].other_path,
    }
    cut = sites(demo, ROUND_003)["truncated-transcript-line"]
    cut_last_line = {cut.transcript_path, cut.other_path}
    bad = []
    for path in demo.root.rglob("*.json"):
        if not is_json(path.read_text(encoding="utf-8")) and path not in malformed:
            bad.append(path)
    for path in demo.root.rglob("*.jsonl"):
        lines = path.read_text(encoding="utf-8").splitlines()
        garbage = [line for line in lines if not is_json(line)]
        if path.name == "cost-ledger.jsonl" or path in cut_last_line:
            assert len(garbage) == 1 and lines[-1] == garbage[0]
        elif garbage:
            bad.append(path)
    assert bad == []
    for path in malformed:
        assert not is_json(path.read_text(encoding="utf-8"))


def test_cached_result_fields(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    records = [read_json(p) for p in cells_of(out_dir)]
    record = records[0]
    assert {
        "cellId",
        "scenarioId",
        "rep",
        "artifact",
        "costUsd",
        "tokenUsage",
        "resolvedModel",
        "seed",
        "cached",
        "durationMs",
    } <= set(record)
    artifact = record["artifact"]
    assert artifact["kind"] == "swe-arm" and artifact["iid"] == record["scenarioId"]
    assert isinstance(artifact["wallS"], float)
    assert Path(artifact["runDir"]).is_absolute() and Path(artifact["patchPath"]).is_file()
    assert {r["resolvedModel"] for r in records} == {"anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"}
    judged = [r for r in records if "judgeScores" in r]
    assert 0 < len(judged) < len(records)
    assert all(isinstance(r["artifact"]["resolved"], bool) for r in records)


def test_run_dir_files(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    cell = read_json(cells_of(out_dir)[0])
    run_dir = Path(cell["artifact"]["runDir"])
    assert run_dir.parent.parent == out_dir / "runs"
    result = read_json(run_dir / "result.json")
    assert result["sup_status"] == "done" and isinstance(result["sup_verdict"], str)
    assert isinstance(result["subtasks"], list) and result["workers"] == ROUND_002.workers_per_cell
    assert all(Path(cwd).is_absolute() for cwd in result["recoveredSpend"]["workerCwds"])
    assert isinstance(read_json(run_dir / "judge.json"), dict)
    assert len(jsonl(run_dir / "brain.jsonl")) == 2


def test_worker_cwds_are_unique_in_a_round(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    cwds = [cwd for p in cells_of(out_dir) for cwd in result_json(p.parent)["recoveredSpend"]["workerCwds"]]
    assert len(cwds) == len(set(cwds))
    assert all(cwd.startswith(f"{demo.root}/worker-clones/{ROUND_002.name}/") for cwd in cwds)


def test_each_worker_works_in_a_clone_of_its_own_name(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    cwds = [cwd for p in cells_of(out_dir) for cwd in result_json(p.parent)["recoveredSpend"]["workerCwds"]]
    names = [Path(cwd).name for cwd in cwds]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"loops-w-[0-2]-[0-9a-z]{6}", name) for name in names)


def test_worker_tasks_recur_across_reps_and_candidates(demo: DemoLayout, db: sqlite3.Connection) -> None:
    """A worker's prompt names its own clone and name, and apart from those it is the same for
    the same subtask of an instance in every rep and campaign: training pairs and groups form."""
    out_dir = demo.rounds_root / ROUND_002.name
    prompts: dict[tuple[str, int], set[str]] = {}
    sessions: dict[tuple[str, int], int] = {}
    for cell in cells_of(out_dir):
        record = read_json(cell)
        for slot, cwd in enumerate(result_json(cell.parent)["recoveredSpend"]["workerCwds"]):
            [(session_id, *_)] = sessions_of(db, cwd)
            prompt = session_parts(db, session_id)[0]["text"]
            name = Path(cwd).name
            assert f"You are worker {name} on {record['scenarioId']}" in prompt and f"inside {cwd}." in prompt
            key = (record["scenarioId"], slot)
            prompts.setdefault(key, set()).add(prompt.replace(cwd, "<CLONE>").replace(name, "<NAME>"))
            sessions[key] = sessions.get(key, 0) + 1
    campaigns = 1 + ROUND_002.generations * ROUND_002.candidates_per_generation
    assert len(prompts) == ROUND_002.instances * ROUND_002.workers_per_cell
    assert set(sessions.values()) == {ROUND_002.reps * campaigns}
    assert all(len(same) == 1 for same in prompts.values())


def test_cost_ledger_tags_the_campaign_dir(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND_002.name
    lines = (out_dir / "improve-run" / "cost-ledger.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line)["record"] for line in lines[:-1]]
    assert {r["status"] for r in records} == {"pending", "settled"}
    campaign_dirs = {str(out_dir / "improve-run" / "baseline")} | {
        str(p) for p in out_dir.glob("improve-run/gen-*/candidate-*")
    }
    assert {r["tags"]["runDir"] for r in records} == campaign_dirs


def test_worker_session_shape(demo: DemoLayout, db: sqlite3.Connection) -> None:
    cwd = sites(demo, ROUND_001)["non_ascii_text"].worker_cwd
    [(session_id, _, _, _)] = sessions_of(db, cwd)
    model = json.loads(db.execute("SELECT model FROM session WHERE id = ?", (session_id,)).fetchone()[0])
    assert set(model) == {"id", "providerID"}
    messages = [json.loads(data) for _, data in message_rows(db, session_id)]
    assert messages[0]["role"] == "user" and {m["role"] for m in messages[1:]} == {"assistant"}
    parts = session_parts(db, session_id)
    kinds = [p["type"] for p in parts]
    assert kinds.count("step-start") == ROUND_001.steps_per_session
    assert kinds.count("step-finish") == ROUND_001.steps_per_session
    tools = [p for p in parts if p["type"] == "tool"]
    assert tools and all(
        t["callID"].startswith("toolu_") and t["state"]["status"] == "completed" for t in tools
    )
    assert "naïve café — 日本語 ✓" in parts[0]["text"]


def test_ids_sort_chronologically(demo: DemoLayout, db: sqlite3.Connection) -> None:
    # All but the session of ids-times-disagree, whose prompt's id a client made on its own clock.
    [(planted, *_)] = sessions_of(db, sites(demo, ROUND_003)["ids-times-disagree"].worker_cwd)
    for table in ("message", "part"):
        rows = db.execute(f"SELECT time_created, session_id FROM {table} ORDER BY id").fetchall()
        times = [time for time, session_id in rows if session_id != planted]
        assert times == sorted(times), table
    prefixes = {row[0][:4] for row in db.execute("SELECT id FROM session")}
    assert prefixes == {"ses_"}


def test_transcript_shape(demo: DemoLayout) -> None:
    site = sites(demo, ROUND_002)["flat_receipt"]
    lines = jsonl(site.transcript_path)
    kinds = {line["type"] for line in lines}
    assert {"summary", "queue-operation", "user", "assistant"} <= kinds
    assistant = [line for line in lines if line["type"] == "assistant"]
    assert all(len(line["message"]["content"]) == 1 for line in assistant)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for line in assistant:
        by_id.setdefault(line["message"]["id"], []).append(line)
    assert any(len(group) == 3 for group in by_id.values())
    assert all(len({json.dumps(line["message"]["usage"]) for line in group}) == 1 for group in by_id.values())
    blocks = {line["message"]["content"][0]["type"] for line in assistant}
    assert blocks == {"thinking", "text", "tool_use"}
    results = [
        block["content"]
        for line in lines
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for block in line["message"]["content"]
    ]
    assert any(isinstance(c, str) for c in results) and any(isinstance(c, list) for c in results)
    assert any(line.get("isSidechain") for line in lines)
    slug_folder = site.transcript_path.parent.name
    assert slug_folder == slug(site.worktree)
    receipt = read_json(site.receipt_path)["receipt"]
    low, high = window_of(receipt)
    assert low <= first_timestamp(lines) <= high
    assert receipt["harness"] == "claude-code" and receipt["error"] is None and receipt["exitCode"] == 0


# ---------------------------------------------------------------------------
# edge cases at their documented places
# ---------------------------------------------------------------------------


def test_every_case_is_documented_and_sited(demo: DemoLayout) -> None:
    edge = set(sites(demo, ROUND_001))
    fixed = set(sites(demo, ROUND_003))
    assert edge <= set(EDGE_CASE_LOCATIONS)
    assert fixed == set(EDGE_CASE_LOCATIONS)
    assert FIX_CASES <= fixed and not FIX_CASES & edge
    assert set(sites(demo, ROUND_002)) == {"flat_receipt", "per_author_receipt", "cost_ledger_garbage_line"}


@pytest.mark.parametrize("spec", [ROUND_001, ROUND_003], ids=lambda s: s.name)
class TestEdgeCases:
    def test_cwd_listed_twice(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["cwd_listed_twice"]
        cwds = result_json(site.cell_dir)["recoveredSpend"]["workerCwds"]
        assert cwds.count(site.worker_cwd) == 2

    def test_cwd_with_two_sessions(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        site = sites(demo, spec)["cwd_with_two_sessions"]
        first, second = sessions_of(db, site.worker_cwd)
        assert second[1] == first[0] and second[2] > first[2]

    def test_cwd_without_session(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        site = sites(demo, spec)["cwd_without_session"]
        assert site.worker_cwd in result_json(site.cell_dir)["recoveredSpend"]["workerCwds"]
        assert sessions_of(db, site.worker_cwd) == []

    def test_session_without_messages(
        self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec
    ) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["session_without_messages"].worker_cwd)
        assert message_rows(db, session_id) == []

    def test_session_with_only_malformed_messages(
        self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec
    ) -> None:
        [(session_id, *_)] = sessions_of(
            db, sites(demo, spec)["session_with_only_malformed_messages"].worker_cwd
        )
        messages = message_rows(db, session_id)
        assert messages and not any(is_json(data) for _, data in messages)

    def test_malformed_part(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["malformed_part"].worker_cwd)
        parts = [p for message_id, _ in message_rows(db, session_id) for p in part_rows(db, message_id)]
        assert sum(not is_json(p) for p in parts) == 1
        assert all(is_json(data) for _, data in message_rows(db, session_id))
        assert [p["type"] for p in session_parts(db, session_id)].count(
            "step-start"
        ) == spec.steps_per_session

    def test_malformed_message(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["malformed_message"].worker_cwd)
        messages = message_rows(db, session_id)
        assert sum(not is_json(data) for _, data in messages) == 1
        assert json.loads(messages[0][1])["role"] == "user"
        assert [p["type"] for p in session_parts(db, session_id)].count(
            "step-start"
        ) == spec.steps_per_session

    def test_very_long_tool_output(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["very_long_tool_output"].worker_cwd)
        outputs = [p["state"]["output"] for p in session_parts(db, session_id) if p["type"] == "tool"]
        assert len(outputs[0].encode()) >= 200_000

    def test_non_string_tool_output(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["non_string_tool_output"].worker_cwd)
        outputs = [p["state"]["output"] for p in session_parts(db, session_id) if p["type"] == "tool"]
        assert isinstance(outputs[0], dict)

    def test_half_second_wall_time(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(_, _, created, updated)] = sessions_of(db, sites(demo, spec)["half_second_wall_time"].worker_cwd)
        assert (updated - created) % 1000 == 500

    def test_non_string_worker_cwd(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["non_string_worker_cwd"]
        cwds = read_json(site.other_path)["recoveredSpend"]["workerCwds"]
        assert None in cwds and len([c for c in cwds if isinstance(c, str)]) == spec.workers_per_cell

    def test_non_ascii_text(self, demo: DemoLayout, db: sqlite3.Connection, spec: RoundSpec) -> None:
        [(session_id, *_)] = sessions_of(db, sites(demo, spec)["non_ascii_text"].worker_cwd)
        assert "日本語" in session_parts(db, session_id)[0]["text"]

    def test_errored_cell(self, demo: DemoLayout, spec: RoundSpec) -> None:
        record = read_json(sites(demo, spec)["errored_cell"].cell_dir / "cached-result.json")
        assert record["artifact"] is None and isinstance(record["error"], str)

    def test_composite_judge_score(self, demo: DemoLayout, spec: RoundSpec) -> None:
        record = read_json(sites(demo, spec)["composite_judge_score"].cell_dir / "cached-result.json")
        assert record["judgeScores"]["swe-arena-official-judge"]["composite"] == 0.62

    def test_cell_without_reward(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["cell_without_reward"]
        record = read_json(site.cell_dir / "cached-result.json")
        assert "judgeScores" not in record and not isinstance(record["artifact"]["resolved"], bool)
        assert not (site.run_dir / "judge.json").exists()

    def test_sup_status_running(self, demo: DemoLayout, spec: RoundSpec) -> None:
        assert read_json(sites(demo, spec)["sup_status_running"].other_path)["sup_status"] == "running"

    def test_flat_and_per_author_receipts(self, demo: DemoLayout, spec: RoundSpec) -> None:
        out_dir = demo.rounds_root / spec.name
        flat, authored = sites(demo, spec)["flat_receipt"], sites(demo, spec)["per_author_receipt"]
        assert flat.receipt_path.parent == out_dir / "proposer-shots"
        assert authored.receipt_path.parent.parent == out_dir / "proposer-shots"
        assert authored.worktree.name.endswith("-" + authored.receipt_path.parent.name)
        assert read_json(flat.receipt_path)["receipt"] and read_json(authored.receipt_path)["receipt"]

    def test_receipt_without_timestamps(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["receipt_without_timestamps"]
        receipt = read_json(site.receipt_path)["receipt"]
        assert "startedAt" not in receipt and "completedAt" not in receipt
        assert [p.name for p in site.transcript_path.parent.iterdir()] == [site.transcript_path.name]

    def test_transcript_outside_window(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["transcript_outside_window"]
        low, high = window_of(read_json(site.receipt_path)["receipt"])
        assert low <= first_timestamp(jsonl(site.transcript_path)) <= high
        late = first_timestamp(jsonl(site.other_path))
        assert site.other_path.parent == site.transcript_path.parent and late > high + 3600

    def test_missing_transcript_folder(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["missing_transcript_folder"]
        assert read_json(site.receipt_path)["receipt"]["exitCode"] == 0
        assert not (demo.claude_projects_dir / slug(site.worktree)).exists()

    def test_timed_out_shot(self, demo: DemoLayout, spec: RoundSpec) -> None:
        receipt = read_json(sites(demo, spec)["timed_out_shot"].receipt_path)["receipt"]
        assert receipt["timedOut"] is True and receipt["exitCode"] == 124

    def test_candidate_without_patch(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["candidate_without_patch"]
        commit = read_json(next(site.campaign_dir.glob("*/cached-result.json")))["artifact"]["commit"]
        assert site.other_path.name == f"{commit[:10]}.patch" and not site.other_path.exists()

    def test_receipt_not_json(self, demo: DemoLayout, spec: RoundSpec) -> None:
        site = sites(demo, spec)["receipt_not_json"]
        assert not is_json(site.receipt_path.read_text(encoding="utf-8"))
        assert site.transcript_path.is_file()

    def test_cost_ledger_garbage_line(self, demo: DemoLayout, spec: RoundSpec) -> None:
        lines = (
            sites(demo, spec)["cost_ledger_garbage_line"].other_path.read_text(encoding="utf-8").splitlines()
        )
        assert not is_json(lines[-1]) and all(is_json(line) for line in lines[:-1])


# ---------------------------------------------------------------------------
# optional cases (round-003)
# ---------------------------------------------------------------------------


def fix_site(demo: DemoLayout, case: str) -> EdgeCaseSite:
    return sites(demo, ROUND_003)[case]


def test_fix_empty_claude_transcript(demo: DemoLayout) -> None:
    site = fix_site(demo, "empty-claude-transcript")
    lines = jsonl(site.transcript_path)
    talk = [line for line in lines if line["type"] in {"user", "assistant"}]
    assert len(talk) == 1 and [b["type"] for b in talk[0]["message"]["content"]] == ["image"]
    low, high = window_of(read_json(site.receipt_path)["receipt"])
    assert low <= first_timestamp(lines) <= high
    folder = site.transcript_path.parent
    others = [p for p in folder.iterdir() if p != site.transcript_path and not p.name.startswith("agent-")]
    assert all(not low <= first_timestamp(jsonl(p)) <= high for p in others)  # sessions; agent files are none


def test_fix_empty_thinking_first_block(demo: DemoLayout) -> None:
    lines = jsonl(fix_site(demo, "empty-thinking-first-block").transcript_path)
    assistant = [line for line in lines if line["type"] == "assistant"]
    first, second = assistant[0], assistant[1]
    assert first["message"]["content"] == [{**first["message"]["content"][0], "thinking": ""}]
    assert first["message"]["content"][0]["type"] == "thinking"
    assert second["message"]["content"][0]["type"] == "text"
    assert first["message"]["id"] == second["message"]["id"]
    assert first["message"]["usage"] == second["message"]["usage"]


def test_fix_error_null(demo: DemoLayout) -> None:
    record = read_json(fix_site(demo, "error-null").cell_dir / "cached-result.json")
    assert "error" in record and record["error"] is None and record["artifact"]["kind"] == "swe-arm"


def test_fix_sidechain_only_file(demo: DemoLayout) -> None:
    site = fix_site(demo, "sidechain-only-file")
    receipt = read_json(site.receipt_path)["receipt"]
    assert "startedAt" not in receipt and "completedAt" not in receipt
    assert site.other_path.name.startswith("agent-") and site.other_path.parent == site.transcript_path.parent
    assert all(line["isSidechain"] is True for line in jsonl(site.other_path))
    assert sorted(site.transcript_path.parent.iterdir()) == sorted([site.transcript_path, site.other_path])


def test_fix_synthetic_model(demo: DemoLayout) -> None:
    lines = jsonl(fix_site(demo, "synthetic-model").transcript_path)
    models = [
        line["message"]["model"] for line in lines if line["type"] == "assistant" and not line["isSidechain"]
    ]
    assert models[-1] == "<synthetic>" and models[0].startswith("claude-")


def test_fix_baseline_commit_order(demo: DemoLayout) -> None:
    site = fix_site(demo, "baseline-commit-order")
    baseline = site.campaign_dir
    cells = [read_json(p) | {"dir": p.parent.name} for p in baseline.glob("*/cached-result.json")]
    by_key = min(cells, key=lambda c: (c["scenarioId"], c["rep"]))
    by_name = min(cells, key=lambda c: c["dir"])
    assert by_key["dir"] == site.cell_dir.name and by_name["dir"] == site.other_path.name
    assert by_key["artifact"]["commit"] != by_name["artifact"]["commit"]


def test_fix_result_json_missing(demo: DemoLayout, db: sqlite3.Connection) -> None:
    site = fix_site(demo, "result-json-missing")
    assert (site.run_dir / "brain.jsonl").is_file() and not site.other_path.exists()
    assert site.other_path == site.run_dir / "result.json"
    assert len(sessions_of(db, site.worker_cwd)) == 1  # the workers ran; only the list is gone


def test_fix_result_json_corrupt(demo: DemoLayout, db: sqlite3.Connection) -> None:
    site = fix_site(demo, "result-json-corrupt")
    assert site.other_path.is_file() and not is_json(site.other_path.read_text(encoding="utf-8"))
    assert len(sessions_of(db, site.worker_cwd)) == 1


def epoch_ms(text: str) -> int:
    return round(parse_iso(text) * 1000)


def first_ms(path: Path) -> int:
    return round(first_timestamp(jsonl(path)) * 1000)


def assert_sub_agent_file(path: Path, session: Path) -> None:
    """Claude Code 2.x's own file of a sub-agent: sidechain lines naming the session and the agent."""
    lines = jsonl(path)
    assert lines and all(line["isSidechain"] is True for line in lines)
    assert {line["sessionId"] for line in lines} == {session.stem}
    assert {line["agentId"] for line in lines} == {path.stem.removeprefix("agent-")}
    assert lines[0]["parentUuid"] is None and [line["type"] for line in lines] == ["user", "assistant"]
    assert not any(line.get("isSidechain") for line in jsonl(session))  # its lines are not inline too


def test_fix_agent_file_of_another_session(demo: DemoLayout) -> None:
    site = fix_site(demo, "agent-file-of-another-session")
    folder = site.transcript_path.parent
    assert site.other_path.parent == folder and site.other_path.name.startswith("agent-")
    assert_sub_agent_file(site.other_path, site.transcript_path)
    candidate = site.receipt_path.name.rsplit("-shot", 1)[0]
    windows = [
        window_of(read_json(p)["receipt"])
        for p in site.receipt_path.parent.glob(f"{candidate}-shot*.json")
        if p != site.receipt_path
    ]
    sessions = [p for p in folder.glob("*.jsonl") if p != site.transcript_path and not p.name.startswith("agent-")]
    # Beside it, a session of another shot of the same worktree, in that shot's window.
    assert any(low <= first_timestamp(jsonl(p)) <= high for p in sessions for low, high in windows)


def test_fix_subagents_folder(demo: DemoLayout) -> None:
    site = fix_site(demo, "subagents-folder")
    session = site.transcript_path
    assert site.other_path.parent == session.parent / session.stem / "subagents"
    assert site.other_path.name.startswith("agent-")
    assert_sub_agent_file(site.other_path, session)
    versions = {line["version"] for line in jsonl(session) + jsonl(site.other_path) if "version" in line}
    assert len(versions) == 1 and versions.pop().startswith("2.1.")


def test_fix_streamed_usage(demo: DemoLayout) -> None:
    lines = jsonl(fix_site(demo, "streamed-usage").transcript_path)
    usages: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["type"] == "assistant":
            usages.setdefault(line["message"]["id"], []).append(line["message"]["usage"])
    streamed = [found for found in usages.values() if len(found) > 1]
    assert streamed
    for found in streamed:
        outputs = [usage["output_tokens"] for usage in found]
        assert outputs[0] == 1 and outputs == sorted(outputs) and outputs[-2] < outputs[-1]
        # Only output_tokens grows; the input and cache counts repeat.
        assert all({**usage, "output_tokens": 0} == {**found[-1], "output_tokens": 0} for usage in found)
    assert all(line["version"].startswith("1.0.") for line in lines if "version" in line)


def test_fix_tied_transcripts(demo: DemoLayout) -> None:
    site = fix_site(demo, "tied-transcripts")
    receipt = read_json(site.receipt_path)["receipt"]
    started = epoch_ms(receipt["startedAt"])
    own, tied = first_ms(site.transcript_path), first_ms(site.other_path)
    assert site.other_path.parent == site.transcript_path.parent
    assert own - started == started - tied > 0
    low, high = window_of(receipt)
    assert low * 1000 <= tied and own <= high * 1000


def test_fix_edge_of_window_transcript(demo: DemoLayout) -> None:
    site = fix_site(demo, "edge-of-window-transcript")
    receipt = read_json(site.receipt_path)["receipt"]
    assert site.other_path.parent == site.transcript_path.parent
    assert first_ms(site.transcript_path) == epoch_ms(receipt["startedAt"]) - 120_000
    assert first_ms(site.other_path) == epoch_ms(receipt["completedAt"]) + 120_001


def test_fix_truncated_transcript_line(demo: DemoLayout) -> None:
    site = fix_site(demo, "truncated-transcript-line")
    receipt = read_json(site.receipt_path)["receipt"]
    assert "startedAt" not in receipt and "completedAt" not in receipt and receipt["exitCode"] == 137
    *whole, cut = site.transcript_path.read_text(encoding="utf-8").split("\n")
    assert all(is_json(line) for line in whole) and cut.startswith("{") and not is_json(cut)
    only = site.other_path.read_text(encoding="utf-8")
    assert "\n" not in only and only.startswith("{") and not is_json(only)
    assert sorted(site.transcript_path.parent.iterdir()) == sorted([site.transcript_path, site.other_path])


def planted_session(db: sqlite3.Connection, demo: DemoLayout, case: str) -> str:
    """The one session of the worker cwd where round-003 plants `case`."""
    [(session_id, *_)] = sessions_of(db, fix_site(demo, case).worker_cwd)
    return session_id


def test_fix_system_prompt(demo: DemoLayout, db: sqlite3.Connection) -> None:
    site = fix_site(demo, "system-prompt")
    messages = [json.loads(data) for _, data in message_rows(db, planted_session(db, demo, "system-prompt"))]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert assistant and all(m["system"] and all(isinstance(s, str) for s in m["system"]) for m in assistant)
    assert any(site.worker_cwd in text for text in assistant[-1]["system"])
    assert not any("system" in m for m in messages if m["role"] == "user")


def test_fix_ignored_parts(demo: DemoLayout, db: sqlite3.Connection) -> None:
    rows = message_rows(db, planted_session(db, demo, "ignored-parts"))
    users = [message_id for message_id, data in rows if json.loads(data)["role"] == "user"]
    assert len(users) == 2 and rows[-1][0] == users[1]  # the status message comes after the answer
    prompt = [json.loads(p) for p in part_rows(db, users[0])]
    assert [p["type"] for p in prompt] == ["text", "text", "text", "text", "file"]
    assert prompt[2]["text"].startswith("Called the Read tool with the following input: ")
    assert all(p.get("synthetic") is True for p in prompt[1:4]) and prompt[4]["mime"] == "text/plain"
    [status] = [json.loads(p) for p in part_rows(db, users[1])]
    assert status["type"] == "text" and status["ignored"] is True and status["text"]


def test_fix_multi_tool_step(demo: DemoLayout, db: sqlite3.Connection) -> None:
    parts = session_parts(db, planted_session(db, demo, "multi-tool-step"))
    kinds = [p["type"] for p in parts]
    first_step = parts[kinds.index("step-start") : kinds.index("step-finish")]
    tools = [p for p in first_step if p["type"] == "tool"]
    assert len(tools) == 2 and len({t["callID"] for t in tools}) == 2
    assert all(t["state"]["status"] == "completed" for t in tools)


def test_fix_ids_times_disagree(demo: DemoLayout, db: sqlite3.Connection) -> None:
    rows = message_rows(db, planted_session(db, demo, "ids-times-disagree"))  # by time, then id
    by_time = [message_id for message_id, _ in rows]
    prompt = by_time[0]
    assert json.loads(rows[0][1])["role"] == "user"
    assert sorted(by_time) != by_time and sorted(by_time).index(prompt) > 0
    assert sorted(by_time[1:]) == by_time[1:]  # only the prompt's id is out of place


def test_fix_duplicate_transcripts(demo: DemoLayout, db: sqlite3.Connection) -> None:
    site = fix_site(demo, "duplicate-transcripts")
    records = [read_json(p) | {"dir": p.parent} for p in site.campaign_dir.glob("*/cached-result.json")]
    baseline = sorted(records, key=lambda r: (r["scenarioId"], r["rep"]))
    assert baseline[1]["dir"] == site.cell_dir  # the second by (scenarioId, rep)
    record = baseline[1]
    assert record["artifact"]["resolved"] is True
    assert record["judgeScores"]["swe-arena-official-judge"]["composite"] == 1.0
    result = result_json(site.cell_dir)
    cwds = result["recoveredSpend"]["workerCwds"]
    assert cwds[0] == site.worker_cwd and result["subtasks"][0]["title"] == result["subtasks"][1]["title"]
    texts = []
    for cwd in cwds[:2]:
        [(session_id, *_)] = sessions_of(db, cwd)
        parts = session_parts(db, session_id)
        assert [p["type"] for p in parts] == ["text", "text", "step-start", "text", "step-finish"]
        name = cwd.rsplit("/", 1)[-1]
        said = [p["text"] for p in parts if p["type"] == "text"]
        texts.append([text.replace(cwd, "<CWD>").replace(name, "<NAME>") for text in said])
    assert texts[0] == texts[1]


def test_fix_timed_out_exit_zero(demo: DemoLayout) -> None:
    site = fix_site(demo, "timed-out-exit-zero")
    receipt = read_json(site.receipt_path)["receipt"]
    assert receipt["timedOut"] is True and receipt["exitCode"] == 0 and receipt["killedBySignal"] is None
    assert receipt["error"] == {"name": "Error", "message": "agenticGenerator: author shot timed out"}
    low, high = window_of(receipt)
    assert low <= first_timestamp(jsonl(site.transcript_path)) <= high


def test_fix_repeated_transcript_lines(demo: DemoLayout) -> None:
    site = fix_site(demo, "repeated-transcript-lines")
    raw = site.transcript_path.read_text(encoding="utf-8").splitlines()
    lines = [json.loads(row) for row in raw]
    first_row: dict[str, str] = {}
    repeats = []
    for row, line in zip(raw, lines, strict=True):
        if "uuid" in line and line["uuid"] in first_row:
            assert row == first_row[line["uuid"]]  # written again byte for byte: same uuid and time
            repeats.append(line)
        first_row.setdefault(line.get("uuid"), row)
    assert repeats == lines[-2:] and [line["type"] for line in repeats] == ["user", "assistant"]
    talk = [line for line in lines[:-2] if line["type"] in {"user", "assistant"} and not line["isSidechain"]]
    assert repeats == [[line for line in talk if line["type"] == kind][-1] for kind in ("user", "assistant")]
    receipt = read_json(site.receipt_path)["receipt"]
    assert max(parse_iso(line["timestamp"]) for line in talk) <= parse_iso(receipt["completedAt"])


def test_docstring_table_matches_the_sites_of_the_default_rounds(demo: DemoLayout) -> None:
    import rollout_assets.demo.planted as demo_module

    rows = re.findall(r"^\| `([^`]+)`.*\| (00[13]) (\S+) \|$", demo_module.__doc__ or "", re.MULTILINE)
    assert len(rows) == len(EDGE_CASE_LOCATIONS) - 1  # all but the every-round ledger line
    for case, round_number, place in rows:
        site = sites(demo, {"001": ROUND_001, "003": ROUND_003}[round_number])[case]
        paths = [site.cell_dir, site.receipt_path, site.campaign_dir]
        assert any(str(path).endswith("/" + place) for path in paths if path is not None), case
