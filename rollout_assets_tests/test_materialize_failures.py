"""`rollout-assets materialize` when the machine, not the round, stops it: a full disk, a file
past the size limit. Real processes on real rounds; each failure is one sentence."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout_assets_tests.dagster_rounds import SMALL_SPEC, write_rounds
from rollout_assets_tests.test_assets import PROJECT_DIR, _cli_env, _dagster_home
from rollout_assets_tests.test_ledger_io import file_size_limit

pytestmark = pytest.mark.slow

OTHER_SPEC = dataclasses.replace(SMALL_SPEC, name="round-003")
NO_ROOM = "the disk it writes to is full ([Errno 28] No space left on device)"
TOO_LARGE = (
    "a file it writes would grow past the file-size limit of this process (ulimit -f) "
    "or of its filesystem ([Errno 27] File too large)"
)


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


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 24 KiB filesystem: room for a round's first stage files, not for a ledger."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(folder)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command to make a small filesystem with")
    if mounted.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


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

    completed = materialize(env, preexec_fn=file_size_limit(8192))  # a round's ledger is ~13 KB

    assert completed.returncode == 1, completed.stderr[-3000:]
    assert_no_stack_trace(completed)
    for key in (SMALL_SPEC.name, OTHER_SPEC.name):
        section = completed.stdout.split(f"=== round {key}: ")[1].split("===")[0]
        assert section.startswith("FAILED (run ")
        assert step_failures(section) == [f"  step rollout_ledger failed: {TOO_LARGE}"]
        assert "  ledger: not written by this run (any earlier ledger of the round stays as it was)\n" in section
        assert not (ledger_root / key / "rollout-ledger.jsonl").exists()
