"""The writer's memory does not grow with the ledger: a round of 100,000 lines is written with
about the peak of a round of 10,000 (each sample streamed into its log, never held)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rollout_assets.ledger import write_ledger
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line

# What a line's transcript adds: enough that holding 100,000 samples would take gigabytes.
TOOL_OUTPUT = "x" * 2_000


def _round_lines(count: int):
    """`count` lines of 8 candidates, a supervisor gap line and then 4 workers per cell."""
    for index in range(count):
        candidate = f"gen0-cand{index % 8}"
        if index % 5 == 0:
            line = sample_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"s{index}")), candidate_id=candidate)
        else:
            line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"w{index}")), candidate_id=candidate)
            line["messages"][2]["content"] = f"{index} {TOOL_OUTPUT}"
        line["task"]["instance_id"] = f"org__repo-{index // 5}"
        yield line


def _peak_mib(ledger: Path, out: Path) -> float:
    """The peak RSS of `rollout-assets inspect-logs` on one process (its own, from wait4)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rollout_assets.cli", "inspect-logs", str(ledger), str(out), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, process.stderr.read() if process.stderr else ""
    return usage.ru_maxrss / 1024


@pytest.mark.slow
def test_a_round_of_100000_lines_is_written_in_the_memory_of_one_of_10000(tmp_path: Path) -> None:
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_ledger(small, _round_lines(10_000))
    write_ledger(large, _round_lines(100_000))

    small_peak = _peak_mib(small, tmp_path / "small-logs")
    large_peak = _peak_mib(large, tmp_path / "large-logs")

    assert len(list((tmp_path / "large-logs").glob("*.eval"))) == 16
    # The index keeps 4 integers a line (about 3 MB more at 100,000 lines); a held sample would
    # cost kilobytes each, gigabytes in all.
    print(f"peak RSS: {small_peak:.0f} MiB at 10,000 lines, {large_peak:.0f} MiB at 100,000")
    assert large_peak - small_peak < 25, (small_peak, large_peak)
