"""The `rollout-assets` command line, run for real as a subprocess on generated rounds."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout_assets.demo import DemoLayout, RoundSpec, write_demo
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets_tests.backfill_runs import backfill, without_captured_at
from rollout_assets_tests.dagster_dev import WITH_DEFAULT_SIGNALS

SMALL_ROUND = RoundSpec(
    name="cli-round",
    instances=2,
    reps=1,
    generations=1,
    candidates_per_generation=2,
    workers_per_cell=2,
    steps_per_session=2,
    shots_per_candidate=1,
    edge_cases=False,
    seed=5,
)
OLD_LEDGER = b'{"an": "older ledger that must survive"}\n'


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    return write_demo(tmp_path_factory.mktemp("cli-demo"), rounds=[SMALL_ROUND])


@pytest.fixture
def round_copy(demo: DemoLayout, tmp_path: Path) -> Path:
    """A private copy of the small round, safe to damage (its cells keep pointing at the original run dirs)."""
    return Path(shutil.copytree(demo.rounds[0], tmp_path / "round"))


def backfill_args(
    demo: DemoLayout,
    out_dir: Path,
    ledger: Path,
    *,
    opencode_db: Path | None = None,
    claude_projects_dir: Path | None = None,
) -> list[str | Path]:
    return [
        "backfill",
        out_dir,
        ledger,
        "--opencode-db",
        opencode_db or demo.opencode_db,
        "--claude-projects",
        claude_projects_dir or demo.claude_projects_dir,
    ]


@pytest.fixture
def stores(demo: DemoLayout, tmp_path: Path) -> tuple[Path, Path]:
    """Private copies of the opencode store and the Claude projects folder, in one folder,
    for runs that must not write into them (a run that did would not damage the shared demo)."""
    folder = tmp_path / "stores"
    folder.mkdir()
    opencode_db = Path(shutil.copy2(demo.opencode_db, folder / "opencode.db"))
    claude_projects_dir = Path(shutil.copytree(demo.claude_projects_dir, folder / "claude-projects"))
    return opencode_db, claude_projects_dir


def file_hashes(*roots: Path) -> dict[str, str]:
    """sha256 of every file under (or at) each root, keyed by path: detects any write or new file."""
    hashes = {}
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def existing_ledger(tmp_path: Path) -> Path:
    folder = tmp_path / "ledgers"
    folder.mkdir()
    ledger = folder / "out.jsonl"
    ledger.write_bytes(OLD_LEDGER)
    return ledger


# ---------------------------------------------------------------------------
# backfill
# ---------------------------------------------------------------------------


def test_backfill_prints_the_stats_json_then_the_ledger_line(demo: DemoLayout, tmp_path: Path) -> None:
    ledger = tmp_path / "out.jsonl"
    expected = backfill(
        demo.rounds[0], opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
    )

    result = cli(*backfill_args(demo, demo.rounds[0], ledger))

    assert result.returncode == 0, result.stderr
    stats_json = json.dumps(expected.stats.to_json(), indent=2, ensure_ascii=False)
    assert result.stdout == f"{stats_json}\nrollout ledger → {ledger} ({len(expected.lines)} lines)\n"
    assert result.stderr == ""


def test_backfill_writes_the_same_lines_as_the_library(demo: DemoLayout, tmp_path: Path) -> None:
    ledger = tmp_path / "out.jsonl"
    expected = backfill(
        demo.rounds[0], opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
    )

    cli(*backfill_args(demo, demo.rounds[0], ledger))

    assert without_captured_at(list(read_ledger_dicts(ledger))) == without_captured_at(expected.lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_backfill_replaces_an_existing_ledger_leaving_no_other_file(demo: DemoLayout, tmp_path: Path) -> None:
    ledger = existing_ledger(tmp_path)

    result = cli(*backfill_args(demo, demo.rounds[0], ledger))

    assert result.returncode == 0, result.stderr
    assert ledger.read_bytes() != OLD_LEDGER
    assert len(list(read_ledger_dicts(ledger))) == int(result.stdout.rsplit("(", 1)[1].split()[0])
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["out.jsonl"]


def test_backfill_prints_the_out_path_as_given(demo: DemoLayout, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()

    result = cli(*backfill_args(demo, demo.rounds[0], Path("sub/out.jsonl")), cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("rollout ledger → sub/out.jsonl (")
    assert (tmp_path / "sub" / "out.jsonl").is_file()


def test_backfill_without_its_out_argument_exits_2_with_a_usage_line(demo: DemoLayout) -> None:
    result = cli("backfill", demo.rounds[0])

    assert result.returncode == 2
    assert result.stderr.startswith("usage: rollout-assets backfill ")
    assert "OUT.jsonl" in result.stderr
    assert result.stdout == ""


def test_no_command_at_all_exits_2_with_a_usage_line() -> None:
    result = cli()

    assert result.returncode == 2
    assert result.stderr.startswith("usage: rollout-assets ")


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_backfill_refuses_a_worker_count_below_one(demo: DemoLayout, tmp_path: Path, workers: str) -> None:
    result = cli(*backfill_args(demo, demo.rounds[0], tmp_path / "out.jsonl"), "--workers", workers)

    assert result.returncode == 2
    assert result.stderr.startswith("usage: rollout-assets backfill ")
    assert f"--workers: must be a whole number of at least 1, not '{workers}'" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("store", ["missing", "a-directory", "not-sqlite"])
def test_an_unreadable_opencode_store_gives_gap_lines_and_one_warning_naming_it(
    demo: DemoLayout, tmp_path: Path, store: str
) -> None:
    opencode_db = tmp_path / "opencode.db"
    if store == "a-directory":
        opencode_db.mkdir()
    elif store == "not-sqlite":
        opencode_db.write_text("not a database\n")
    ledger = tmp_path / "out.jsonl"

    result = cli(*backfill_args(demo, demo.rounds[0], ledger, opencode_db=opencode_db))

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        (
            f"rollout-assets: warning: opencode database {opencode_db} could not be read (missing, not a file, "
            "or not an opencode store): every worker line is a gap line; give the store with --opencode-db"
        )
    ]
    workers = [line for line in read_ledger_dicts(ledger) if line["role"] == "worker"]
    assert workers
    assert all(line["messages"] == [] and line["provenance"]["gap"] for line in workers)


def test_a_missing_claude_projects_folder_gives_gap_lines_and_one_warning_naming_it(
    demo: DemoLayout, tmp_path: Path
) -> None:
    claude_projects_dir = tmp_path / "no-such-folder"
    ledger = tmp_path / "out.jsonl"

    result = cli(*backfill_args(demo, demo.rounds[0], ledger, claude_projects_dir=claude_projects_dir))

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        (
            f"rollout-assets: warning: Claude projects folder {claude_projects_dir} is not a directory: every "
            "proposer line is a gap line; give the folder with --claude-projects"
        )
    ]
    proposers = [line for line in read_ledger_dicts(ledger) if line["role"] == "proposer"]
    assert proposers
    assert all(line["messages"] == [] and line["provenance"]["gap"] for line in proposers)


def test_a_round_with_nothing_in_it_writes_an_empty_ledger_and_warns(
    demo: DemoLayout, tmp_path: Path
) -> None:
    empty_round = tmp_path / "empty-round"
    empty_round.mkdir()
    ledger = tmp_path / "out.jsonl"

    result = cli(*backfill_args(demo, empty_round, ledger))

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"rollout-assets: warning: {empty_round} holds no campaign cells and no proposer shots: the ledger is empty"
    ]
    assert result.stdout.splitlines()[-1] == f"rollout ledger → {ledger} (0 lines)"
    assert ledger.read_bytes() == b""


def test_a_corrupt_cell_cache_exits_1_naming_the_file_and_writes_no_ledger(
    demo: DemoLayout, round_copy: Path, tmp_path: Path
) -> None:
    cache = (
        round_copy
        / "improve-run"
        / "gen-0"
        / "candidate-1"
        / "django__django-11532__rep0"
        / "cached-result.json"
    )
    cache.write_text('{"scenarioId": "django__django-11532", "rep": ', encoding="utf-8")
    ledger = existing_ledger(tmp_path)

    result = cli(*backfill_args(demo, round_copy, ledger))

    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert str(cache) in result.stderr and "not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["out.jsonl"]


def test_a_candidate_mixing_commits_exits_1_naming_the_directory_and_commits(
    demo: DemoLayout, round_copy: Path, tmp_path: Path
) -> None:
    candidate = round_copy / "improve-run" / "gen-0" / "candidate-0"
    cache = candidate / "django__django-11532__rep0" / "cached-result.json"
    record = json.loads(cache.read_text(encoding="utf-8"))
    original_commit = record["artifact"]["commit"]
    record["artifact"]["commit"] = "f" * 40
    cache.write_text(json.dumps(record), encoding="utf-8")
    ledger = existing_ledger(tmp_path)

    result = cli(*backfill_args(demo, round_copy, ledger))

    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1
    assert str(candidate) in result.stderr
    assert original_commit in result.stderr and "f" * 40 in result.stderr
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["out.jsonl"]


def test_a_corrupt_cell_writes_no_ledger_where_none_existed(
    demo: DemoLayout, round_copy: Path, tmp_path: Path
) -> None:
    cache = round_copy / "improve-run" / "baseline" / "astropy__astropy-12907__rep0" / "cached-result.json"
    cache.write_text('{"rep": 0}', encoding="utf-8")
    folder = tmp_path / "ledgers"
    folder.mkdir()

    result = cli(*backfill_args(demo, round_copy, folder / "out.jsonl"))

    assert result.returncode == 1
    assert "no string scenarioId" in result.stderr
    assert list(folder.iterdir()) == []


def test_backfill_refuses_an_out_path_inside_the_round(demo: DemoLayout, round_copy: Path) -> None:
    before = file_hashes(round_copy)

    result = cli(*backfill_args(demo, round_copy, round_copy / "ledger.jsonl"))

    assert result.returncode == 2
    assert f"refusing to write the ledger OUT {round_copy / 'ledger.jsonl'} inside the round outDir" in result.stderr
    assert file_hashes(round_copy) == before


def test_backfill_leaves_the_round_and_both_stores_unchanged(demo: DemoLayout, tmp_path: Path) -> None:
    before = file_hashes(demo.rounds[0], demo.opencode_db, demo.claude_projects_dir)
    sibling_files = sorted(p.name for p in demo.root.iterdir())

    result = cli(*backfill_args(demo, demo.rounds[0], tmp_path / "out.jsonl"))

    assert result.returncode == 0, result.stderr
    assert file_hashes(demo.rounds[0], demo.opencode_db, demo.claude_projects_dir) == before
    # No journal, WAL or shm file appeared beside the store.
    assert sorted(p.name for p in demo.root.iterdir()) == sibling_files


@pytest.mark.parametrize(
    "where", ["the-store", "its-wal", "its-journal", "its-shm", "the-store-through-a-symlinked-folder"]
)
def test_backfill_refuses_an_out_path_over_the_opencode_store(
    demo: DemoLayout, stores: tuple[Path, Path], tmp_path: Path, where: str
) -> None:
    opencode_db, claude_projects_dir = stores
    link = tmp_path / "innocent-looking"
    link.symlink_to(opencode_db.parent, target_is_directory=True)
    out = {
        "the-store": opencode_db,
        "its-wal": opencode_db.with_name("opencode.db-wal"),
        "its-journal": opencode_db.with_name("opencode.db-journal"),
        "its-shm": opencode_db.with_name("opencode.db-shm"),
        "the-store-through-a-symlinked-folder": link / "opencode.db",
    }[where]
    store_bytes = opencode_db.read_bytes()
    before = file_hashes(opencode_db.parent)

    result = cli(
        *backfill_args(
            demo, demo.rounds[0], out, opencode_db=opencode_db, claude_projects_dir=claude_projects_dir
        )
    )

    assert result.returncode == 2
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"rollout-assets: error: refusing to write the ledger OUT {out} over ")
    assert error.endswith(f"the opencode database {opencode_db}")
    assert result.stdout == ""
    assert opencode_db.read_bytes() == store_bytes
    assert file_hashes(opencode_db.parent) == before  # no -wal, -journal, -shm, temp or lock file either


@pytest.mark.parametrize("where", ["inside", "the-folder-itself", "through-a-symlink"])
def test_backfill_refuses_an_out_path_inside_the_claude_projects_folder(
    demo: DemoLayout, stores: tuple[Path, Path], tmp_path: Path, where: str
) -> None:
    opencode_db, claude_projects_dir = stores
    project = next(p for p in claude_projects_dir.iterdir() if p.is_dir())
    link = tmp_path / "innocent-looking"
    link.symlink_to(project, target_is_directory=True)
    out = {
        "inside": project / "ledger.jsonl",
        "the-folder-itself": claude_projects_dir,
        "through-a-symlink": link / "ledger.jsonl",
    }[where]
    before = file_hashes(opencode_db.parent)

    result = cli(
        *backfill_args(
            demo, demo.rounds[0], out, opencode_db=opencode_db, claude_projects_dir=claude_projects_dir
        )
    )

    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"rollout-assets: error: refusing to write the ledger OUT {out} "
        f"inside the Claude projects folder {claude_projects_dir}"
    )
    assert result.stdout == ""
    assert file_hashes(opencode_db.parent) == before


@pytest.mark.parametrize("where", ["a-directory", "under-a-file", "two-levels-under-a-file"])
def test_backfill_refuses_an_out_path_it_cannot_write_in_one_line(
    demo: DemoLayout, tmp_path: Path, where: str
) -> None:
    ledger = existing_ledger(tmp_path)
    folder = ledger.parent
    (folder / "a-directory.jsonl").mkdir()
    (folder / "a-file").write_bytes(OLD_LEDGER)
    out = {
        "a-directory": folder / "a-directory.jsonl",
        "under-a-file": folder / "a-file" / "out.jsonl",
        "two-levels-under-a-file": folder / "a-file" / "sub" / "out.jsonl",
    }[where]
    problem = (
        f"OUT {out} is a directory"
        if where == "a-directory"
        else f"cannot write OUT {out}: its parent {folder / 'a-file'} is not a directory"
    )
    before = file_hashes(folder)
    entries = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))

    result = cli(*backfill_args(demo, demo.rounds[0], out))

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: rollout-assets backfill ")
    assert result.stderr.splitlines()[-1].startswith(f"rollout-assets: error: {problem}")
    assert result.stdout == ""
    assert file_hashes(folder) == before
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == entries


@pytest.mark.slow
def test_ctrl_c_during_a_backfill_exits_130_in_one_line_leaving_out_as_it_was(tmp_path: Path) -> None:
    layout = write_demo(
        tmp_path / "big",
        rounds=[
            RoundSpec(name="big", instances=60, reps=2, generations=2, candidates_per_generation=4, seed=3)
        ],
    )
    ledger = existing_ledger(tmp_path)
    lock = ledger.parent / f".{ledger.name}.lock"
    # SIGINT back to its default first: a test run started in the background of a shell
    # (`bash .ci/run &`) inherits it ignored, and Python then never raises KeyboardInterrupt.
    command = [
        sys.executable,
        "-c",
        WITH_DEFAULT_SIGNALS,
        sys.executable,
        "-m",
        "rollout_assets.cli",
        *map(str, backfill_args(layout, layout.rounds[0], ledger)),
    ]
    # A session of its own, so the signal goes to the whole group as a terminal's Ctrl-C does.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while not lock.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.005)
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 130, stderr
    assert stderr.splitlines() == [
        "rollout-assets: interrupted; the ledger was not written, OUT is as it was"
    ]
    assert stdout == ""
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["out.jsonl"]


def test_ctrl_c_once_the_ledger_is_written_and_being_reported_is_ignored(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once the ledger is in place only the report is left: an interrupt then (or while Python
    shuts down) must not end the finished backfill with status 130. Called with argv, as here,
    main() gives the caller its Ctrl-C back."""
    from rollout_assets import cli

    real_warnings = cli._backfill_warnings

    def interrupted_while_reporting(*args: object) -> list[str]:
        os.kill(os.getpid(), signal.SIGINT)
        return real_warnings(*args)

    monkeypatch.setattr(cli, "_backfill_warnings", interrupted_while_reporting)
    ledger = existing_ledger(tmp_path)

    code = cli.main([str(arg) for arg in backfill_args(demo, demo.rounds[0], ledger)])

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err == ""
    assert captured.out.endswith(f"rollout ledger → {ledger} ({len(list(read_ledger_dicts(ledger)))} lines)\n")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_after_the_ledger_replaced_out_says_so(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupt landing once the writer has renamed the new ledger into place (the real
    backfill runs; the interrupt comes as it returns) must not claim OUT is as it was."""
    import rollout_assets.backfill.parallel as parallel
    from rollout_assets.cli import main

    real_backfill = parallel.backfill_to_file

    def interrupted_on_return(*args: object, **kwargs: object) -> object:
        real_backfill(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "backfill_to_file", interrupted_on_return)
    ledger = existing_ledger(tmp_path)

    code = main([str(arg) for arg in backfill_args(demo, demo.rounds[0], ledger)])

    captured = capsys.readouterr()
    assert code == 130
    assert captured.err.splitlines() == [
        f"rollout-assets: interrupted after the ledger was written: OUT {ledger} holds the new ledger"
    ]
    assert captured.out == ""
    assert ledger.read_bytes() != OLD_LEDGER
    plain = tmp_path / "plain.jsonl"  # the same backfill, not interrupted
    real_backfill(
        demo.rounds[0], plain, opencode_db=demo.opencode_db, claude_projects_dir=demo.claude_projects_dir
    )
    assert without_captured_at(read_ledger_dicts(ledger)) == without_captured_at(read_ledger_dicts(plain))


def test_the_command_line_starts_without_the_backfill_and_the_schema() -> None:
    """Ctrl-C is one line only once main() runs: what is imported before it (the module's
    imports) stays small, and the backfill and pydantic (most of the start-up) are imported
    by the commands, inside main's handling."""
    heavy = ("pydantic", "rollout_assets.backfill", "rollout_assets.ledger")
    completed = subprocess.run(
        [sys.executable, "-c", f"import sys, rollout_assets.cli; print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert completed.stdout.strip() == "[]"


def test_backfill_checks_out_before_reading_the_round(demo: DemoLayout, tmp_path: Path) -> None:
    # The round does not exist: refusing OUT first shows nothing of the round was read before.
    missing_round = tmp_path / "no-such-round"

    result = cli(*backfill_args(demo, missing_round, tmp_path))

    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"rollout-assets: error: OUT {tmp_path} is a directory")


@pytest.mark.parametrize(
    "name_length",
    [
        300,  # longer than any file name may be (255 bytes)
        240,  # a valid name, but the writer's temp file beside it (.<name>.<random>.tmp) is not
    ],
)
def test_an_out_path_the_system_refuses_exits_1_with_one_line_naming_it_and_leaves_no_file(
    demo: DemoLayout, tmp_path: Path, name_length: int
) -> None:
    ledger = existing_ledger(tmp_path)
    out = ledger.parent / ("x" * (name_length - len(".jsonl")) + ".jsonl")

    result = cli(*backfill_args(demo, demo.rounds[0], out))

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [error] = result.stderr.splitlines()
    assert error.startswith(f"rollout-assets: error: ledger {out} not written: ")
    assert "File name too long" in error
    assert result.stdout == ""
    assert ledger.read_bytes() == OLD_LEDGER
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["out.jsonl"]


# ---------------------------------------------------------------------------
# manifest, schema
# ---------------------------------------------------------------------------


def test_manifest_prints_the_manifest_json(demo: DemoLayout) -> None:
    result = cli("manifest", demo.rounds[0])

    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert manifest["instances"] == ["astropy__astropy-12907", "django__django-11532"]
    assert [g["generation"] for g in manifest["generations"]] == [-1, 0]
    assert [r["candidateId"] for g in manifest["generations"] for r in g["rollouts"]] == [
        "baseline",
        "gen0-cand0",
        "gen0-cand1",
    ]
    assert manifest["runId"] == "improve-cli-round"


def test_manifest_holding_a_lone_surrogate_prints_it_as_an_escape(round_copy: Path) -> None:
    out_dir = round_copy
    cache = next((out_dir / "improve-run" / "baseline").glob("*/cached-result.json"))
    record = json.loads(cache.read_bytes())
    record["scenarioId"] += "\ud83d"  # a torn emoji escape: text that has no UTF-8 form
    cache.write_text(json.dumps(record))

    result = cli("manifest", out_dir)

    assert result.returncode == 0, result.stderr
    assert "\\ud83d" in result.stdout
    assert record["scenarioId"] in json.loads(result.stdout)["instances"]


def test_manifest_of_a_missing_round_exits_1_with_one_line(tmp_path: Path) -> None:
    result = cli("manifest", tmp_path / "nope")

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"rollout-assets: error: {tmp_path / 'nope'}: round outDir does not exist or is not a directory"
    ]


def test_schema_prints_the_json_schema_of_a_line() -> None:
    result = cli("schema")

    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert {"schema", "experiment_id", "outcome"} <= set(schema["properties"])
    assert schema["properties"]["schema"]["const"] == "tangle.rollout.v1"


# ---------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------


def test_demo_writes_the_rounds_and_stores(tmp_path: Path) -> None:
    root = tmp_path / "demo"

    result = cli("demo", root)

    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (root / "rounds").iterdir()) == ["round-001", "round-002", "round-003"]
    assert (root / "opencode.db").is_file()
    assert any((root / "claude-projects").iterdir())
    assert f"opencode store   → {root / 'opencode.db'}" in result.stdout


def test_demo_refuses_an_existing_round_without_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    assert cli("demo", root).returncode == 0
    before = file_hashes(root)

    result = cli("demo", root)

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    round_dir = root / "rounds" / "round-001"
    assert result.stderr.splitlines() == [
        f"rollout-assets: error: round directory {round_dir} already exists; refusing to overwrite it"
    ]
    assert file_hashes(root) == before
