"""`rollout-assets export` keeps the backfill's contract: every bad input is one sentence and
exit 1, the ledger is read as one snapshot, the output folder is replaced whole or not at all,
and nothing that is not the export's own is replaced. Real files, FIFOs, permissions, limits."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from rollout_assets import cli
from rollout_assets.ledger.io import write_lock
from rollout_assets.ledger.snapshot import LedgerChanged, LedgerSnapshot
from rollout_assets.training import export_training
from rollout_assets.training import export as export_module
from rollout_assets_tests.dataset_ledgers import cli as run_cli
from rollout_assets_tests.dataset_ledgers import tree, worker_lines, write_round
from rollout_assets_tests.ledger_processes import file_size_limit
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged

TRAINING_FILES = {
    "sft.parquet", "sft.jsonl", "sft.accounting.jsonl", "preference-pairs.parquet",
    "preference-pairs.accounting.jsonl", "grpo-groups.parquet", "grpo-groups.accounting.jsonl",
    "training-report.json", "training-report.md",
}  # fmt: skip


def _main(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str]:
    """The command, in this process: (exit status, stderr)."""
    status = cli.main([str(arg) for arg in args])
    return status, capsys.readouterr().err


def _write_raw(path: Path, lines: list[Any]) -> None:
    """A ledger written without validation, as a broken producer would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


# --- Schema-invalid lines: one sentence naming file:line ------------------------------------


def _drop_arguments(line: dict[str, Any]) -> None:
    del line["messages"][1]["tool_calls"][0]["function"]["arguments"]


BROKEN_LINES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "no messages": (lambda line: line.pop("messages"), "(messages: Field required)"),
    "task null": (lambda line: line.update(task=None), "(task: Input should be a valid dictionary"),
    "reward a string": (
        lambda line: line["outcome"].update(reward="0.9"),
        '(outcome.reward: Input should be a valid integer or a valid number, not "0.9")',
    ),
    "tool call without arguments": (_drop_arguments, "(messages.1.tool_calls.0.function.arguments: Field required)"),
    "no realness_gated": (lambda line: line["outcome"].pop("realness_gated"), "(outcome.realness_gated: Field required)"),
    "messages an object": (lambda line: line.update(messages={}), "(messages: Input should be a valid list, not {})"),
    "unknown role": (lambda line: line.update(role="robot"), "(role: Input should be "),
    "no instance id": (lambda line: line["task"].pop("instance_id"), "(task.instance_id: Field required)"),
    "gated with a reward": (
        lambda line: line["outcome"].update(realness_gated=True, reward=1),
        "a gated rollout's reward must be null or <= 0",
    ),
    "empty transcript without a gap": (lambda line: line.update(messages=[]), "provenance.gap is required"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_LINES))
def test_a_schema_invalid_line_is_one_sentence_naming_file_and_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = worker_lines(3, "broken")
    breaks, expected = BROKEN_LINES[case]
    breaks(lines[1])
    ledger = tmp_path / "round-001" / "rollout-ledger.jsonl"
    _write_raw(ledger, lines)

    status, err = _main(capsys, "export", ledger, tmp_path / "out")

    assert status == 1
    assert err.startswith(f"rollout-assets: error: {ledger}:2: rollout "), err
    assert "is not a valid tangle.rollout.v1 line" in err and expected in err, err
    assert len(err.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["round-001"]  # no output folder, no build folder, no lock


def test_a_line_that_is_not_an_object_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "rollout-ledger.jsonl"
    _write_raw(ledger, [worker_lines(1, "array")[0], ["not", "a", "line"]])

    status, err = _main(capsys, "export", ledger, tmp_path / "out")

    assert (status, err) == (1, f"rollout-assets: error: {ledger}:2: a line must be a JSON object, not list\n")


def test_a_schema_invalid_line_stops_a_release_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ledgers"
    write_round(root, "round-001")
    lines = worker_lines(3, "round-002")
    lines[2]["outcome"]["reward"] = "0.9"
    _write_raw(root / "round-002" / "rollout-ledger.jsonl", lines)

    status, err = _main(capsys, "release", root, tmp_path / "releases", "--license", "mit")

    assert status == 1
    assert err.startswith(f"rollout-assets: error: {root / 'round-002' / 'rollout-ledger.jsonl'}:3: rollout "), err
    assert "(outcome.reward: Input should be a valid integer or a valid number" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "releases" / "rollout-dataset").exists()


# --- Ledgers that are no regular files: refused, never waited on -----------------------------


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_ledger_that_is_no_regular_file_is_refused_without_waiting(kind: str, tmp_path: Path) -> None:
    ledger = tmp_path / "round-001" / "rollout-ledger.jsonl"
    ledger.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(ledger)
    else:
        ledger.mkdir()
    why = "it is not a regular file" if kind == "fifo" else "it is a folder"

    export = run_cli("export", ledger, tmp_path / "out", timeout=60)

    sentence = f"rollout-assets: error: {ledger}: not a ledger file ({why}); give a regular file\n"
    assert (export.returncode, export.stderr) == (1, sentence)
    assert sorted(os.listdir(tmp_path)) == ["round-001"]


# --- One snapshot of the ledger ------------------------------------------------------------


def test_a_snapshot_sees_a_ledger_replaced_or_rewritten(tmp_path: Path) -> None:
    ledger = write_round(tmp_path, "round-001", tag="first")
    other = write_round(tmp_path, "other", tag="second")

    with LedgerSnapshot(ledger) as snapshot:
        first_pass = [raw for _, raw in snapshot.lines()]
        snapshot.check_unchanged()
        os.replace(other, ledger)  # what a backfill's atomic write does
        # The open file is still the ledger as it was: every pass reads the same bytes.
        assert [raw for _, raw in snapshot.lines()] == first_pass
        with pytest.raises(LedgerChanged, match="was replaced or rewritten while it was read"):
            snapshot.check_unchanged()

    with LedgerSnapshot(ledger) as snapshot:
        with open(ledger, "ab") as handle:  # the same file, written in place
            handle.write(first_pass[0])
        with pytest.raises(LedgerChanged):
            snapshot.check_unchanged()


def test_a_ledger_replaced_during_an_export_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = write_round(tmp_path, "round-001", tag="first")
    out = tmp_path / "out"
    export_training(ledger, out, "round-001")
    before = tree(out)
    replacement = write_round(tmp_path, "other", count=9, tag="second")
    real_scan = export_module.scan_ledger

    def scan_then_rebuild(*args: Any) -> Any:
        scanned = real_scan(*args)
        os.replace(replacement, ledger)  # a backfill renames a new ledger into place meanwhile
        return scanned

    monkeypatch.setattr(export_module, "scan_ledger", scan_then_rebuild)

    with pytest.raises(LedgerChanged, match=f"{ledger}: the ledger was replaced or rewritten while it was read"):
        export_training(ledger, out, "round-001")
    assert tree(out) == before
    assert sorted(os.listdir(tmp_path)) == ["other", "out", "round-001"]


_REWRITE_FOREVER = """
import os, sys, time
ledger, first, second = sys.argv[1:4]
while True:
    for source in (first, second):
        with open(source, "rb") as src, open(ledger + ".new", "wb") as dst:
            dst.write(src.read())
        os.replace(ledger + ".new", ledger)
        time.sleep(0.005)
"""


def test_exports_racing_a_backfill_never_mix_two_ledgers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write_round(tmp_path / "a", "round-001", count=200, tag="first", pad=1500)
    second = write_round(tmp_path / "b", "round-001", count=150, tag="second", pad=3000)
    digests = {hashlib.sha256(path.read_bytes()).hexdigest() for path in (first, second)}
    ledger = tmp_path / "round-001" / "rollout-ledger.jsonl"
    ledger.parent.mkdir()
    ledger.write_bytes(first.read_bytes())
    rewriter = subprocess.Popen([sys.executable, "-c", _REWRITE_FOREVER, str(ledger), str(first), str(second)])
    outcomes = {"written": 0, "changed": 0}
    try:
        for run in range(12):
            status, err = _main(capsys, "export", ledger, tmp_path / "out")
            if status == 0:
                report = json.loads((tmp_path / "out" / "training-report.json").read_text())
                assert report["ledger"]["sha256"] in digests, run
                outcomes["written"] += 1
            else:
                # Never a failed check or a traceback: the one sentence of a ledger that changed.
                assert (status, err.splitlines()) == (1, [f"rollout-assets: error: {ledger}: the ledger was "
                    "replaced or rewritten while it was read (a backfill running?); run again once it is written"])  # fmt: skip
                outcomes["changed"] += 1
    finally:
        rewriter.kill()
        rewriter.wait()
    assert outcomes["changed"] > 0, outcomes  # the race was real


# --- What the export may replace -----------------------------------------------------------


def test_an_export_into_the_folder_of_its_own_ledger_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = write_round(tmp_path, "round-001")
    folder = ledger.parent
    named_like_an_output = folder / "sft.jsonl"
    named_like_an_output.write_bytes(ledger.read_bytes())
    before = tree(folder)

    for source in (ledger, named_like_an_output):
        status, err = _main(capsys, "export", source, folder)
        assert (status, err) == (1, f"rollout-assets: error: refusing to write the training files into {folder}: "
            f"it holds the ledger {source} they are read from, and the folder is replaced whole; choose another "
            "OUT_DIR\n")  # fmt: skip
    # Through a symlink too: the ledger's folder, reached by another name.
    (tmp_path / "link").symlink_to(folder)
    status, err = _main(capsys, "export", ledger, tmp_path / "link")
    assert status == 1 and "it holds the ledger" in err
    assert tree(folder) == before
    assert sorted(os.listdir(tmp_path)) == ["link", "round-001"]


def test_an_out_dir_holding_other_files_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")
    out = tmp_path / "out"
    export_training(ledger, out, "round-001")
    (out / "notes.txt").write_text("mine")
    before = tree(out)

    status, err = _main(capsys, "export", ledger, out)

    assert (status, err) == (1, f"rollout-assets: error: refusing to replace {out}: it holds files no export "
        "writes (notes.txt), and the folder is replaced whole; give a new or empty folder, or one an earlier "
        "export wrote\n")  # fmt: skip
    assert tree(out) == before


def test_an_out_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")
    out = tmp_path / "out"
    out.write_text("a file")

    status, err = _main(capsys, "export", ledger, out)

    assert (status, err) == (1, f"rollout-assets: error: refusing to replace {out}: it is not a folder; choose "
        "another OUT_DIR\n")  # fmt: skip
    assert out.read_text() == "a file"


def test_an_earlier_export_is_replaced_whole_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write_round(tmp_path / "a", "round-001", tag="first")
    second = write_round(tmp_path / "b", "round-001", count=2, tag="second")
    real = tmp_path / "real-out"
    export_training(first, real, "round-001")
    (real / ".sft.parquet.0123456789abcdef.tmp").write_bytes(b"left by a killed writer")
    (tmp_path / "out").symlink_to(real)

    status, err = _main(capsys, "export", second, tmp_path / "out")

    assert (status, err) == (0, "")
    assert (tmp_path / "out").is_symlink() and os.readlink(tmp_path / "out") == str(real)
    assert set(os.listdir(real)) == TRAINING_FILES
    report = json.loads((real / "training-report.json").read_text())
    assert report["datasets"]["sft_rows"]["lines"] == 3
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "out", "real-out"]


def test_the_current_folder_as_out_dir_is_replaced_by_its_name(tmp_path: Path) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")
    here = tmp_path / "here"
    here.mkdir()

    result = run_cli("export", ledger, ".", cwd=here)

    assert result.returncode == 0, result.stderr
    assert set(os.listdir(here)) == TRAINING_FILES
    assert sorted(os.listdir(tmp_path)) == ["here", "ledgers"]


def test_a_killed_export_leaves_nothing_the_next_one_keeps(tmp_path: Path) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")
    exports = tmp_path / "exports"
    for leftover in (".out.build-0123abcd", ".out.old-89abcdef", ".out.1.build-0123abcd"):
        (exports / leftover).mkdir(parents=True)
        (exports / leftover / "sft.parquet").write_bytes(b"half")

    export_training(ledger, exports / "out", "round-001")

    # Only the build and old folders of this OUT_DIR go; `out.1`'s belong to another export.
    assert sorted(os.listdir(exports)) == [".out.1.build-0123abcd", "out"]


def test_a_round_name_that_is_a_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")

    status, err = _main(capsys, "export", ledger, tmp_path / "out", "--round", "../other")

    assert status == 2
    assert err.splitlines()[-1] == ("rollout-assets: error: --round '../other' is not a round's name: it must start "
        "with a letter or digit and hold at most 100 letters, digits, '.', '_' or '-'")  # fmt: skip
    assert not (tmp_path / "out").exists()


# --- Runs on one OUT_DIR, failures and Ctrl-C: the old files or the new, never a mix ---------


def test_a_second_export_of_one_out_dir_fails_at_once(tmp_path: Path) -> None:
    ledger = write_round(tmp_path / "ledgers", "round-001")
    out = tmp_path / "out"
    export_training(ledger, out, "round-001")
    before = tree(out)

    with write_lock(out):  # the lock a running export holds
        result = run_cli("export", ledger, out)

    assert result.returncode == 1
    assert result.stderr == (f"rollout-assets: error: {out} is being written by another process right now "
        f"(lock {tmp_path / '.out.lock'}); not writing it twice at once\n")  # fmt: skip
    assert tree(out) == before


def test_a_file_past_the_size_limit_leaves_the_earlier_export_and_nothing_else(tmp_path: Path) -> None:
    small = write_round(tmp_path / "ledgers", "round-001", count=2, tag="small")
    big = write_round(tmp_path / "ledgers", "round-002", count=200, tag="big", pad=2000)
    out = tmp_path / "exports" / "out"
    export_training(small, out, "round-001")
    before = tree(out)

    result = run_cli("export", big, out, preexec_fn=file_size_limit(64 * 1024))

    assert result.returncode == 1
    assert result.stderr == f"rollout-assets: error: training files {out} not written: [Errno 27] File too large\n"
    assert tree(out) == before
    assert os.listdir(out.parent) == ["out"]


def test_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path: Path, small_tmpfs: Path) -> None:
    big = write_round(tmp_path / "ledgers", "round-001", count=200, tag="big", pad=2000)
    out = small_tmpfs / "out"

    result = run_cli("export", big, out)

    assert result.returncode == 1
    assert result.stderr.startswith(f"rollout-assets: error: training files {out} not written: [Errno 28] ")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert os.listdir(small_tmpfs) == []


_EXPORT_AS_NOBODY = (
    textwrap.dedent(
        """
        import sys
        import pyarrow, pyarrow.parquet  # read before the drop: the interpreter's folder may be closed
        import rollout_assets.cli as cli
        import rollout_assets.training, rollout_assets.training.verify, rollout_assets.ledger.snapshot
        """
    )
    + DROP_TO_NOBODY
    + "sys.exit(cli.main(sys.argv[1:]))\n"
)


def test_permission_errors_are_one_sentence(world_readable_tmp: Path) -> None:
    ledger = write_round(world_readable_tmp / "ledgers", "round-001")
    closed = world_readable_tmp / "closed"  # root's, 0755: `nobody` may not write in it
    closed.mkdir()

    unwritable = run_unprivileged(_EXPORT_AS_NOBODY, "export", str(ledger), str(closed / "out"))
    ledger.chmod(0o600)
    unreadable = run_unprivileged(_EXPORT_AS_NOBODY, "export", str(ledger), str(world_readable_tmp / "out"))

    assert (unwritable.returncode, unwritable.stderr) == (1, f"rollout-assets: error: training files {closed / 'out'} "
        f"not written: [Errno 13] Permission denied: '{closed / '.out.lock'}'\n")  # fmt: skip
    assert (unreadable.returncode, unreadable.stderr) == (1, f"rollout-assets: error: {ledger}: cannot read the "
        "ledger (Permission denied)\n")  # fmt: skip
    assert os.listdir(closed) == []


def test_ctrl_c_during_an_export_leaves_the_earlier_files(tmp_path: Path) -> None:
    small = write_round(tmp_path / "ledgers", "round-001", count=2, tag="small")
    # After the SFT rows come the pairs and groups of 3,000 instances: time for Ctrl-C to land
    # (about 1.5 s of writing on an idle machine; a loaded one may see the SFT file late).
    big = write_round(tmp_path / "ledgers", "round-002", count=400, tag="big", pad=3000, pairs=3000)
    out = tmp_path / "exports" / "out"
    export_training(small, out, "round-001")
    before = tree(out)
    first_file = os.stat(out / "sft.parquet")

    export = subprocess.Popen(
        [sys.executable, "-m", "rollout_assets.cli", "export", str(big), str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and export.poll() is None:
            # The new rows have begun: in the build folder beside OUT_DIR, or over OUT_DIR's files.
            building = [name for name in os.listdir(out.parent) if ".build-" in name]
            started = any(os.path.exists(out.parent / name / "sft.parquet") for name in building)
            if started or os.stat(out / "sft.parquet").st_ino != first_file.st_ino:
                break
            time.sleep(0.005)
        export.send_signal(signal.SIGINT)
        _, stderr = export.communicate(timeout=120)
    finally:
        export.kill()

    assert export.returncode == 130, stderr
    assert stderr == "rollout-assets: interrupted\n"
    assert tree(out) == before
    assert os.listdir(out.parent) == ["out"]
