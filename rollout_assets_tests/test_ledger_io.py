"""The ledger file API on real files: atomic writes, byte-exact lines, loud reads."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.ledger import (
    LedgerReadError,
    LedgerValidationError,
    LedgerWriter,
    RolloutLine,
    WriterBusyError,
    read_ledger,
    read_ledger_dicts,
    serialize_line,
    write_ledger,
)
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line
from rollout_assets_tests.ledger_processes import file_size_limit

SUPERVISOR_ID = "5b0c6f1e-6d3a-5a8e-9a53-2f9d8c1b7e01"
WORKER_ID = "9d4e2a70-1c3b-5f6d-8e9a-0b1c2d3e4f50"


def folder_entries(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


def existing_ledger(tmp_path: Path) -> tuple[Path, bytes]:
    """A ledger already on disk, and its exact bytes."""
    path = tmp_path / "rollouts.jsonl"
    write_ledger(path, [sample_line()])
    return path, path.read_bytes()


def test_round_trip_gives_back_the_same_dicts(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    lines = [sample_line(), sample_worker_line()]

    count = write_ledger(path, lines)

    assert count == 2
    assert list(read_ledger_dicts(path)) == lines


def test_read_ledger_yields_models(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    write_ledger(path, [sample_line(), sample_worker_line()])

    rollouts = list(read_ledger(path))

    assert all(isinstance(rollout, RolloutLine) for rollout in rollouts)
    assert [rollout.rollout_id for rollout in rollouts] == [SUPERVISOR_ID, WORKER_ID]


def test_file_holds_one_compact_line_per_rollout_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    lines = [sample_line(), sample_worker_line()]

    write_ledger(path, lines)

    expected = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    assert path.read_text(encoding="utf-8") == expected


def test_key_order_of_the_dict_is_preserved() -> None:
    line = sample_line()
    reordered = {key: line[key] for key in reversed(list(line))}

    text = serialize_line(reordered)

    assert list(json.loads(text)) == list(reversed(list(line)))
    assert text.startswith('{"provenance":{"captured_at":"2025-01-15T10:30:00.000Z"')


def test_non_ascii_is_written_as_utf8_not_escaped(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    line = sample_worker_line()
    line["messages"][0]["content"] = "Corrige le test échoué — 修复 ✓"

    write_ledger(path, [line])

    raw = path.read_bytes()
    assert "Corrige le test échoué — 修复 ✓".encode() in raw
    assert b"\\u" not in raw


def test_serialize_line_has_no_trailing_newline() -> None:
    assert not serialize_line(sample_line()).endswith("\n")


def test_serialize_line_names_the_rollout_of_an_invalid_line() -> None:
    line = sample_line(role="reviewer")

    with pytest.raises(LedgerValidationError) as caught:
        serialize_line(line)

    message = str(caught.value)
    assert message.startswith(f"rollout '{SUPERVISOR_ID}' is not a valid tangle.rollout.v1 line: ")
    assert "role\n  Input should be 'agent'" in message


def test_serialize_line_rejects_a_model_instance_nested_in_the_dict() -> None:
    line = sample_line()
    line["task"] = RolloutLine.model_validate(sample_line()).task

    with pytest.raises(LedgerValidationError) as caught:
        serialize_line(line)

    assert str(caught.value) == (
        f"rollout '{SUPERVISOR_ID}' is not plain JSON: Object of type Task is not JSON serializable"
    )


def test_empty_ledger_is_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"

    count = write_ledger(path, [])

    assert count == 0
    assert path.read_bytes() == b""
    assert list(read_ledger(path)) == []


def test_writer_creates_missing_parent_folders(tmp_path: Path) -> None:
    path = tmp_path / "ledgers" / "round-0007" / "rollouts.jsonl"

    write_ledger(path, [sample_line()])

    assert folder_entries(path.parent) == ["rollouts.jsonl"]


def test_writer_replaces_an_existing_ledger(tmp_path: Path) -> None:
    path, _ = existing_ledger(tmp_path)

    write_ledger(path, [sample_worker_line()])

    assert [line["rollout_id"] for line in read_ledger_dicts(path)] == [WORKER_ID]
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_writer_counts_lines_and_streams_to_a_hidden_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"

    with LedgerWriter(path) as writer:
        writer.write(sample_line())
        writer.write(sample_worker_line())
        entries_while_writing = folder_entries(tmp_path)

    assert writer.count == 2
    # While writing: the hidden temp file and the writer's lock; afterwards only the ledger.
    temp_files = [name for name in entries_while_writing if name.endswith(".tmp")]
    assert sorted(set(entries_while_writing) - set(temp_files)) == [".rollouts.jsonl.lock"]
    assert len(temp_files) == 1
    assert temp_files[0].startswith(".rollouts.jsonl.")
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def _encoded_source(folder: Path) -> tuple[Path, list[bytes]]:
    """A file of three encoded ledger lines (as a worker stage or segment holds them)."""
    lines = [serialize_line(sample_worker_line(rollout_id=f"worker-{index}")).encode() + b"\n" for index in range(3)]
    source = folder / "segment.jsonl"
    source.write_bytes(b"".join(lines))
    return source, lines


def _append_middle_line_between_writes(path: Path, source: Path, lines: list[bytes]) -> None:
    with LedgerWriter(path) as writer, open(source, "rb") as handle:
        handle.seek(5)
        writer.write(sample_line())
        writer.append_range(handle, len(lines[0]), len(lines[1]), 1)
        writer.write(sample_line(rollout_id="after"))
        assert handle.tell() == 5  # the source's own position is left alone
    assert writer.count == 3


def test_append_range_puts_the_copied_lines_between_the_written_ones(tmp_path: Path) -> None:
    source, lines = _encoded_source(tmp_path)
    path = tmp_path / "rollouts.jsonl"

    _append_middle_line_between_writes(path, source, lines)

    assert path.read_bytes().splitlines(keepends=True) == [
        serialize_line(sample_line()).encode() + b"\n",
        lines[1],
        serialize_line(sample_line(rollout_id="after")).encode() + b"\n",
    ]


def test_append_range_copies_through_a_buffer_across_filesystems(tmp_path: Path, other_filesystem: Path) -> None:
    # The kernel refuses a copy between two filesystems (tmpfs to the test folder's): the
    # writer must fall back to reading and writing, with the same result.
    source, lines = _encoded_source(other_filesystem)
    across, local = tmp_path / "across.jsonl", tmp_path / "local.jsonl"
    _append_middle_line_between_writes(across, source, lines)
    local_source, _ = _encoded_source(tmp_path)
    _append_middle_line_between_writes(local, local_source, lines)

    assert across.read_bytes() == local.read_bytes()
    assert across.read_bytes().splitlines(keepends=True)[1] == lines[1]


def test_append_range_past_the_end_of_the_source_fails_and_writes_nothing(tmp_path: Path) -> None:
    path, original = existing_ledger(tmp_path)
    source, lines = _encoded_source(tmp_path)
    size = sum(map(len, lines))

    with (
        pytest.raises(ValueError, match=f"segment.jsonl: {size} bytes expected from offset 1, only {size - 1}"),
        LedgerWriter(path) as writer,
        open(source, "rb") as handle,
    ):
        writer.append_range(handle, 1, size, 3)

    assert path.read_bytes() == original
    assert folder_entries(tmp_path) == ["rollouts.jsonl", "segment.jsonl"]


def test_bad_line_mid_stream_leaves_existing_ledger_untouched(tmp_path: Path) -> None:
    path, original = existing_ledger(tmp_path)
    bad_line = sample_worker_line(rollout_id="bad-1", generation="0")

    with pytest.raises(LedgerValidationError, match="^rollout 'bad-1' is not a valid"):
        write_ledger(path, [sample_worker_line(), bad_line, sample_line()])

    assert path.read_bytes() == original
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_producer_exception_mid_stream_leaves_existing_ledger_untouched(tmp_path: Path) -> None:
    path, original = existing_ledger(tmp_path)

    def lines_then_crash() -> Iterator[dict[str, Any]]:
        yield sample_worker_line()
        raise RuntimeError("opencode store vanished")

    with pytest.raises(RuntimeError, match="^opencode store vanished$"):
        write_ledger(path, lines_then_crash())

    assert path.read_bytes() == original
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_exception_inside_writer_block_leaves_no_file_behind(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"

    with pytest.raises(KeyboardInterrupt), LedgerWriter(path) as writer:
        writer.write(sample_line())
        raise KeyboardInterrupt

    assert folder_entries(tmp_path) == []


# Writes `count` records of about 1 KiB to the path given, in a child process.
_WRITE_RECORDS = """
import sys
from rollout_assets.ledger import AtomicJsonlWriter
with AtomicJsonlWriter(sys.argv[1]) as writer:
    for index in range(int(sys.argv[2])):
        writer.write({"index": index, "pad": "x" * 1000})
"""


@pytest.mark.parametrize(
    ("count", "where"),
    [
        (200, "a write mid-stream"),  # the buffer is flushed, and fails, while lines are written
        (5, "the final flush"),  # everything is still buffered when the writer commits
    ],
)
def test_a_disk_that_fills_up_leaves_the_old_ledger_and_no_temp_or_lock_file(
    tmp_path: Path, count: int, where: str
) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"old": 1}\n')

    result = subprocess.run(
        [sys.executable, "-c", _WRITE_RECORDS, str(path), str(count)],
        preexec_fn=file_size_limit(2048),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 1, f"{where}: {result.stderr}"
    # The disk's error is the one reported, not a second one from cleaning up.
    assert result.stderr.rstrip().splitlines()[-1] == "OSError: [Errno 27] File too large"
    assert path.read_bytes() == b'{"old": 1}\n'
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_write_outside_with_block_is_refused(tmp_path: Path) -> None:
    writer = LedgerWriter(tmp_path / "rollouts.jsonl")

    with pytest.raises(RuntimeError, match="outside its `with` block"):
        writer.write(sample_line())

    assert folder_entries(tmp_path) == []


def write_raw(tmp_path: Path, raw: bytes) -> Path:
    """A ledger file with exactly these bytes: the first line is valid, the rest is `raw`."""
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(serialize_line(sample_line()).encode() + b"\n" + raw)
    return path


def read_error(path: Path) -> str:
    with pytest.raises(LedgerReadError) as caught:
        list(read_ledger_dicts(path))
    return str(caught.value)


def test_read_reports_invalid_json_with_path_and_line(tmp_path: Path) -> None:
    path = write_raw(tmp_path, b'{"schema": "tangle.rollout.v1",\n')

    assert read_error(path) == (
        f"{path}:2: invalid JSON: Expecting property name enclosed in double quotes at column 32"
    )


def test_read_reports_invalid_utf8_with_path_and_line(tmp_path: Path) -> None:
    path = write_raw(tmp_path, b'{"run_id": "\xff"}\n')

    assert read_error(path) == (
        f"{path}:2: invalid UTF-8: 'utf-8' codec can't decode byte 0xff in position 12: invalid start byte"
    )


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_read_reports_nan_and_infinity_literals(tmp_path: Path, literal: str) -> None:
    line = serialize_line(sample_line()).replace('"usd":0.84', f'"usd":{literal}')
    path = write_raw(tmp_path, line.encode() + b"\n")

    assert read_error(path) == f"{path}:2: invalid JSON: {literal} is not valid JSON"


def test_read_reports_a_missing_final_newline(tmp_path: Path) -> None:
    path = write_raw(tmp_path, serialize_line(sample_worker_line()).encode())

    assert read_error(path) == f"{path}:2: missing final newline (the last line is cut off)"


def test_read_reports_a_blank_line(tmp_path: Path) -> None:
    path = write_raw(tmp_path, b"\n" + serialize_line(sample_worker_line()).encode() + b"\n")

    assert read_error(path) == f"{path}:2: blank line"


def test_read_reports_a_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write_raw(tmp_path, b"[1, 2]\n")

    assert read_error(path) == f"{path}:2: a line must be a JSON object, not list"


def test_read_reports_an_invalid_line_with_its_rollout_id(tmp_path: Path) -> None:
    line = serialize_line(sample_worker_line()).replace('"role":"worker"', '"role":"reviewer"')
    path = write_raw(tmp_path, line.encode() + b"\n")

    message = read_error(path)

    assert message.startswith(f"{path}:2: rollout '{WORKER_ID}' is not a valid tangle.rollout.v1 line: ")
    assert "role\n  Input should be 'agent'" in message


def test_read_yields_good_lines_before_the_bad_one(tmp_path: Path) -> None:
    path = write_raw(tmp_path, b"not json\n")
    reader = read_ledger_dicts(path)

    assert next(reader)["rollout_id"] == SUPERVISOR_ID
    with pytest.raises(LedgerReadError, match=r":2: invalid JSON"):
        next(reader)


def test_lone_surrogate_is_written_as_an_escape_and_reads_back(tmp_path):
    # A truncated emoji escape in a tool output parses to a lone surrogate, which has no UTF-8 form.
    line = sample_line()
    line["outcome"]["metrics"]["tool_output"] = "cut \ud83d here, café"
    path = tmp_path / "ledger.jsonl"
    write_ledger(path, [line])
    raw = path.read_bytes()
    assert b"\\ud83d" in raw
    assert next(iter(read_ledger_dicts(path)))["outcome"]["metrics"]["tool_output"] == "cut \ud83d here, café"


def test_second_writer_of_the_same_path_fails_at_once_while_the_first_writes(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    with LedgerWriter(path) as first:
        first.write(sample_line())
        with pytest.raises(WriterBusyError, match="being written by another process"), LedgerWriter(path):
            pass
    assert [line["rollout_id"] for line in read_ledger_dicts(path)] == [sample_line()["rollout_id"]]
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    write_ledger(path, [sample_line()])
    (tmp_path / ".rollouts.jsonl.deadbeefdeadbeef.tmp").write_bytes(b'{"half a li')
    write_ledger(path, [sample_line()])
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_segments_of_a_killed_parallel_write_are_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    (tmp_path / ".rollouts.jsonl.segment-0badc0de-000003.tmp").write_bytes(b'{"half a li')
    (tmp_path / ".rollouts.jsonl.segment-0badc0de-1000000.tmp").write_bytes(b'{"half a li')
    write_ledger(path, [sample_line()])
    assert folder_entries(tmp_path) == ["rollouts.jsonl"]


def test_a_writer_leaves_the_files_of_a_concurrent_writer_of_a_longer_name_alone(tmp_path: Path) -> None:
    # `.rollouts.jsonl.1.<token>.tmp` starts like a temp file of rollouts.jsonl, but is the
    # file of a writer of rollouts.jsonl.1, which holds another lock and is still writing.
    with LedgerWriter(tmp_path / "rollouts.jsonl.1") as longer:
        longer.write(sample_line(rollout_id="longer-1"))
        with LedgerWriter(tmp_path / "rollouts.jsonl") as shorter:
            shorter.write(sample_line(rollout_id="shorter"))
        longer.write(sample_line(rollout_id="longer-2"))

    assert [line["rollout_id"] for line in read_ledger_dicts(tmp_path / "rollouts.jsonl.1")] == ["longer-1", "longer-2"]
    assert [line["rollout_id"] for line in read_ledger_dicts(tmp_path / "rollouts.jsonl")] == ["shorter"]
    assert folder_entries(tmp_path) == ["rollouts.jsonl", "rollouts.jsonl.1"]


@pytest.mark.parametrize(
    "name",
    [
        ".rollouts.jsonl.1.deadbeefdeadbeef.tmp",  # a writer of rollouts.jsonl.1
        ".rollouts.jsonl.segment-0badc0de-000003.deadbeefdeadbeef.tmp",  # of rollouts.jsonl.segment-…
        ".rollouts.jsonl.segment-0badc0de.deadbeefdeadbeef.tmp",
        ".rollouts.jsonl.deadbeef.tmp",  # no token of this writer's shape
        ".rollouts.jsonl.summary.tmp",
    ],
)
def test_temp_files_of_other_paths_are_not_taken_for_stale_ones(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"someone else's")
    write_ledger(tmp_path / "rollouts.jsonl", [sample_line()])
    assert (tmp_path / name).read_bytes() == b"someone else's"
