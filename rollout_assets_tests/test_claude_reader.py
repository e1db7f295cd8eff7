"""The Claude Code transcript reader on real project folders and JSONL transcript files."""

import os
from pathlib import Path
from typing import Any

from rollout_assets.sources.claude import (
    ClaudeTranscript,
    ClaudeUsage,
    TranscriptFiles,
    claude_project_slug,
    read_transcript,
    transcript_files,
)
from rollout_assets_tests.builders import assistant_line, usage, user_line, write_transcript

T0 = "2025-01-01T10:00:00.000Z"
T1 = "2025-01-01T10:00:05.000Z"
T2 = "2025-01-01T10:00:09.500Z"


def parse(tmp_path: Path, lines: list[Any], **options: Any) -> ClaudeTranscript:
    return read_transcript(write_transcript(tmp_path / "session.jsonl", lines, **options))


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def thinking(value: str) -> dict[str, str]:
    return {"type": "thinking", "thinking": value, "signature": "sig"}


def tool_use(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ---------------------------------------------------------------------------
# Project folders
# ---------------------------------------------------------------------------


def test_slug_replaces_every_character_outside_letters_digits_and_dash() -> None:
    assert claude_project_slug("/home/u/my_proj.v2/proposer-wt/gen1-cand0 x") == (
        "-home-u-my-proj-v2-proposer-wt-gen1-cand0-x"
    )


def test_slug_replaces_non_ascii_letters_and_digits() -> None:
    assert claude_project_slug("/tmp/café/\u0661") == "-tmp-caf---"


def project(projects: Path, cwd: str) -> Path:
    folder = projects / claude_project_slug(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_transcript_files_are_the_jsonl_files_in_sorted_name_order(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    folder = project(projects, "/r/proposer-wt/gen0-cand0")
    for name in ["b.jsonl", "A.jsonl", "a.jsonl", "notes.txt", "c.jsonl.bak", "d.JSONL"]:
        (folder / name).write_text("")

    found = transcript_files(["/r/proposer-wt/gen0-cand0"], projects)

    assert found.files == [folder / "A.jsonl", folder / "a.jsonl", folder / "b.jsonl"]
    assert found.unreadable_folder is None


def test_a_missing_project_folder_has_no_transcript_files(tmp_path: Path) -> None:
    found = transcript_files(["/r/proposer-wt/gen0-cand0"], tmp_path / "projects")

    assert (found.files, found.unreadable_folder) == ([], None)


def test_a_project_folder_that_is_a_file_has_no_transcript_files(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    projects.mkdir()
    (projects / claude_project_slug("/r/wt")).write_text("")

    assert transcript_files(["/r/wt"], projects) == TranscriptFiles(files=[])


def test_a_project_folder_there_but_unlistable_is_reported_not_taken_for_empty(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    readable = project(projects, "/real/wt")
    (readable / "a.jsonl").write_text("")
    loop = projects / claude_project_slug("/link/wt")
    loop.symlink_to(loop.name)

    found = transcript_files(["/link/wt", "/real/wt"], projects)

    assert found.files == [readable / "a.jsonl"]
    assert found.unreadable_folder == (str(loop), "Too many levels of symbolic links")


def test_two_cwd_spellings_of_one_folder_list_its_files_once(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    folder = project(projects, "/r/a_b")
    (folder / "s1.jsonl").write_text("")

    assert transcript_files(["/r/a_b", "/r/a.b"], projects).files == [folder / "s1.jsonl"]


def test_two_cwd_spellings_of_two_folders_list_both_in_cwd_order(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    by_link, by_real = project(projects, "/link/wt"), project(projects, "/real/wt")
    (by_link / "z.jsonl").write_text("")
    (by_real / "a.jsonl").write_text("")

    assert transcript_files(["/link/wt", "/real/wt"], projects).files == [by_link / "z.jsonl", by_real / "a.jsonl"]


# ---------------------------------------------------------------------------
# Lines that are not main-thread conversation
# ---------------------------------------------------------------------------


def test_blank_and_malformed_lines_are_skipped(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            "",
            "   ",
            "{not json",
            '{"type": "user", "message": {"content": NaN}}',
            user_line("hello"),
            "[]",
            "42",
        ],
    )

    assert transcript.messages == [{"role": "user", "content": "hello"}]


def test_non_conversation_line_types_are_ignored(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            {"type": "summary", "summary": "Fixing bug", "leafUuid": "x"},
            {"type": "queue-operation", "operation": "enqueue", "timestamp": "2024-12-31T00:00:00.000Z"},
            {"type": "attachment", "message": {"role": "user", "content": "attached"}},
            {"type": "system", "message": {"role": "system", "content": "sys"}, "timestamp": T0},
            user_line("hello", timestamp=T1),
        ],
    )

    assert (transcript.messages, transcript.started_at, transcript.main_thread_lines) == (
        [{"role": "user", "content": "hello"}],
        T1,
        1,
    )


def test_conversation_lines_without_an_object_message_are_ignored(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [{"type": "user", "message": "hello", "timestamp": T0}, {"type": "assistant", "timestamp": T0}],
    )

    assert (transcript.messages, transcript.main_thread_lines, transcript.started_at) == ([], 0, None)


def test_sidechain_lines_are_left_out_of_the_main_transcript(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            user_line("main task", timestamp=T0),
            user_line("sub-agent task", timestamp=T1, isSidechain=True),
            assistant_line("msg_sub", [text("sub-agent answer")], usage=usage(1000, 100), isSidechain=True),
            assistant_line("msg_main", [text("main answer")], usage=usage(10, 1), timestamp=T1),
        ],
    )

    assert (transcript.messages, transcript.usage) == (
        [{"role": "user", "content": "main task"}, {"role": "assistant", "content": "main answer"}],
        ClaudeUsage(tokens_in=10, tokens_out=1, cache_read=0, cache_write=0),
    )


def test_a_sidechain_only_file_has_no_main_thread_lines(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            user_line("sub-agent task", isSidechain=True),
            assistant_line("msg_sub", [text("answer")], usage=usage(5, 5), isSidechain=True),
        ],
    )

    assert (transcript.main_thread_lines, transcript.messages, transcript.started_at) == (0, [], None)


def test_a_non_boolean_sidechain_flag_is_main_thread(tmp_path: Path) -> None:
    transcript = parse(tmp_path, [user_line("hello", isSidechain="true")])

    assert transcript.messages == [{"role": "user", "content": "hello"}]


# ---------------------------------------------------------------------------
# User lines
# ---------------------------------------------------------------------------


def test_string_user_content_is_a_user_message(tmp_path: Path) -> None:
    assert parse(tmp_path, [user_line("fix the failing test")]).messages == [
        {"role": "user", "content": "fix the failing test"}
    ]


def test_tool_results_become_tool_messages_before_the_joined_user_text(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            user_line(
                [
                    text("first"),
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "exit 0"},
                    {"type": "image", "source": {}},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [text("line a"), {"type": "image"}, text("line b")],
                    },
                    text("second"),
                ]
            )
        ],
    )

    assert transcript.messages == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "exit 0"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "line a\nline b"},
        {"role": "user", "content": "first\nsecond"},
    ]


def test_a_tool_result_without_content_has_empty_text(tmp_path: Path) -> None:
    transcript = parse(tmp_path, [user_line([{"type": "tool_result", "tool_use_id": "toolu_1"}])])

    assert transcript.messages == [{"role": "tool", "tool_call_id": "toolu_1", "content": ""}]


def test_a_tool_result_without_a_tool_use_id_is_dropped(tmp_path: Path) -> None:
    transcript = parse(tmp_path, [user_line([{"type": "tool_result", "content": "orphan"}, text("hi")])])

    assert transcript.messages == [{"role": "user", "content": "hi"}]


def test_block_user_content_without_text_adds_no_user_message(tmp_path: Path) -> None:
    transcript = parse(tmp_path, [user_line([{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}])])

    assert [m["role"] for m in transcript.messages] == ["tool"]


# ---------------------------------------------------------------------------
# Assistant lines
# ---------------------------------------------------------------------------


def test_block_lines_of_one_message_id_merge_into_one_assistant_turn(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [thinking("plan")]),
            assistant_line("msg_1", [text("I will look.")]),
            assistant_line("msg_1", [thinking("more")]),
            assistant_line("msg_1", [tool_use("toolu_1", "Read", {"file_path": "a.py"})]),
            assistant_line("msg_1", [text("And grep.")]),
            assistant_line("msg_1", [tool_use("toolu_2", "Grep", {"pattern": "x"})]),
        ],
    )

    assert transcript.messages == [
        {
            "role": "assistant",
            "content": "I will look.\nAnd grep.",
            "reasoning_content": "plan\nmore",
            "tool_calls": [
                call("toolu_1", "Read", '{"file_path":"a.py"}'),
                call("toolu_2", "Grep", '{"pattern":"x"}'),
            ],
        }
    ]


def test_empty_text_blocks_add_nothing_and_texts_join_after_text_only(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            user_line([text("")]),  # no user message
            assistant_line("msg_1", [text("")]),  # no turn
            assistant_line("msg_2", [text(""), text("b")]),
            assistant_line("msg_3", [text("a"), text(""), text("c")]),
            user_line([text(""), text("go on")]),
        ],
    )

    assert transcript.messages == [
        {"role": "assistant", "content": "b"},
        {"role": "assistant", "content": "a\n\nc"},
        {"role": "user", "content": "go on"},
    ]


def test_a_tool_use_without_a_string_id_adds_no_call_and_a_nameless_one_is_unknown(tmp_path: Path) -> None:
    nameless = {"type": "tool_use", "id": "toolu_2", "input": {}}
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [{"type": "tool_use", "name": "Bash", "input": {"c": "ls"}}]),
            assistant_line("msg_2", [{"type": "tool_use", "id": 7, "name": "Bash", "input": {}}, nameless]),
        ],
    )

    assert transcript.messages == [
        {"role": "assistant", "content": None, "tool_calls": [call("toolu_2", "unknown", "{}")]}
    ]


def test_consecutive_lines_with_different_ids_are_separate_turns(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path, [assistant_line("msg_1", [text("one")]), assistant_line("msg_2", [text("two")])]
    )

    assert transcript.messages == [
        {"role": "assistant", "content": "one"},
        {"role": "assistant", "content": "two"},
    ]


def test_a_tool_use_with_absent_input_has_empty_object_arguments(tmp_path: Path) -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "TodoRead"}

    assert parse(tmp_path, [assistant_line("msg_1", [block])]).messages == [
        {"role": "assistant", "content": None, "tool_calls": [call("toolu_1", "TodoRead", "{}")]}
    ]


def test_a_tool_use_with_input_nested_600_deep_is_kept_with_its_arguments_as_text(tmp_path: Path) -> None:
    """Deeper than any document written back as structure may be (512), but only its JSON
    text reaches the line: the call stays, so its tool result still answers a call."""
    deep: Any = []
    for _ in range(599):
        deep = [deep]
    lines = [
        assistant_line("msg_1", [tool_use("toolu_1", "Write", {"nested": deep})]),
        user_line([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]),
    ]

    messages = parse(tmp_path, lines).messages

    assert messages == [
        {"role": "assistant", "content": None,
         "tool_calls": [call("toolu_1", "Write", '{"nested":' + "[" * 600 + "]" * 600 + "}")]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "ok"},
    ]


def test_an_empty_thinking_block_is_not_reasoning(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path, [assistant_line("msg_1", [thinking("")]), assistant_line("msg_1", [text("answer")])]
    )

    assert transcript.messages == [{"role": "assistant", "content": "answer"}]


def test_usage_is_counted_once_per_message_id(tmp_path: Path) -> None:
    turn_usage = usage(input_tokens=100, output_tokens=50, cache_read=1000, cache_write=200)
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [thinking("plan")], usage=turn_usage),
            assistant_line("msg_1", [text("answer")], usage=turn_usage),
            assistant_line("msg_1", [tool_use("toolu_1", "Bash", {"command": "ls"})], usage=turn_usage),
            user_line([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]),
            assistant_line("msg_2", [text("done")], usage=usage(7, 3, 11, 13)),
        ],
    )

    assert transcript.usage == ClaudeUsage(tokens_in=107, tokens_out=53, cache_read=1011, cache_write=213)


def test_a_message_streamed_over_several_block_lines_counts_its_final_usage(tmp_path: Path) -> None:
    """Claude Code 1.0.x writes one line per content block as the response streams: the
    earlier lines of a message id carry a partial `output_tokens` (1 here), only the last one
    the final count. The usage of an API message is its final one."""
    prompt = {"input_tokens": 4, "cache_read_input_tokens": 15030, "cache_creation_input_tokens": 8655}
    transcript = parse(
        tmp_path,
        [
            user_line("task", timestamp=T0),
            assistant_line("msg_1", [thinking("plan")], usage={**prompt, "output_tokens": 1}, timestamp=T1),
            assistant_line("msg_1", [text("looking")], usage={**prompt, "output_tokens": 1}, timestamp=T1),
            assistant_line(
                "msg_1",
                [tool_use("toolu_1", "Bash", {"command": "ls"})],
                usage={**prompt, "output_tokens": 245},
                timestamp=T1,
            ),
            user_line([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}], timestamp=T2),
            assistant_line("msg_2", [text("done")], usage=usage(3, 1, 100, 0), timestamp=T2),
            assistant_line("msg_2", [text("really")], usage=usage(3, 17, 100, 0), timestamp=T2),
        ],
    )

    assert transcript.usage == ClaudeUsage(tokens_in=7, tokens_out=262, cache_read=15130, cache_write=8655)


def test_the_final_usage_of_a_message_counts_even_after_a_tool_result_line(tmp_path: Path) -> None:
    # A block line of a message can follow the tool result its earlier block asked for.
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [tool_use("toolu_1", "Bash", {})], usage=usage(10, 2)),
            user_line([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]),
            assistant_line("msg_1", [text("after")], usage=usage(10, 90)),
        ],
    )

    assert transcript.usage == ClaudeUsage(tokens_in=10, tokens_out=90, cache_read=0, cache_write=0)


def test_a_count_no_message_recorded_is_none_not_zero(tmp_path: Path) -> None:
    """No usage at all, or usage without the cache fields (older transcripts): not measured."""
    without_usage = parse(tmp_path / "a", [user_line("task"), assistant_line("msg_1", [text("done")])])
    without_cache = parse(
        tmp_path / "b",
        [
            assistant_line("msg_1", [text("one")], usage={"input_tokens": 5, "output_tokens": 2}),
            assistant_line("msg_2", [text("two")], usage={"input_tokens": 7, "output_tokens": "3"}),
        ],
    )

    assert without_usage.usage == ClaudeUsage(tokens_in=None, tokens_out=None, cache_read=None, cache_write=None)
    assert without_cache.usage == ClaudeUsage(tokens_in=12, tokens_out=2, cache_read=None, cache_write=None)


def test_usage_is_counted_once_when_the_first_block_line_is_an_empty_thinking_block(tmp_path: Path) -> None:
    turn_usage = usage(input_tokens=100, output_tokens=50, cache_read=1000, cache_write=200)
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [thinking("")], usage=turn_usage),
            assistant_line("msg_1", [text("answer")], usage=turn_usage),
        ],
    )

    assert (transcript.usage, transcript.messages) == (
        ClaudeUsage(tokens_in=100, tokens_out=50, cache_read=1000, cache_write=200),
        [{"role": "assistant", "content": "answer"}],
    )


def test_a_user_line_between_two_lines_of_one_id_starts_a_new_turn_without_recounting_usage(
    tmp_path: Path,
) -> None:
    turn_usage = usage(input_tokens=100, output_tokens=50)
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [tool_use("toolu_1", "Bash", {"command": "ls"})], usage=turn_usage),
            user_line([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]),
            assistant_line("msg_1", [text("after the result")], usage=turn_usage),
        ],
    )

    assert (transcript.messages, transcript.usage) == (
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("toolu_1", "Bash", '{"command":"ls"}')],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py"},
            {"role": "assistant", "content": "after the result"},
        ],
        ClaudeUsage(tokens_in=100, tokens_out=50, cache_read=0, cache_write=0),
    )


def test_lines_without_a_message_id_are_each_a_turn_with_their_own_usage(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            assistant_line(None, [text("a")], usage=usage(1, 2)),
            assistant_line(None, [text("b")], usage=usage(1, 2)),
        ],
    )

    assert (len(transcript.messages), transcript.usage) == (2, ClaudeUsage(tokens_in=2, tokens_out=4, cache_read=0, cache_write=0))


def test_non_numeric_usage_fields_are_not_counted(tmp_path: Path) -> None:
    line_usage = {"input_tokens": "10", "output_tokens": 4, "cache_read_input_tokens": None}
    transcript = parse(tmp_path, [assistant_line("msg_1", [text("a")], usage=line_usage)])

    assert transcript.usage == ClaudeUsage(tokens_in=None, tokens_out=4, cache_read=None, cache_write=None)


def test_the_last_seen_model_wins(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [text("a")], model="claude-opus-4-1"),
            assistant_line("msg_2", [text("b")], model="claude-sonnet-4-5"),
            assistant_line("msg_3", [text("c")], model=None),
        ],
    )

    assert transcript.model == "claude-sonnet-4-5"


def test_the_synthetic_model_is_never_the_model(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            assistant_line("msg_1", [text("a")], model="claude-opus-4-1"),
            assistant_line("msg_2", [text("API Error: overloaded")], model="<synthetic>"),
        ],
    )

    assert transcript.model == "claude-opus-4-1"


def test_a_transcript_of_only_synthetic_turns_has_no_model(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path, [assistant_line("msg_1", [text("No response requested.")], model="<synthetic>")]
    )

    assert transcript.model is None


# ---------------------------------------------------------------------------
# Times, bytes and truncation
# ---------------------------------------------------------------------------


def test_start_and_end_are_the_first_and_last_included_line_timestamps(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            {"type": "summary", "timestamp": "2024-01-01T00:00:00.000Z"},
            user_line("go", timestamp=T0),
            assistant_line("msg_1", [text("ok")], timestamp=T1),
            assistant_line("msg_2", [], timestamp=T2),
            user_line("sub", timestamp="2025-01-02T00:00:00.000Z", isSidechain=True),
        ],
    )

    assert (transcript.started_at, transcript.ended_at) == (T0, T2)


def test_lines_without_a_string_timestamp_do_not_set_the_times(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [user_line("go", timestamp=None), user_line("a", timestamp=T1), user_line("b", timestamp=17)],
    )

    assert (transcript.started_at, transcript.ended_at) == (T1, T1)


def test_invalid_utf8_bytes_are_replaced_not_fatal(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path, [b'{"type": "user", "message": {"content": "caf\xe9 \xff ok"}}', user_line("next")]
    )

    assert transcript.messages == [
        {"role": "user", "content": "caf\ufffd \ufffd ok"},
        {"role": "user", "content": "next"},
    ]


def test_a_cut_off_last_line_is_skipped(tmp_path: Path) -> None:
    transcript = parse(
        tmp_path,
        [
            user_line("complete", timestamp=T0),
            '{"type": "assistant", "message": {"id": "msg_1", "content": [{"ty',
        ],
        final_newline=False,
    )

    assert (transcript.messages, transcript.ended_at) == ([{"role": "user", "content": "complete"}], T0)


def test_a_missing_file_reads_as_an_empty_transcript(tmp_path: Path) -> None:
    transcript = read_transcript(tmp_path / "missing.jsonl")

    assert (transcript.messages, transcript.main_thread_lines, transcript.usage) == ([], 0, ClaudeUsage())
    assert transcript.unreadable is None


def test_a_file_there_but_unreadable_is_an_empty_transcript_saying_why(tmp_path: Path) -> None:
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop.name)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)

    transcript = read_transcript(loop)

    assert (transcript.messages, transcript.main_thread_lines) == ([], 0)
    assert transcript.unreadable == "Too many levels of symbolic links"
    # A FIFO is no transcript file at all (and is never waited on).
    assert read_transcript(fifo).unreadable is None


def test_slug_turns_a_character_outside_the_bmp_into_two_dashes():
    # Claude Code replaces UTF-16 code units; an emoji is two of them.
    assert claude_project_slug("/w/a_😀b") == "-w-a---b"


# ---------------------------------------------------------------------------
# Sub-agent conversations: inline sidechains (1.0.x) and agent-*.jsonl files (newer versions)
# ---------------------------------------------------------------------------


def sidechain(kind: str, uuid: str, parent: str | None, *args: Any, **fields: Any) -> dict[str, Any]:
    """A sidechain line as Claude Code writes it: `isSidechain: true`, linked by parentUuid."""
    build = user_line if kind == "user" else assistant_line
    return build(*args, isSidechain=True, uuid=uuid, parentUuid=parent, sessionId="s-1", **fields)


def test_inline_sidechains_become_one_conversation_per_parent_uuid_chain(tmp_path: Path) -> None:
    # Two Task sub-agents run in parallel: their lines interleave, each chain rooted at a line
    # whose parentUuid is null (1.0.x). One message streamed over two block lines (partial usage).
    transcript = parse(
        tmp_path,
        [
            user_line("main task", timestamp=T0, uuid="m1", parentUuid=None, sessionId="s-1"),
            sidechain("user", "a1", None, "task A", timestamp=T1),
            sidechain("user", "b1", None, "task B", timestamp=T1),
            sidechain("assistant", "a2", "a1", "msg_a", [text("A part 1")], usage=usage(10, 3)),
            sidechain("assistant", "b2", "b1", "msg_b", [text("B answer")], usage=usage(20, 7)),
            sidechain("assistant", "a3", "a2", "msg_a", [text("A part 2")], usage=usage(10, 40)),
            assistant_line("msg_main", [text("main answer")], usage=usage(1, 1), uuid="m2", parentUuid="m1"),
        ],
    )

    assert [t.agent_key for t in transcript.subagents] == ["a1", "b1"]
    first, second = transcript.subagents
    assert first.messages == [
        {"role": "user", "content": "task A"},
        {"role": "assistant", "content": "A part 1\nA part 2"},
    ]
    assert first.usage == ClaudeUsage(tokens_in=10, tokens_out=40, cache_read=0, cache_write=0)
    assert second.usage == ClaudeUsage(tokens_in=20, tokens_out=7, cache_read=0, cache_write=0)
    assert [m["content"] for m in transcript.messages] == ["main task", "main answer"]
    assert transcript.usage == ClaudeUsage(tokens_in=1, tokens_out=1, cache_read=0, cache_write=0)
    assert transcript.session_id == "s-1"


def test_agent_files_beside_and_under_the_session_are_its_sub_agents(tmp_path: Path) -> None:
    from rollout_assets.sources.claude import subagent_conversations

    session = write_transcript(
        tmp_path / "s-1.jsonl", [user_line("main", timestamp=T0, uuid="m1", sessionId="s-1")]
    )
    # Beside the session (2.0.x): every line a sidechain line with agentId and the session's id.
    write_transcript(
        tmp_path / "agent-aaa.jsonl",
        [
            sidechain("user", "x1", None, "beside task", agentId="aaa"),
            sidechain("assistant", "x2", "x1", "msg_x", [text("done")], usage=usage(3, 4), agentId="aaa"),
        ],
    )
    # Another session's agent file is not this one's.
    other = sidechain("user", "y1", None, "other", agentId="bbb")
    other["sessionId"] = "s-2"
    write_transcript(tmp_path / "agent-bbb.jsonl", [other])
    # In the session's own folder (2.1.x): <session id>/subagents/agent-<id>.jsonl.
    (tmp_path / "s-1" / "subagents").mkdir(parents=True)
    write_transcript(
        tmp_path / "s-1" / "subagents" / "agent-ccc.jsonl",
        [sidechain("user", "z1", None, "nested task", agentId="ccc")],
    )
    listed = [read_transcript(p) for p in sorted(tmp_path.glob("*.jsonl"))]
    main = next(t for t in listed if t.path == session)

    found = subagent_conversations(main, listed)

    assert [(t.path.name, t.agent_key, t.messages[0]["content"]) for t in found] == [
        ("agent-aaa.jsonl", "x1", "beside task"),
        ("agent-ccc.jsonl", "z1", "nested task"),
    ]
    assert found[0].usage.tokens_out == 4


# ---------------------------------------------------------------------------
# Repeated lines: Claude Code can append a line it already wrote (same uuid) to the same file
# ---------------------------------------------------------------------------


def test_a_repeated_assistant_block_line_adds_its_blocks_once(tmp_path: Path) -> None:
    # Right after its original, the repeat continues the same API message id.
    hello = assistant_line("msg_1", [text("hello")], usage=usage(10, 2), uuid="a1", parentUuid="u1")
    ls_call = tool_use("toolu_1", "Bash", {"command": "ls"})
    ls = assistant_line("msg_1", [ls_call], usage=usage(10, 5), uuid="a2", parentUuid="a1")
    transcript = parse(tmp_path, [user_line("task", uuid="u1"), hello, hello, ls, ls])

    assert transcript.messages == [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "hello",
            "tool_calls": [call("toolu_1", "Bash", '{"command":"ls"}')],
        },
    ]
    assert (transcript.main_thread_lines, transcript.usage.tokens_out) == (3, 5)


def test_a_replayed_user_and_assistant_pair_gives_its_messages_once(tmp_path: Path) -> None:
    # A reopened session appends lines already in the file again, with their uuids and times.
    ask = user_line("task", timestamp=T0, uuid="u1")
    answer = assistant_line(
        "msg_1", [text("done")], usage=usage(4, 1), timestamp=T1, uuid="a1", parentUuid="u1"
    )
    more = user_line("and the docs?", timestamp=T2, uuid="u2", parentUuid="a1")
    transcript = parse(tmp_path, [ask, answer, more, ask, answer])

    assert transcript.messages == [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "and the docs?"},
    ]
    assert (transcript.main_thread_lines, transcript.ended_at) == (3, T2)


def test_a_repeated_sidechain_line_gives_its_conversation_and_messages_once(tmp_path: Path) -> None:
    root = sidechain("user", "s1", None, "sub task", timestamp=T1)
    answer = sidechain("assistant", "s2", "s1", "msg_s", [text("sub answer")], usage=usage(6, 2))
    transcript = parse(tmp_path, [user_line("main", timestamp=T0, uuid="m1"), root, answer, answer, root])

    assert [(t.agent_key, t.messages) for t in transcript.subagents] == [
        ("s1", [{"role": "user", "content": "sub task"}, {"role": "assistant", "content": "sub answer"}])
    ]


def test_a_repeated_partial_usage_line_does_not_replace_the_final_usage(tmp_path: Path) -> None:
    # 1.0.x: an earlier block line carries a partial output count; appended again after the
    # message's last line, it would otherwise be the "last" usage of its id.
    partial = assistant_line("msg_1", [text("looking")], usage=usage(4, 1), uuid="a1")
    final = assistant_line("msg_1", [text("found it")], usage=usage(4, 245), uuid="a2", parentUuid="a1")
    transcript = parse(tmp_path, [partial, final, partial])

    assert (transcript.usage.tokens_out, transcript.messages) == (
        245,
        [{"role": "assistant", "content": "looking\nfound it"}],
    )


def test_a_line_repeated_without_a_uuid_is_read_again(tmp_path: Path) -> None:
    # Nothing says such a line was written twice rather than said twice.
    twice = [user_line("again"), user_line("again"), user_line("x", uuid=7), user_line("x", uuid=7)]
    transcript = parse(tmp_path, twice)

    assert [m["content"] for m in transcript.messages] == ["again", "again", "x", "x"]
