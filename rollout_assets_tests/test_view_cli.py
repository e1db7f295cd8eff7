"""`rollout-assets inspect-logs` and `rollout-assets view`, run as a user runs them: real ledgers,
real processes, the real Inspect viewer answering on 127.0.0.1."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import psutil
import pytest
from inspect_ai.log import read_eval_log

from rollout_assets_tests.dataset_ledgers import cli
from rollout_assets_tests.inspect_ledgers import demo_ledgers, rewrite_line
from rollout_assets_tests.inspect_viewer import viewer


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return demo_ledgers(tmp_path_factory.mktemp("view-cli"))


def _rollout_assets(*args: object) -> list[str]:
    return [sys.executable, "-m", "rollout_assets.cli", *map(str, args)]


def test_inspect_logs_writes_the_logs_and_says_how_to_open_them(ledgers: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "logs"
    done = cli("inspect-logs", ledgers["round-001"], out)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  worker-baseline.eval: 12 samples (12 with a transcript, 0 gap lines; 12 scored, mean reward 0.833)" in lines
    assert lines[-2] == f"Inspect logs → {out} (96 samples in 17 logs)"
    assert lines[-1] == f"open them: inspect view --log-dir {out} --host 127.0.0.1"
    assert sum(len(read_eval_log(str(path)).samples) for path in out.glob("*.eval")) == 96


def test_inspect_logs_of_a_ledger_that_fails_to_read_is_one_line_and_writes_nothing(
    ledgers: dict[str, Path], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(ledgers["round-001"].read_bytes())
    rewrite_line(ledger, 7, "not json")

    done = cli("inspect-logs", ledger, tmp_path / "logs")

    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"rollout-assets: error: {ledger}:7: invalid JSON: Expecting value at column 1"]
    assert not (tmp_path / "logs").exists()
    missing = cli("inspect-logs", tmp_path / "nowhere.jsonl", tmp_path / "logs")
    assert (missing.returncode, len(missing.stderr.splitlines())) == (1, 1)
    assert "nowhere.jsonl: cannot read the ledger" in missing.stderr


def test_view_refuses_a_path_without_a_ledger_a_bad_port_and_a_taken_port(ledgers: dict[str, Path], tmp_path: Path) -> None:
    nothing = cli("view", tmp_path)
    assert (nothing.returncode, nothing.stderr.splitlines()) == (
        1,
        [f"rollout-assets: error: {tmp_path} holds no ledger: give a ledger file, a round's folder (holding "
         "rollout-ledger.jsonl) or a folder of round folders"],
    )  # fmt: skip
    assert cli("view", tmp_path, "--port", "0").returncode == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = cli("view", ledgers["round-001"].parent, "--port", port)
    assert (busy.returncode, busy.stderr.splitlines()) == (
        1, [f"rollout-assets: error: port {port} on 127.0.0.1 is taken: give another with --port"],
    )  # fmt: skip


def test_view_writes_missing_or_stale_logs_and_starts_the_viewer_on_loopback(
    ledgers: dict[str, Path], tmp_path: Path
) -> None:
    round_folder = tmp_path / "ledgers" / "round-001"
    round_folder.mkdir(parents=True)
    ledger = round_folder / "rollout-ledger.jsonl"
    ledger.write_bytes(ledgers["round-001"].read_bytes())

    with viewer(lambda port: _rollout_assets("view", round_folder, "--port", port), tmp_path / "first.log") as first:
        listed = first.listed_logs()
        listening = {c.laddr for c in psutil.Process(first.pid).net_connections() if c.status == "LISTEN"}
    output = (tmp_path / "first.log").read_text()
    assert f"Inspect logs of {ledger}: writing them into {round_folder / 'inspect-logs'} (no logs written yet)" in output
    assert len(listed) == 17 and "worker-baseline.eval" in listed
    assert {address.ip for address in listening} == {"127.0.0.1"}

    with viewer(lambda port: _rollout_assets("view", round_folder, "--port", port), tmp_path / "second.log"):
        pass
    assert f"Inspect logs of {ledger}: up to date in {round_folder / 'inspect-logs'}" in (tmp_path / "second.log").read_text()

    ledger.write_bytes(ledger.read_bytes())
    with viewer(lambda port: _rollout_assets("view", ledger, "--port", port), tmp_path / "third.log"):
        pass
    assert "(the ledger changed since they were written)" in (tmp_path / "third.log").read_text()


def test_view_of_a_folder_of_rounds_lists_every_rounds_logs(ledgers: dict[str, Path]) -> None:
    ledger_root = ledgers["round-001"].parent.parent

    with viewer(lambda port: _rollout_assets("view", ledger_root, "--port", port), ledger_root.parent / "root.log") as shown:
        listed = shown.listed_logs()

    assert {name.split("/")[0] for name in listed} == {"round-001", "round-002", "round-003"}
    assert "round-002/inspect-logs/worker-gen0-cand1.eval" in listed
