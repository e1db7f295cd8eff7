"""Shared helpers of the crash-safety and concurrency tests: a round big enough that its
backfill takes a second or two, `rollout-assets backfill` started as a real process, and the
files a ledger writer leaves beside OUT (`.OUT.<token>.tmp`, `.OUT.segment-….tmp`,
`.OUT.lock`), and a file-size limit for a child process."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rollout_assets.demo import DemoLayout, RoundSpec, write_demo

# 17 campaigns x 48 cells = 816 cells, 3 worker sessions each of 10 steps: 3,280 lines, ~28 MB
# of ledger; about 1.2 s of backfill on two cores (written in ~3 s).
BIG_SPEC = RoundSpec(
    name="big-round",
    instances=16,
    reps=3,
    generations=4,
    candidates_per_generation=4,
    workers_per_cell=3,
    steps_per_session=10,
    edge_cases=False,
    seed=3,
)
CLI = str(Path(sys.executable).parent / "rollout-assets")
OLD_LEDGER = b'{"the previous ledger": "must survive byte for byte"}\n'


def write_big_round(root: Path) -> DemoLayout:
    return write_demo(root, rounds=[BIG_SPEC])


def backfill_command(layout: DemoLayout, ledger: Path, *extra: str) -> list[str]:
    return [
        CLI,
        "backfill",
        str(layout.rounds[0]),
        str(ledger),
        "--opencode-db",
        str(layout.opencode_db),
        "--claude-projects",
        str(layout.claude_projects_dir),
        *extra,
    ]


def start_backfill(layout: DemoLayout, ledger: Path, stdout: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(stdout, "wb") as sink:
        return subprocess.Popen(backfill_command(layout, ledger, *extra), stdout=sink, stderr=subprocess.PIPE)


def temp_files(ledger: Path) -> dict[str, int]:
    """The writer's temp files beside `ledger` (its own and its workers' segments): name -> size."""
    found = {}
    for entry in os.scandir(ledger.parent):
        if entry.name.startswith(f".{ledger.name}.") and entry.name.endswith(".tmp"):
            try:
                found[entry.name] = entry.stat().st_size
            except FileNotFoundError:
                pass
    return found


def lock_file(ledger: Path) -> Path:
    return ledger.parent / f".{ledger.name}.lock"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0, interval: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text` (e.g. a unique ledger path)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != b"Z":
            pids.append(int(name))
    return pids


def ledger_line_count(ledger: Path) -> int:
    with open(ledger, "rb") as handle:
        return sum(1 for _ in handle)


def file_size_limit(limit: int) -> Callable[[], None]:
    """For a child process (`preexec_fn`): files it, and the workers it forks, write cannot grow
    past `limit` bytes. Writing beyond fails with EFBIG ("File too large"), where a full disk
    fails with ENOSPC: a real error of the kernel at the same calls. SIGXFSZ, which would kill
    the process, is ignored."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply
