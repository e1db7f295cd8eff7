"""`rollout-assets materialize` when the machine, not the round, stops it: a full disk, a file
past the size limit, Ctrl-C. Real processes on real rounds; each failure is one sentence."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout_assets_tests.dagster_rounds import SMALL_SPEC, write_rounds
from rollout_assets_tests.dagster_dev import WITH_DEFAULT_SIGNALS
from rollout_assets_tests.test_assets import PROJECT_DIR, _cli_env, _dagster_home
from rollout_assets_tests.ledger_processes import file_size_limit

pytestmark = pytest.mark.slow

OTHER_SPEC = dataclasses.replace(SMALL_SPEC, name="round-003")
NO_ROOM = "the disk it writes to is full ([Errno 28] No space left on device)"
TEMPORARY_INSTANCE = "DAGSTER_HOME is not set: using a temporary instance (nothing is kept for the UI)"


def environment(tmp_path: Path, ledger_root: Path, *, persistent: bool) -> dict[str, str]:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC, OTHER_SPEC))
    env = _cli_env(tmp_path / "dagster_home", layout, ledger_root)
    if persistent:
        _dagster_home(tmp_path / "dagster_home")
    else:
        del env["DAGSTER_HOME"]  # a temporary instance: nothing written but the ledgers
    return env


def materialize(env: dict[str, str], **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", "materialize"],
        check=False, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300, **options,
    )  # fmt: skip


def step_failures(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("  step ")]


def assert_no_stack_trace(completed: subprocess.CompletedProcess[str]) -> None:
    output = completed.stdout + completed.stderr
    assert "Stack Trace" not in output and "Traceback" not in output, output[-3000:]


def test_a_full_disk_fails_each_step_it_stops_in_one_sentence(tmp_path: Path, small_tmpfs: Path) -> None:
    completed = materialize(environment(tmp_path, small_tmpfs / "ledgers", persistent=True))

    assert completed.returncode == 1, completed.stderr[-3000:]
    assert_no_stack_trace(completed)
    round_section = completed.stdout.split("=== rounds summary")[0]
    failures = step_failures(round_section)
    assert failures, completed.stdout
    for failure in failures:
        assert re.fullmatch(rf"  step \w+ failed: {re.escape(NO_ROOM)}", failure), failure
    summary_section = completed.stdout.split("=== rounds summary: FAILED")[1]
    assert "No space left on device" in step_failures(summary_section)[0]


def test_a_file_past_the_size_limit_fails_its_step_in_one_sentence(tmp_path: Path) -> None:
    # A temporary instance: the limit would stop the persistent instance's own database first.
    ledger_root = tmp_path / "ledgers"
    env = environment(tmp_path, ledger_root, persistent=False)

    # The first file past 8 KB is the private snapshot of the opencode store (a round's ledger
    # is ~13 KB): the store is readable, so the round fails naming the snapshot, and none of
    # its sessions becomes a gap line saying the store could not be read.
    completed = materialize(env, preexec_fn=file_size_limit(8192))

    assert completed.returncode == 1, completed.stderr[-3000:]
    assert_no_stack_trace(completed)
    snapshot_too_large = (
        rf"  step worker_sessions failed: {re.escape(env['OPENCODE_DB'])}: cannot write its snapshot "
        r"\S+/rollout-assets-opencode-\w+/opencode\.db: File too large"
    )
    for key in (SMALL_SPEC.name, OTHER_SPEC.name):
        section = completed.stdout.split(f"=== round {key}: ")[1].split("===")[0]
        assert section.startswith("FAILED (run ")
        failures = step_failures(section)
        assert len(failures) == 1 and re.fullmatch(snapshot_too_large, failures[0]), section
        assert "  ledger: not written by this run (any earlier ledger of the round stays as it was)\n" in section
        assert not (ledger_root / key / "rollout-ledger.jsonl").exists()


# Put into the command's process: the manifest stage says it has started, then takes a minute.
_SLOW_MANIFEST = """
import time
from pathlib import Path
from rollout_assets.defs.assets import manifest as assets
real_write_manifest = assets.write_manifest
def slow_write_manifest(*args, **kwargs):
    Path({marker!r}).touch()
    time.sleep(60)
    return real_write_manifest(*args, **kwargs)
assets.write_manifest = slow_write_manifest
"""

# What Dagster's compute-log helper processes (`watch_orphans.py`, children of the command on a
# persistent instance) print when the terminal's Ctrl-C reaches them too: their own trace, not the
# command's. Two of them write at once, so their lines interleave, even within a line. A frame
# of any other file would stay, and fail the test.
_COMPUTE_LOG_WATCHER_TRACE = re.compile(
    r"Traceback \(most recent call last\):"
    r'| *File "[^"]*/watch_orphans\.py", line \d+, in <?\w+>?'
    r"| *watch\(sys\.argv\[1:\]\)| *time\.sleep\(1\)|KeyboardInterrupt"
)


def command_lines(stderr: str) -> list[str]:
    """stderr without the compute-log watchers' traces (and the blank lines they leave)."""
    return [line for line in _COMPUTE_LOG_WATCHER_TRACE.sub("", stderr).splitlines() if line.strip(" ^")]


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent-instance", "temporary-instance"])
def test_ctrl_c_stops_the_run_at_once_and_exits_130_without_the_summary(tmp_path: Path, persistent: bool) -> None:
    ledger_root = tmp_path / "ledgers"
    env = environment(tmp_path, ledger_root, persistent=persistent)
    marker = tmp_path / "manifest-started"
    program = (
        f"{_SLOW_MANIFEST.format(marker=str(marker))}\n"
        "import sys\nfrom rollout_assets.cli import main\nsys.exit(main(['materialize']))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", WITH_DEFAULT_SIGNALS, sys.executable, "-c", program],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # the signal goes to the whole group, as a terminal's Ctrl-C does
    )  # fmt: skip
    try:
        while not marker.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.01)
        # Dagster starts its compute-log watchers with the step; a Ctrl-C reaching one while its
        # Python is still starting prints Python's own fatal error, not the command's. The step
        # sleeps a minute: a second more lets them start.
        time.sleep(1)
        interrupted_at = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - interrupted_at
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 130, stderr[-3000:]
    assert took < 20, f"the command went on for {took:.1f} s after Ctrl-C"
    *own_lines, last = command_lines(stderr)
    assert own_lines == ([] if persistent else [TEMPORARY_INSTANCE])
    assert re.fullmatch(
        rf"rollout-assets: interrupted during round {SMALL_SPEC.name} \(run [0-9a-f-]{{36}}\); "
        "no further round and no rounds summary were run",
        last,
    ), stderr
    assert stdout == ""  # no report of the stopped run, nor of a round or a summary after it
    assert not (ledger_root / OTHER_SPEC.name).exists()
    assert not (ledger_root / "rounds-summary.parquet").exists()
