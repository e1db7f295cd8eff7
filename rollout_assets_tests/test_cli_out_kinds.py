"""`rollout-assets backfill` into an OUT that is not a regular file: a FIFO, a character device,
a symlink to one of them or to a regular file, and the kinds it refuses. Real processes.

The devices are private nodes made in `tmp_path` (`mknod`, as root), never /dev's own: a
regression would otherwise replace the machine's /dev/null or /dev/stdout with a file.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_assets.demo import DemoLayout, write_demo
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets_tests.backfill_runs import backfill, without_captured_at
from rollout_assets_tests.dagster_dev import WITH_DEFAULT_SIGNALS
from rollout_assets_tests.test_cli import OLD_LEDGER, SMALL_ROUND, backfill_args

# The device numbers of /dev/null (1, 3), /dev/full (1, 7) and the first loop device (7, 0) on Linux.
NULL_DEVICE = os.makedev(1, 3)
FULL_DEVICE = os.makedev(1, 7)
LOOP_DEVICE = os.makedev(7, 0)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("out-kinds-demo"), rounds=[SMALL_ROUND])


@pytest.fixture(scope="module")
def expected_lines(demo: DemoLayout) -> list[dict]:
    lines = backfill(demo.rounds[0], opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir).lines
    return without_captured_at(lines)


def cli(*args: str | Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The command with a private temporary folder, which must be empty again afterwards: the
    ledger staged there for a FIFO or device is removed, whatever the outcome."""
    temp_folder = tmp_path / "tmpdir"
    temp_folder.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", *map(str, args)],
        env={**os.environ, "TMPDIR": str(temp_folder)},
        check=False,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert list(temp_folder.iterdir()) == []
    temp_folder.rmdir()
    return result


def make_node(path: Path, kind: int, device: int = 0) -> Path:
    try:
        os.mknod(path, kind | 0o666, device)
    except PermissionError:
        pytest.skip(f"making a device node needs root (mknod {path})")
    return path


@pytest.fixture
def fifo_reader(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A FIFO with a reader process already waiting on it; the reader's stdout is what it read."""
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        yield fifo, reader
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def read_by(reader: subprocess.Popen[bytes]) -> bytes:
    # A reader still waiting after the backfill exited would wait for ever: the timeout says so.
    read, _ = reader.communicate(timeout=30)
    assert reader.returncode == 0
    return read


def parsed(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    copy = tmp_path_factory.mktemp("read") / "read.jsonl"
    copy.write_bytes(raw)
    return without_captured_at(list(read_ledger_dicts(copy)))


def test_backfill_into_a_fifo_gives_its_reader_the_whole_ledger(
    demo: DemoLayout,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    fifo_reader: tuple[Path, subprocess.Popen[bytes]],
    expected_lines: list[dict],
) -> None:
    fifo, reader = fifo_reader

    result = cli(*backfill_args(demo, demo.rounds[0], fifo), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    assert parsed(read_by(reader), tmp_path_factory) == expected_lines
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert result.stdout.endswith(f"rollout ledger → {fifo} ({len(expected_lines)} lines)\n")
    assert result.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.fifo"]


def test_backfill_into_a_symlink_to_a_fifo_keeps_the_link_and_the_fifo(
    demo: DemoLayout,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    fifo_reader: tuple[Path, subprocess.Popen[bytes]],
    expected_lines: list[dict],
) -> None:
    fifo, reader = fifo_reader
    link = tmp_path / "out.jsonl"
    link.symlink_to(fifo.name)

    result = cli(*backfill_args(demo, demo.rounds[0], link), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    assert parsed(read_by(reader), tmp_path_factory) == expected_lines
    assert os.readlink(link) == fifo.name
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert result.stdout.endswith(f"rollout ledger → {link} ({len(expected_lines)} lines)\n")


def test_backfill_into_a_character_device_leaves_it_a_character_device(
    demo: DemoLayout, tmp_path: Path, expected_lines: list[dict]
) -> None:
    null = make_node(tmp_path / "null", stat.S_IFCHR, NULL_DEVICE)

    result = cli(*backfill_args(demo, demo.rounds[0], null), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    node = os.lstat(null)
    assert stat.S_ISCHR(node.st_mode) and node.st_rdev == NULL_DEVICE
    assert result.stdout.endswith(f"rollout ledger → {null} ({len(expected_lines)} lines)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_backfill_into_its_own_stdout_keeps_the_report_out_of_the_ledger(
    demo: DemoLayout, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, expected_lines: list[dict]
) -> None:
    """`backfill OUTDIR /dev/stdout | consumer`: stdout holds the ledger alone, the stats and the
    ledger line go to stderr. The link is a private /dev/stdout (which links to the same place)."""
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")

    result = cli(*backfill_args(demo, demo.rounds[0], stdout), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    assert parsed(result.stdout.encode(), tmp_path_factory) == expected_lines
    assert result.stderr.endswith(f"rollout ledger → {stdout} ({len(expected_lines)} lines)\n")
    assert result.stderr.startswith("{\n")
    assert os.readlink(stdout) == "/proc/self/fd/1"


def test_backfill_into_a_symlink_to_a_regular_file_writes_the_file_and_keeps_the_link(
    demo: DemoLayout, tmp_path: Path, expected_lines: list[dict]
) -> None:
    """The ledger is renamed onto the file the link leads to; the link stays a link (a
    /dev/stdout redirected to a file is such a link, and must never be replaced)."""
    target = tmp_path / "target.jsonl"
    target.write_bytes(OLD_LEDGER)
    link = tmp_path / "out.jsonl"
    link.symlink_to(target.name)

    result = cli(*backfill_args(demo, demo.rounds[0], link), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    assert os.readlink(link) == target.name
    assert without_captured_at(list(read_ledger_dicts(target))) == expected_lines


def test_backfill_into_a_stdout_link_redirected_to_a_file_keeps_the_link(
    demo: DemoLayout, tmp_path: Path, expected_lines: list[dict]
) -> None:
    """`backfill OUTDIR /dev/stdout > file`: the file gets the ledger, the link stays (a private
    /dev/stdout, linking to the same place)."""
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    redirected = tmp_path / "redirected.jsonl"
    with open(redirected, "wb") as handle:
        result = subprocess.run(
            [sys.executable, "-m", "rollout_assets.cli", *map(str, backfill_args(demo, demo.rounds[0], stdout))],
            stdout=handle, stderr=subprocess.PIPE, text=True, check=False, cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert os.readlink(stdout) == "/proc/self/fd/1"
    assert without_captured_at(list(read_ledger_dicts(redirected))) == expected_lines


def test_a_failed_backfill_into_a_fifo_gives_its_waiting_reader_end_of_file(
    demo: DemoLayout, tmp_path: Path, fifo_reader: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    fifo, reader = fifo_reader
    missing_round = tmp_path / "no-such-round"

    result = cli(*backfill_args(demo, missing_round, fifo), tmp_path=tmp_path)

    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and str(missing_round) in result.stderr
    assert read_by(reader) == b""
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_device_that_refuses_the_ledger_exits_1_in_one_line(demo: DemoLayout, tmp_path: Path) -> None:
    full = make_node(tmp_path / "full", stat.S_IFCHR, FULL_DEVICE)  # every write: ENOSPC

    result = cli(*backfill_args(demo, demo.rounds[0], full), tmp_path=tmp_path)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"rollout-assets: error: ledger {full} not written in full: [Errno 28] No space left on device"
    ]
    assert result.stdout == ""
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_ctrl_c_while_the_fifo_has_no_reader_exits_130_in_one_line(demo: DemoLayout, tmp_path: Path) -> None:
    """The ledger is complete and staged; opening the FIFO waits for a reader that never comes."""
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    temp_folder = tmp_path / "tmpdir"
    temp_folder.mkdir()
    command = [sys.executable, "-c", WITH_DEFAULT_SIGNALS, sys.executable, "-m", "rollout_assets.cli"]
    process = subprocess.Popen(
        [*command, *map(str, backfill_args(demo, demo.rounds[0], fifo))],
        env={**os.environ, "TMPDIR": str(temp_folder)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to the whole group, as a terminal's Ctrl-C does
    )
    try:
        while not list(temp_folder.glob("rollout-assets-*/ledger.jsonl")):
            assert process.poll() is None, process.communicate()
            time.sleep(0.01)
        time.sleep(0.5)  # from the rename of the staged ledger to the open of the FIFO
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 130, stderr
    assert stderr.splitlines() == ["rollout-assets: interrupted; the ledger was not written, OUT is as it was"]
    assert stdout == ""
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert list(temp_folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["a block device", "a socket"])
def test_backfill_refuses_a_block_device_or_a_socket_at_out(demo: DemoLayout, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    listener = socket.socket(socket.AF_UNIX)
    try:
        if kind == "a block device":
            make_node(out, stat.S_IFBLK, LOOP_DEVICE)
        else:
            listener.bind(str(out))
        before = os.lstat(out)

        result = cli(*backfill_args(demo, demo.rounds[0], out), tmp_path=tmp_path)
    finally:
        listener.close()

    assert result.returncode == 2
    assert result.stderr.startswith("usage: rollout-assets backfill ")
    assert result.stderr.splitlines()[-1] == (
        f"rollout-assets: error: OUT {out} is {kind}: give a file path, a FIFO or a character device"
    )
    assert result.stdout == ""
    after = os.lstat(out)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
