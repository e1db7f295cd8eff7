"""The opencode store reader on real SQLite files: opening, session lookup, transcript conversion."""

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollout_assets.sources.opencode import OpencodeSession, OpencodeStore
from rollout_assets.sources.opencode_transcript import MessageUsage, SessionTranscript
from rollout_assets_tests.builders import (
    LEGACY_SESSION_COLUMNS,
    create_opencode_schema,
    insert_rows,
    message,
    part,
    session,
    tool_part,
    write_opencode_db,
)

CWD = "/work/wt/worker-1"


@pytest.fixture(autouse=True, params=["scanned", "indexed"])
def lookup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: sessions found by scanning the session table, and through the
    directory index a worker process builds once (`index_directories`)."""
    if request.param == "indexed":
        open_plain = OpencodeStore.open

        def open_indexed(path: str | os.PathLike[str]) -> OpencodeStore | None:
            store = open_plain(path)
            if store is not None:
                store.index_directories()
            return store

        monkeypatch.setattr(OpencodeStore, "open", staticmethod(open_indexed))
    return request.param


def open_store(path: Path) -> OpencodeStore:
    store = OpencodeStore.open(path)
    assert store is not None
    return store


@pytest.fixture
def closing() -> Iterator[list[OpencodeStore]]:
    """Stores appended here are closed after the test, whatever it asserted."""
    stores: list[OpencodeStore] = []
    yield stores
    for store in stores:
        store.close()


def read_messages(tmp_path: Path, messages: list[dict[str, Any]], parts: list[dict[str, Any]]) -> list[dict]:
    """The transcript of session `s1` in a store holding exactly these rows."""
    path = write_opencode_db(
        tmp_path / "opencode.db", sessions=[session("s1", CWD)], messages=messages, parts=parts
    )
    with open_store(path) as store:
        return store.session_messages("s1")


def assistant_messages(tmp_path: Path, parts: list[dict[str, Any]]) -> list[dict]:
    """The transcript of one assistant message `m1` made of `parts`."""
    return read_messages(tmp_path, [message("m1", "s1", "assistant")], parts)


# ---------------------------------------------------------------------------
# Opening the store
# ---------------------------------------------------------------------------


def test_a_store_whose_path_holds_a_byte_that_is_not_utf8_opens(tmp_path: Path) -> None:
    folder = tmp_path / os.fsdecode(b"store-\xff")
    folder.mkdir()
    db = write_opencode_db(folder / "opencode.db", sessions=[session("s1", "/clones/w0")])

    store = OpencodeStore.open(db)

    assert store is not None
    try:
        assert [s.id for s in store.sessions_by_directory(["/clones/w0"])["/clones/w0"]] == ["s1"]
    finally:
        store.close()


def test_a_missing_store_is_none(tmp_path: Path) -> None:
    assert OpencodeStore.open(tmp_path / "missing.db") is None


def test_a_directory_in_place_of_the_store_is_none(tmp_path: Path) -> None:
    (tmp_path / "opencode.db").mkdir()

    assert OpencodeStore.open(tmp_path / "opencode.db") is None


def test_a_file_of_garbage_bytes_is_none(tmp_path: Path) -> None:
    path = tmp_path / "opencode.db"
    path.write_bytes(b"\x00\xffthis is not an sqlite database at all\n" * 200)

    assert OpencodeStore.open(path) is None


def test_a_truncated_sqlite_header_is_none(tmp_path: Path) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])
    path.write_bytes(path.read_bytes()[:50])

    assert OpencodeStore.open(path) is None


def test_an_sqlite_file_without_any_opencode_table_is_none(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    connection.commit()
    connection.close()

    assert OpencodeStore.open(path) is None


def test_an_sqlite_file_with_messages_and_parts_but_no_session_table_is_none(tmp_path: Path) -> None:
    path = tmp_path / "opencode.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, data TEXT)")
    connection.execute("CREATE TABLE part (id TEXT, message_id TEXT, data TEXT)")
    connection.commit()
    connection.close()

    assert OpencodeStore.open(path) is None


def test_a_path_with_uri_special_characters_opens(tmp_path: Path, closing: list[OpencodeStore]) -> None:
    path = write_opencode_db(tmp_path / "a dir?#%20" / "open code.db", sessions=[session("s1", CWD)])

    store = open_store(path)
    closing.append(store)

    assert [s.id for s in store.sessions_by_directory([CWD])[CWD]] == ["s1"]


def read_everything(path: Path) -> None:
    with open_store(path) as store:
        for sessions in store.sessions_by_directory([CWD, "/nowhere"]).values():
            for found in sessions:
                store.session_messages(found.id)


def test_reading_leaves_the_store_file_bytes_and_mtime_unchanged(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s1", CWD)],
        messages=[message("m1", "s1", "user")],
        parts=[part("p1", "m1", "text", text="hi")],
    )
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    read_everything(path)

    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_reading_leaves_no_journal_wal_or_shm_file_behind(tmp_path: Path) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])

    read_everything(path)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["opencode.db"]


def test_reading_a_wal_mode_store_leaves_its_database_file_unchanged(tmp_path: Path) -> None:
    # SQLite itself creates the -wal/-shm index files a WAL reader needs (so does the
    # seed's node:sqlite reader); the database file is never written.
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.close()
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    read_everything(path)

    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_the_store_connection_cannot_write(tmp_path: Path) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])
    store = open_store(path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._connection.execute("DELETE FROM session")
    finally:
        store.close()


def test_a_store_written_by_another_connection_in_wal_mode_is_readable(tmp_path: Path) -> None:
    path = tmp_path / "opencode.db"
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")  # committed rows stay in the -wal file
        create_opencode_schema(writer)
        insert_rows(writer, "session", [session("s1", CWD)])
        insert_rows(writer, "message", [message("m1", "s1", "user")])
        insert_rows(writer, "part", [part("p1", "m1", "text", text="committed")])
        writer.execute("BEGIN IMMEDIATE")
        insert_rows(writer, "session", [session("s2", CWD, time_created=2_000)])  # not committed yet

        with open_store(path) as store:
            found = store.sessions_by_directory([CWD])
            transcript = store.session_messages("s1")

        writer.execute("COMMIT")
    finally:
        writer.close()

    assert ([s.id for s in found[CWD]], transcript) == (["s1"], [{"role": "user", "content": "committed"}])


# ---------------------------------------------------------------------------
# Sessions by directory
# ---------------------------------------------------------------------------


def test_sessions_of_many_directories_come_grouped_per_directory_oldest_first(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[
            session("s-late", "/w/a", time_created=3_000),
            session("s-other", "/w/b", time_created=1_500),
            session("s-early", "/w/a", time_created=1_000),
            session("s-mid", "/w/a", time_created=2_000),
            session("s-unasked", "/w/c", time_created=500),
        ],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory(["/w/a", "/w/b", "/w/missing"])

    assert {cwd: [s.id for s in sessions] for cwd, sessions in found.items()} == {
        "/w/a": ["s-early", "s-mid", "s-late"],
        "/w/b": ["s-other"],
    }


def test_sessions_created_at_the_same_time_are_ordered_by_id(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s-b", CWD, time_created=1_000), session("s-a", CWD, time_created=1_000)],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])

    assert [s.id for s in found[CWD]] == ["s-a", "s-b"]


def test_a_directory_asked_twice_gives_its_sessions_once(tmp_path: Path) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD, CWD, CWD])

    assert [s.id for s in found[CWD]] == ["s1"]


def test_more_than_500_directories_are_looked_up_in_batches(tmp_path: Path) -> None:
    directories = [f"/w/worker-{n:04d}" for n in range(1_203)]
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session(f"s-{n:04d}", cwd, time_created=n) for n, cwd in enumerate(directories)],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory(iter(directories))

    assert {cwd: [s.id for s in sessions] for cwd, sessions in found.items()} == {
        cwd: [f"s-{n:04d}"] for n, cwd in enumerate(directories)
    }


def test_an_indexed_store_looks_sessions_up_without_scanning_the_session_table(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db", sessions=[session("s1", CWD), session("s2", "/w/other")]
    )

    with open_store(path) as store:
        store.index_directories()  # a second call changes nothing
        statements: list[str] = []
        store._connection.set_trace_callback(statements.append)  # the SQL run, values inlined
        found = store.sessions_by_directory([CWD])
        store._connection.set_trace_callback(None)
        (lookup_sql,) = statements
        plan = [str(row[3]) for row in store._connection.execute(f"EXPLAIN QUERY PLAN {lookup_sql}")]

    assert [s.id for s in found[CWD]] == ["s1"]
    assert not any(step.startswith("SCAN") for step in plan), plan
    assert any("session_directory_by_directory" in step for step in plan), plan


def test_no_directories_give_no_sessions(tmp_path: Path) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD)])

    with open_store(path) as store:
        assert store.sessions_by_directory([]) == {}


def test_a_session_row_is_unpacked_with_its_model_json(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[
            session("s1", CWD, parent_id="s0", agent="general", time_created=1_000, time_updated=62_500)
        ],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])

    assert found[CWD] == [
        OpencodeSession(
            id="s1",
            parent_id="s0",
            directory=CWD,
            agent="general",
            model_id="gpt-5",
            provider_id="openai",
            cost_usd=0.25,
            tokens_input=100,
            tokens_output=20,
            tokens_reasoning=5,
            tokens_cache_read=40,
            tokens_cache_write=8,
            time_created=1_000,
            time_updated=62_500,
        )
    ]


@pytest.mark.parametrize(
    "model",
    [None, "{not json", '"gpt-5"', "[]", '{"id": 42, "providerID": ["openai"]}', "{}"],
    ids=["null", "malformed", "string", "array", "non-string-fields", "empty-object"],
)
def test_a_missing_or_malformed_model_gives_null_model_fields(tmp_path: Path, model: str | None) -> None:
    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", CWD, model=model)])

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])[CWD][0]

    assert (found.model_id, found.provider_id) == (None, None)


def test_non_numeric_cost_and_token_values_read_as_null(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s1", CWD, cost="0.25", tokens_input=None, tokens_output="x")],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])[CWD][0]

    assert (found.cost_usd, found.tokens_input, found.tokens_output) == (None, None, None)


def test_infinite_and_nan_numbers_read_as_null(tmp_path: Path) -> None:
    # SQLite REAL columns hold Infinity and NaN (NaN is stored as NULL by SQLite itself).
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[
            session(
                "s1",
                CWD,
                cost=float("inf"),
                tokens_input=float("-inf"),
                time_created=float("inf"),
                time_updated=float("nan"),
            )
        ],
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])[CWD][0]

    assert (found.cost_usd, found.tokens_input, found.time_created, found.time_updated) == (
        None,
        None,
        None,
        None,
    )


def test_a_parent_id_or_agent_that_is_not_text_reads_as_null(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db", sessions=[session("s1", CWD, parent_id=b"\x00ses_parent", agent=7.5)]
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])[CWD][0]

    assert (found.parent_id, found.agent) == (None, None)


def test_a_legacy_session_table_without_cost_columns_reads_null_cost(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db", sessions=[session("s1", CWD)], session_columns=LEGACY_SESSION_COLUMNS
    )

    with open_store(path) as store:
        found = store.sessions_by_directory([CWD])[CWD][0]

    assert (
        found.cost_usd,
        found.tokens_input,
        found.tokens_output,
        found.tokens_reasoning,
        found.tokens_cache_read,
        found.tokens_cache_write,
        found.model_id,
    ) == (None, None, None, None, None, None, "gpt-5")


def test_a_legacy_session_table_still_gives_the_session_messages(tmp_path: Path) -> None:
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s1", CWD)],
        messages=[message("m1", "s1", "user")],
        parts=[part("p1", "m1", "text", text="fix the bug")],
        session_columns=LEGACY_SESSION_COLUMNS,
    )

    with open_store(path) as store:
        assert store.session_messages("s1") == [{"role": "user", "content": "fix the bug"}]


# ---------------------------------------------------------------------------
# Transcript conversion (docs/input-formats.md §4)
# ---------------------------------------------------------------------------


def test_a_user_message_joins_its_text_parts_with_newlines(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user")],
        [
            part("p1", "m1", "text", text="first"),
            part("p2", "m1", "file", url="file:///x"),
            part("p3", "m1", "text", text="second"),
        ],
    )

    assert transcript == [{"role": "user", "content": "first\nsecond"}]


def test_a_user_message_without_text_parts_has_empty_content(tmp_path: Path) -> None:
    transcript = read_messages(tmp_path, [message("m1", "s1", "user")], [part("p1", "m1", "file", url="x")])

    assert transcript == [{"role": "user", "content": ""}]


def test_messages_come_in_time_order_and_parts_in_id_order(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m-b", "s1", "user", time_created=2_000), message("m-a", "s1", "user", time_created=1_000)],
        [
            part("p2", "m-a", "text", text="a2"),
            part("p1", "m-a", "text", text="a1"),
            part("p3", "m-b", "text", text="b"),
        ],
    )

    assert transcript == [{"role": "user", "content": "a1\na2"}, {"role": "user", "content": "b"}]


def test_messages_of_other_sessions_are_not_read(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user"), message("m2", "s2", "user")],
        [part("p1", "m1", "text", text="mine"), part("p2", "m2", "text", text="theirs")],
    )

    assert transcript == [{"role": "user", "content": "mine"}]


def test_an_assistant_message_is_cut_into_steps_at_step_start(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "step-start"),
            part("p2", "m1", "text", text="looking"),
            part("p3", "m1", "step-finish", reason="tool-calls"),
            part("p4", "m1", "step-start"),
            part("p5", "m1", "text", text="done"),
            part("p6", "m1", "text", text="really"),
            part("p7", "m1", "step-finish", reason="stop"),
        ],
    )

    assert transcript == [
        {"role": "assistant", "content": "looking"},
        {"role": "assistant", "content": "done\nreally"},
    ]


def test_step_finish_snapshot_and_patch_parts_add_nothing(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "step-start"),
            part("p2", "m1", "snapshot", snapshot="abc"),
            part("p3", "m1", "patch", hash="def", files=["a.py"]),
            part("p4", "m1", "step-finish", reason="stop"),
            part("p5", "m1", "step-start"),
            part("p6", "m1", "text", text="answer"),
            part("p7", "m1", "snapshot", snapshot="ghi"),
        ],
    )

    assert transcript == [{"role": "assistant", "content": "answer"}]


def test_a_step_with_only_tool_calls_has_null_content(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [part("p1", "m1", "step-start"), tool_part("p2", "m1", "call-1", input={"cmd": "ls"}, output="a.py")],
    )

    assert transcript[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call-1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}
        ],
    }


def test_a_step_whose_only_text_is_empty_makes_no_message(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "step-start"),
            part("p2", "m1", "text", text=""),
            part("p3", "m1", "step-finish"),
            part("p4", "m1", "step-start"),
            part("p5", "m1", "text", text="done"),
        ],
    )

    assert transcript == [{"role": "assistant", "content": "done"}]


def test_an_empty_text_beside_a_tool_call_gives_null_content(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [part("p1", "m1", "text", text=""), tool_part("p2", "m1", "call-1", input={}, output="ok")],
    )

    assert transcript[0]["content"] is None
    assert [message["role"] for message in transcript] == ["assistant", "tool"]


def test_non_empty_reasoning_becomes_reasoning_content(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "reasoning", text="think"),
            part("p2", "m1", "reasoning", text=""),
            part("p3", "m1", "reasoning", text="again"),
            part("p4", "m1", "text", text="answer"),
        ],
    )

    assert transcript == [{"role": "assistant", "content": "answer", "reasoning_content": "think\nagain"}]


def test_empty_reasoning_alone_makes_no_message(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "step-start"),
            part("p2", "m1", "reasoning", text=""),
            part("p3", "m1", "step-finish"),
        ],
    )

    assert transcript == []


def test_a_step_with_reasoning_only_has_null_content_and_no_tool_calls(tmp_path: Path) -> None:
    transcript = assistant_messages(tmp_path, [part("p1", "m1", "reasoning", text="hmm")])

    assert transcript == [{"role": "assistant", "content": None, "reasoning_content": "hmm"}]


def test_tool_calls_carry_json_arguments_and_an_empty_object_for_absent_input(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            tool_part("p1", "m1", "call-1", tool="edit", input={"path": "é.py", "lines": [1, 2]}),
            tool_part("p2", "m1", "call-2", tool="read"),
            tool_part("p3", "m1", "call-3", tool=None, input="raw"),
        ],
    )

    assert transcript[0]["tool_calls"] == [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "edit", "arguments": '{"path":"é.py","lines":[1,2]}'},
        },
        {"id": "call-2", "type": "function", "function": {"name": "read", "arguments": "{}"}},
        {"id": "call-3", "type": "function", "function": {"name": "unknown", "arguments": '"raw"'}},
    ]


def test_a_failed_tool_call_is_answered_by_its_error_message(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            tool_part(
                "p1",
                "m1",
                "call-1",
                tool="read",
                status="error",
                input={"path": "x"},
                error="File not found: x",
            ),
            tool_part("p2", "m1", "call-2", tool="bash", status="error", error={"not": "text"}),
        ],
    )

    assert [message["content"] for message in transcript[1:]] == ["File not found: x", ""]


def test_a_lone_surrogate_in_a_tool_input_or_output_is_escaped_in_its_json_text(tmp_path: Path) -> None:
    """A truncated emoji (a lone `\\ud83d` escape) inside a tool's input or non-string output:
    the JSON text made of it carries the escape, as JSON.stringify writes it, not the lone
    surrogate itself, which parsers such as orjson refuse in the line."""
    torn = "cut \ud83d é"
    transcript = assistant_messages(
        tmp_path,
        [tool_part("p1", "m1", "call-1", tool="write", input={"content": torn}, output={"echo": torn})],
    )

    arguments = transcript[0]["tool_calls"][0]["function"]["arguments"]
    assert arguments == '{"content":"cut \\ud83d é"}'
    assert transcript[1]["content"] == '{"echo":"cut \\ud83d é"}'
    assert json.loads(arguments) == {"content": torn}
    orjson.dumps(transcript)  # no lone surrogate left anywhere


def test_each_tool_part_is_answered_by_one_tool_message_after_the_assistant_turn(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "text", text="running"),
            tool_part("p2", "m1", "call-1", tool="bash", output="ok\n"),
            tool_part("p3", "m1", "call-2", tool="grep", output={"matches": 2, "files": ["a"]}),
            tool_part("p4", "m1", "call-3", tool="todo", status="running"),
        ],
    )

    assert transcript[1:] == [
        {"role": "tool", "tool_call_id": "call-1", "name": "bash", "content": "ok\n"},
        {"role": "tool", "tool_call_id": "call-2", "name": "grep", "content": '{"matches":2,"files":["a"]}'},
        # Still running when the session stopped: opencode hands the model this, not "".
        {
            "role": "tool",
            "tool_call_id": "call-3",
            "name": "todo",
            "content": "[Tool execution was interrupted]",
        },
    ]


def test_a_full_session_converts_to_the_chat_transcript(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user", time_created=1), message("m2", "s1", "assistant", time_created=2)],
        [
            part("p01", "m1", "text", text="fix it"),
            part("p02", "m2", "step-start"),
            part("p03", "m2", "reasoning", text="need to look"),
            tool_part("p04", "m2", "c1", tool="read", input={"file": "a.py"}, output="x = 1"),
            part("p05", "m2", "step-finish"),
            part("p06", "m2", "step-start"),
            part("p07", "m2", "text", text="fixed"),
            part("p08", "m2", "step-finish"),
        ],
    )

    assert transcript == [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "need to look",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"file":"a.py"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "x = 1"},
        {"role": "assistant", "content": "fixed"},
    ]


def test_a_store_created_as_utf16_gives_its_transcripts(tmp_path: Path) -> None:
    """SQLite keeps a UTF-16 database's text as UTF-16 bytes: reading the JSON columns as the
    stored bytes would make every message unreadable."""
    path = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[session("s1", CWD)],
        messages=[
            message("m1", "s1", "user", time_created=1),
            message("m2", "s1", "assistant", time_created=2),
        ],
        parts=[part("p1", "m1", "text", text="fix é"), part("p2", "m2", "text", text="done ✓")],
        encoding="UTF-16le",
    )

    with open_store(path) as store:
        assert [s.id for s in store.sessions_by_directory([CWD])[CWD]] == ["s1"]
        assert store.session_messages("s1") == [
            {"role": "user", "content": "fix é"},
            {"role": "assistant", "content": "done ✓"},
        ]


def test_a_message_with_malformed_json_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [
            message("m1", "s1", "user", time_created=1),
            message("m2", "s1", "user", time_created=2, raw_data='{"role": "user"'),
            message("m3", "s1", "user", time_created=3, raw_data='{"role": "user", "cost": NaN}'),
            message("m4", "s1", "assistant", time_created=4),
        ],
        [
            part("p1", "m1", "text", text="kept"),
            part("p2", "m2", "text", text="lost"),
            part("p3", "m3", "text", text="lost too"),
            part("p4", "m4", "text", text="also kept"),
        ],
    )

    assert transcript == [{"role": "user", "content": "kept"}, {"role": "assistant", "content": "also kept"}]


def test_a_message_with_another_role_adds_nothing(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "system", time_created=1), message("m2", "s1", "user", time_created=2)],
        [part("p1", "m1", "text", text="sys"), part("p2", "m2", "text", text="hi")],
    )

    assert transcript == [{"role": "user", "content": "hi"}]


def test_a_part_with_malformed_json_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            part("p1", "m1", "text", text="before"),
            part("p2", "m1", raw_data='{"type": "text", "text": "broken'),
            part("p3", "m1", raw_data="[1, 2]"),
            part("p4", "m1", "text", text="after"),
        ],
    )

    assert transcript == [{"role": "assistant", "content": "before\nafter"}]


def test_a_session_with_no_readable_parts_gives_no_messages(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "assistant"), message("m2", "s1", "assistant", raw_data="garbage")],
        [part("p1", "m1", raw_data="{oops"), part("p2", "m1", "step-start"), part("p3", "m1", "step-finish")],
    )

    assert transcript == []


def test_an_unknown_session_gives_no_messages(tmp_path: Path) -> None:
    assert read_messages(tmp_path, [], []) == []


def test_json_text_is_written_compact_with_non_ascii_kept(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path, [tool_part("p1", "m1", "c1", output={"msg": "héllo", "n": 1.5})]
    )

    assert transcript[1]["content"] == '{"msg":"héllo","n":1.5}'


# ---------------------------------------------------------------------------
# What opencode hands the model (its toModelMessages)
# ---------------------------------------------------------------------------


def read_transcript(
    tmp_path: Path, messages: list[dict[str, Any]], parts: list[dict[str, Any]]
) -> SessionTranscript:
    """The whole SessionTranscript of session `s1` in a store holding exactly these rows."""
    path = write_opencode_db(
        tmp_path / "opencode.db", sessions=[session("s1", CWD)], messages=messages, parts=parts
    )
    with open_store(path) as store:
        return store.session_transcript("s1")


SYSTEM = [
    "You are opencode, an interactive CLI tool.",
    "Here is some useful information about the environment.",
]


def test_the_system_prompt_of_the_assistant_messages_is_the_first_message(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [
            message("m1", "s1", "user", time_created=1),
            message("m2", "s1", "assistant", time_created=2, system=["an older prompt"]),
            message("m3", "s1", "user", time_created=3),
            message("m4", "s1", "assistant", time_created=4, system=SYSTEM),
        ],
        [
            part("p1", "m1", "text", text="fix it"),
            part("p2", "m2", "text", text="looking"),
            part("p3", "m3", "text", text="go on"),
            part("p4", "m4", "text", text="fixed"),
        ],
    )

    # The latest one: the prompt the whole transcript was last handed to the model under.
    assert transcript[0] == {"role": "system", "content": "\n".join(SYSTEM)}
    assert [m["role"] for m in transcript] == ["system", "user", "assistant", "user", "assistant"]


def test_no_system_message_without_a_recorded_prompt_or_without_a_conversation(tmp_path: Path) -> None:
    unrecorded = read_messages(
        tmp_path / "a",
        [
            message("m1", "s1", "user", time_created=1),
            message("m2", "s1", "assistant", time_created=2, system=[]),
        ],
        [part("p1", "m1", "text", text="hi"), part("p2", "m2", "text", text="hello")],
    )
    nothing_sent = read_messages(
        tmp_path / "b",
        [message("m1", "s1", "assistant", system=SYSTEM)],
        [part("p1", "m1", "step-start"), part("p2", "m1", "step-finish")],
    )

    assert [m["role"] for m in unrecorded] == ["user", "assistant"]
    assert nothing_sent == []


def test_a_tool_call_still_pending_or_running_is_answered_as_interrupted(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            tool_part("p1", "m1", "call-1", tool="bash", status="pending", input={}),
            tool_part("p2", "m1", "call-2", tool="bash", status="running", input={"command": "sleep 99"}),
        ],
    )

    assert [m["content"] for m in transcript[1:]] == ["[Tool execution was interrupted]"] * 2


def test_an_interrupted_call_that_failed_keeps_the_output_it_had(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            tool_part(
                "p1",
                "m1",
                "call-1",
                status="error",
                error="aborted",
                metadata={"interrupted": True, "output": "partial output"},
            )
        ],
    )

    assert transcript[1]["content"] == "partial output"


def test_a_pruned_tool_output_is_the_placeholder_the_model_saw(tmp_path: Path) -> None:
    transcript = assistant_messages(
        tmp_path,
        [
            tool_part(
                "p1",
                "m1",
                "call-1",
                tool="read",
                input={"filePath": "a.py"},
                output="x = 1\n" * 500,
                time={"start": 1, "end": 2, "compacted": 3},
            )
        ],
    )

    assert transcript[1]["content"] == "[Old tool result content cleared]"


def test_compaction_and_subtask_user_messages_say_what_opencode_sends(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user", time_created=1), message("m2", "s1", "user", time_created=2)],
        [
            part("p1", "m1", "compaction", auto=True),
            part("p2", "m2", "subtask", prompt="run the tests", description="tests", agent="general"),
        ],
    )

    assert transcript == [
        {"role": "user", "content": "What did we do so far?"},
        {"role": "user", "content": "The following tool was executed by the user"},
    ]


def test_ignored_text_parts_are_not_sent(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user", time_created=1), message("m2", "s1", "user", time_created=2)],
        [
            part("p1", "m1", "text", text="kept"),
            part("p2", "m1", "text", text="ignored", ignored=True),
            part("p3", "m2", "text", text="only ignored", ignored=True),
        ],
    )

    assert transcript == [{"role": "user", "content": "kept"}]


def test_a_message_without_parts_is_not_sent(tmp_path: Path) -> None:
    transcript = read_messages(
        tmp_path,
        [message("m1", "s1", "user", time_created=1), message("m2", "s1", "user", time_created=2)],
        [part("p1", "m2", "text", text="hi")],
    )

    assert transcript == [{"role": "user", "content": "hi"}]


def test_an_assistant_message_that_ended_in_an_api_error_is_not_sent_and_is_the_sessions_error(
    tmp_path: Path,
) -> None:
    api_error = {
        "name": "APIError",
        "data": {"message": "Overloaded", "statusCode": 529, "isRetryable": True},
    }
    transcript = read_transcript(
        tmp_path,
        [
            message("m1", "s1", "user", time_created=1),
            message("m2", "s1", "assistant", time_created=2, error=api_error),
        ],
        [
            part("p1", "m1", "text", text="fix it"),
            part("p2", "m2", "step-start"),
            part("p3", "m2", "text", text="Let"),
        ],
    )

    assert (transcript.messages, transcript.error) == (
        [{"role": "user", "content": "fix it"}],
        "APIError: Overloaded",
    )


def test_an_error_the_session_recovered_from_is_not_its_error(tmp_path: Path) -> None:
    transcript = read_transcript(
        tmp_path,
        [
            message(
                "m1", "s1", "assistant", time_created=1, error={"name": "APIError", "data": {"message": "x"}}
            ),
            message("m2", "s1", "assistant", time_created=2),
        ],
        [part("p1", "m1", "text", text="lost"), part("p2", "m2", "text", text="answer")],
    )

    assert (transcript.messages, transcript.error) == ([{"role": "assistant", "content": "answer"}], None)


def test_an_aborted_assistant_message_that_produced_text_is_sent(tmp_path: Path) -> None:
    aborted = {"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}
    transcript = read_transcript(
        tmp_path,
        [message("m1", "s1", "assistant", error=aborted)],
        [part("p1", "m1", "step-start"), part("p2", "m1", "text", text="half an answer")],
    )

    assert transcript.messages == [{"role": "assistant", "content": "half an answer"}]
    assert transcript.error == "MessageAbortedError: The operation was aborted."


def test_files_and_tool_attachments_handed_to_the_model_are_counted(tmp_path: Path) -> None:
    image = {"type": "file", "mime": "image/png", "url": "data:image/png;base64,AAAA", "filename": "a.png"}
    transcript = read_transcript(
        tmp_path,
        [message("m1", "s1", "user", time_created=1), message("m2", "s1", "assistant", time_created=2)],
        [
            part("p1", "m1", "text", text="what is in the screenshot?"),
            part("p2", "m1", "file", mime="image/png", url="data:image/png;base64,AAAA"),
            part("p3", "m1", "file", mime="text/plain", url="file:///a.txt"),  # already text in the message
            tool_part(
                "p4",
                "m2",
                "call-1",
                tool="read",
                output="done",
                attachments=[image, {**image, "mime": "application/pdf"}],
            ),
            tool_part(
                "p5",
                "m2",
                "call-2",
                tool="read",
                output="gone",
                attachments=[image],
                time={"start": 1, "end": 2, "compacted": 3},
            ),
        ],
    )

    assert transcript.attachments == {"image/png": 2, "application/pdf": 1}
    assert transcript.messages[0] == {"role": "user", "content": "what is in the screenshot?"}


def test_the_model_and_spend_of_the_assistant_messages_are_read(tmp_path: Path) -> None:
    def spend(cost: float, tokens_in: int, tokens_out: int) -> dict[str, Any]:
        return {
            "cost": cost,
            "tokens": {
                "input": tokens_in,
                "output": tokens_out,
                "reasoning": 1,
                "cache": {"read": 10, "write": 2},
            },
        }

    transcript = read_transcript(
        tmp_path,
        [
            message(
                "m1",
                "s1",
                "assistant",
                time_created=1,
                modelID="gpt-5",
                providerID="openai",
                **spend(0.5, 100, 20),
            ),
            message(
                "m2",
                "s1",
                "assistant",
                time_created=2,
                modelID="o3",
                providerID="openai",
                **spend(0.25, 50, 5),
            ),
        ],
        [part("p1", "m1", "text", text="a"), part("p2", "m2", "text", text="b")],
    )

    assert (transcript.model_id, transcript.provider_id) == ("o3", "openai")
    assert transcript.usage == MessageUsage(
        cost_usd=0.75,
        tokens_input=150,
        tokens_output=25,
        tokens_reasoning=2,
        tokens_cache_read=20,
        tokens_cache_write=4,
    )
