"""Security properties: loopback-only servers, telemetry off, inputs never written.

Everything is checked on the shipped files and on real runs: the scripts are parsed, the
instance configuration is loaded by Dagster, the opencode store is a real SQLite file (in
rollback-journal and in WAL mode) read by the real command line, and a whole round is
materialized through Dagster with every input hashed before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, instance_for_test

from rollout_assets.demo import DemoLayout, RoundSpec, write_demo
from rollout_assets.ledger import read_ledger_dicts
from rollout_assets.sources.opencode import OpencodeStore
from rollout_assets_tests.dagster_rounds import CHECK_NAMES, materialize_round, round_resources, step_failures

PROJECT = Path(__file__).resolve().parents[1]
SCRIPTS = PROJECT / "scripts"
LOOPBACK = "127.0.0.1"
SPEC = RoundSpec(
    name="secure-round",
    instances=2,
    reps=1,
    generations=1,
    candidates_per_generation=2,
    workers_per_cell=2,
    steps_per_session=2,
    shots_per_candidate=1,
    edge_cases=False,
    seed=13,
)


# ---------------------------------------------------------------------------
# Servers bind to loopback
# ---------------------------------------------------------------------------

# Programs that listen on a port, with the option that names the address they bind.
_SERVERS = {
    ("dagster", "dev"): ("-h", "--host"),
    ("dagster-webserver",): ("-h", "--host"),
    ("dagster", "api", "grpc"): ("-h", "--host"),
    ("dagster-graphql",): ("-h", "--host"),
    ("uvicorn",): ("--host",),
    ("python", "-m", "http.server"): ("-b", "--bind"),
}


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell script, as words (continuations joined, comments dropped)."""
    text = text.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        for part in re.split(r"&&|\|\||;|\||&(?!&)", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                words = part.split()
            while words and (words[0] in {"exec", "nohup", "env", "command"} or re.fullmatch(r"\w+=.*", words[0])):
                words = words[1:]
            if words:
                commands.append(words)
    return commands


def server_binding(words: list[str]) -> tuple[str, str | None] | None:
    """(server, bound address or None) when `words` start a server; None otherwise."""
    program = [os.path.basename(words[0]).removesuffix(".exe"), *words[1:]]
    if program[0].startswith("python"):
        program[0] = "python"
    for prefix, options in _SERVERS.items():
        if tuple(program[: len(prefix)]) == prefix:
            address = None
            for index, word in enumerate(words):
                for option in options:
                    if word == option and index + 1 < len(words):
                        address = words[index + 1]
                    elif word.startswith(option + "="):
                        address = word.split("=", 1)[1]
            return " ".join(prefix), address
    return None


def test_every_script_that_starts_a_webserver_binds_it_to_loopback() -> None:
    scripts = sorted(path for path in SCRIPTS.rglob("*") if path.is_file())
    assert scripts, "no scripts/ folder"
    servers = []
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert "0.0.0.0" not in text, f"{script} mentions the wildcard address"
        for words in shell_commands(text):
            binding = server_binding(words)
            if binding is not None:
                servers.append((script.name, *binding))
    # The parser finds the UI's server (else this test would prove nothing) ...
    assert ("ui.sh", "dagster dev", LOOPBACK) in servers
    # ... and every server any script starts names the loopback address explicitly.
    assert [server for server in servers if server[2] != LOOPBACK] == []


def test_the_server_parser_sees_a_server_bound_to_every_address() -> None:
    # The check above can fail: a script binding elsewhere, or not naming an address, is seen.
    commands = shell_commands('exec .venv/bin/dagster dev -p 3000 -w workspace.yaml\ndagster-webserver --host=0.0.0.0')
    assert [server_binding(words) for words in commands] == [("dagster dev", None), ("dagster-webserver", "0.0.0.0")]


# ---------------------------------------------------------------------------
# Telemetry
# ---------------------------------------------------------------------------


def shipped_instance_configs() -> list[Path]:
    return sorted((PROJECT / "deploy").rglob("dagster.yaml"))


def test_telemetry_is_off_in_every_shipped_dagster_yaml(tmp_path: Path) -> None:
    configs = shipped_instance_configs()
    assert {path.parent.name for path in configs} >= {"local", "postgres", "k8s"}
    for config in configs:
        assert yaml.safe_load(config.read_text())["telemetry"] == {"enabled": False}, config
    # As Dagster itself reads it (the local one needs no server to load).
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "local" / "dagster.yaml", home / "dagster.yaml")
    instance = DagsterInstance.from_config(str(home))
    try:
        assert instance.telemetry_enabled is False
    finally:
        instance.dispose()
    # And the scripts run the demo and the UI on exactly that file.
    env_sh = (SCRIPTS / "env.sh").read_text(encoding="utf-8")
    assert 'cp "$PROJECT_DIR/deploy/local/dagster.yaml" "$DAGSTER_HOME/dagster.yaml"' in env_sh


# ---------------------------------------------------------------------------
# The opencode store is opened read-only
# ---------------------------------------------------------------------------


@pytest.fixture
def demo(tmp_path: Path) -> DemoLayout:
    return write_demo(tmp_path / "demo", rounds=[SPEC])


def cli_backfill(demo: DemoLayout, ledger: Path, opencode_db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout_assets.cli",
            "backfill",
            str(demo.rounds[0]),
            str(ledger),
            "--opencode-db",
            str(opencode_db),
            "--claude-projects",
            str(demo.claude_projects_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def private_store(demo: DemoLayout, folder: Path) -> Path:
    folder.mkdir()
    return Path(shutil.copy2(demo.opencode_db, folder / "opencode.db"))


def test_the_opencode_store_connection_refuses_writes(demo: DemoLayout, tmp_path: Path) -> None:
    store = OpencodeStore.open(private_store(demo, tmp_path / "store"))
    assert store is not None
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._connection.execute("CREATE TABLE written_by_the_backfill (x)")
    finally:
        store.close()


def test_a_backfill_leaves_a_rollback_journal_store_untouched(demo: DemoLayout, tmp_path: Path) -> None:
    db = private_store(demo, tmp_path / "store")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as probe:
        assert probe.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    probe.close()
    before = (sha256(db), db.stat().st_mtime_ns, sorted(os.listdir(db.parent)))

    result = cli_backfill(demo, tmp_path / "out.jsonl", db)

    assert result.returncode == 0, result.stderr
    assert (sha256(db), db.stat().st_mtime_ns, sorted(os.listdir(db.parent))) == before
    for suffix in ("-wal", "-shm", "-journal"):
        assert not Path(f"{db}{suffix}").exists()


# Leaves committed rows in the WAL, never checkpointed: as a store looks while opencode runs
# (or after it was killed). A connection that could write would checkpoint them into the
# database file when it closes, and delete the WAL.
WAL_WITH_FRAMES = textwrap.dedent(
    """
    import os, sqlite3, sys
    connection = sqlite3.connect(sys.argv[1])
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    connection.execute("PRAGMA wal_autocheckpoint=0")
    connection.execute("UPDATE session SET agent = 'agent-in-the-wal'")
    connection.commit()
    os._exit(0)  # no close: no checkpoint
    """
)


def test_a_backfill_leaves_a_wal_store_and_its_wal_untouched(demo: DemoLayout, tmp_path: Path) -> None:
    db = private_store(demo, tmp_path / "store")
    subprocess.run([sys.executable, "-c", WAL_WITH_FRAMES, str(db)], check=True, timeout=60)
    wal = Path(f"{db}-wal")
    assert wal.stat().st_size > 0
    before = (sha256(db), db.stat().st_mtime_ns, sha256(wal))

    ledger = tmp_path / "out.jsonl"
    result = cli_backfill(demo, ledger, db)

    assert result.returncode == 0, result.stderr
    assert (sha256(db), db.stat().st_mtime_ns, sha256(wal)) == before  # nothing checkpointed, nothing written
    # The backfill did read the WAL (every session's agent was changed only there).
    agents = {line["outcome"]["metrics"]["session_agent"] for line in read_ledger_dicts(ledger) if line["role"] == "worker"}
    assert agents == {"agent-in-the-wal"}


# ---------------------------------------------------------------------------
# A full materialization writes nothing into any input
# ---------------------------------------------------------------------------


def input_hashes(demo: DemoLayout) -> dict[str, str]:
    """sha256 of every file under the round and the Claude projects folder, and of the store
    with its -wal/-shm/-journal when present; keyed by path, so a new file shows too."""
    hashes = {}
    for root in (demo.rounds[0], demo.claude_projects_dir):
        for base, dirs, files in os.walk(root):
            for name in dirs:
                hashes[os.path.join(base, name)] = "dir"
            for name in files:
                hashes[os.path.join(base, name)] = sha256(Path(base, name))
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(f"{demo.opencode_db}{suffix}")
        if path.exists():
            hashes[str(path)] = sha256(path)
    return hashes


def test_a_full_materialization_changes_no_input(demo: DemoLayout, tmp_path: Path) -> None:
    before = input_hashes(demo)
    mtimes = {path: os.stat(path).st_mtime_ns for path in before}

    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(demo, tmp_path / "ledgers"), SPEC.name)

    assert result.success, step_failures(result)
    assert len(result.get_asset_check_evaluations()) == len(CHECK_NAMES)
    assert input_hashes(demo) == before
    assert {path: os.stat(path).st_mtime_ns for path in before} == mtimes


# ---------------------------------------------------------------------------
# The command line refuses OUT inside the round
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["inside", "round-itself", "through-dot-dot", "through-a-symlink"])
def test_the_cli_refuses_an_out_path_inside_the_round(demo: DemoLayout, tmp_path: Path, where: str) -> None:
    round_dir = demo.rounds[0]
    link = tmp_path / "innocent-looking"
    link.symlink_to(round_dir / "runs", target_is_directory=True)
    out = {
        "inside": round_dir / "ledger.jsonl",
        "round-itself": round_dir,
        "through-dot-dot": tmp_path / ".." / os.path.relpath(round_dir, tmp_path.parent) / "new" / "ledger.jsonl",
        "through-a-symlink": link / "ledger.jsonl",
    }[where]
    before = input_hashes(demo)

    result = cli_backfill(demo, out, demo.opencode_db)

    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"rollout-assets: error: refusing to write the ledger OUT {out} inside the round outDir {round_dir}"
    )
    assert result.stdout == ""
    assert input_hashes(demo) == before  # no ledger, no temp or lock file, no folder created


# ---------------------------------------------------------------------------
# Dagster refuses a ledger root among the inputs
# ---------------------------------------------------------------------------


def tree_hashes(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (links not followed): files by content hash, so any write shows."""
    entries = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs:
            entries[os.path.join(base, name)] = "dir"
        for name in files:
            path = Path(base, name)
            entries[str(path)] = "link" if path.is_symlink() else sha256(path)
    return entries


def ledger_root_among_inputs(demo: DemoLayout, tmp_path: Path, where: str) -> tuple[Path, str]:
    """(a ledger root placed `where`, how the refusal describes it)."""
    rounds_root, claude = demo.rounds_root, demo.claude_projects_dir
    link = tmp_path / "innocent-looking"
    if where == "the-rounds-root":
        return rounds_root, f"it is the rounds root {rounds_root}"
    if where == "inside-a-round":
        return demo.rounds[0] / "ledgers", f"it lies inside the rounds root {rounds_root}"
    if where == "holding-the-rounds-root":
        return demo.root, f"it contains the rounds root {rounds_root}"
    if where == "inside-the-claude-projects-folder":
        return claude / "ledgers", f"it lies inside the Claude projects folder {claude}"
    if where == "a-symlink-to-the-rounds-root":
        link.symlink_to(rounds_root, target_is_directory=True)
        return link, f"it is the rounds root {rounds_root}"
    assert where == "through-a-symlink-into-a-round"
    link.symlink_to(demo.rounds[0], target_is_directory=True)
    return link / "ledgers", f"it lies inside the rounds root {rounds_root}"


@pytest.mark.parametrize(
    "where",
    [
        "the-rounds-root",
        "inside-a-round",
        "holding-the-rounds-root",
        "inside-the-claude-projects-folder",
        "a-symlink-to-the-rounds-root",
        "through-a-symlink-into-a-round",
    ],
)
def test_a_ledger_root_among_the_inputs_fails_the_run_before_anything_is_written(
    demo: DemoLayout, tmp_path: Path, where: str
) -> None:
    ledger_root, relation = ledger_root_among_inputs(demo, tmp_path, where)
    variable = "CLAUDE_PROJECTS_DIR" if "Claude" in relation else "ROLLOUT_ROUNDS_ROOT"
    before = tree_hashes(demo.root)

    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(demo, ledger_root), SPEC.name)

    assert not result.success
    assert step_failures(result) == {
        "round_manifest": (
            f"refusing ledger root {ledger_root}: {relation}, and inputs are never written; "
            f"set ROLLOUT_LEDGER_ROOT to a folder apart from {variable}"
        )
    }
    assert result.get_asset_materialization_events() == []
    assert tree_hashes(demo.root) == before  # no output, no folder, no temp or lock file


def test_every_stage_and_the_summary_refuse_a_ledger_root_among_the_inputs(
    demo: DemoLayout, tmp_path: Path
) -> None:
    # A run may select any one asset (the UI, `dagster asset materialize --select`): each checks.
    from dagster import materialize

    from rollout_assets.defs.assets import EXTERNAL_INPUTS, ROUND_ASSETS
    from rollout_assets.defs.checks import ROUND_CHECKS
    from rollout_assets.defs.summary import rounds_summary

    ledger_root = demo.rounds_root
    resources = round_resources(demo, ledger_root)
    expected = (
        f"refusing ledger root {ledger_root}: it is the rounds root {demo.rounds_root}, and inputs are never "
        "written; set ROLLOUT_LEDGER_ROOT to a folder apart from ROLLOUT_ROUNDS_ROOT"
    )
    before = tree_hashes(demo.root)
    failures = {}
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("rounds", [SPEC.name])
        for asset in [*ROUND_ASSETS, rounds_summary]:
            result = materialize(
                [*EXTERNAL_INPUTS, *ROUND_ASSETS, *ROUND_CHECKS, rounds_summary],
                selection=[asset.key],
                partition_key=None if asset is rounds_summary else SPEC.name,
                instance=instance,
                resources=resources,
                raise_on_error=False,
            )
            failures.update(step_failures(result))

    assert failures == {asset.key.to_user_string(): expected for asset in [*ROUND_ASSETS, rounds_summary]}
    assert tree_hashes(demo.root) == before


def store_inside_the_ledger_root(demo: DemoLayout, tmp_path: Path, where: str) -> tuple[Path, Path, Path, str]:
    """(ledger root, OPENCODE_DB, the store file inside the ledger root, how the refusal names it)."""
    ledger_root = tmp_path / "ledgers"
    inside = ledger_root / SPEC.name / "rollout-ledger.jsonl"  # the round's own ledger path
    inside.parent.mkdir(parents=True)
    if where == "the-rounds-ledger-path":
        shutil.copy2(demo.opencode_db, inside)
        return ledger_root, inside, inside, f"the opencode database {inside}"
    if where == "a-symlink-leading-to-the-ledger-path":
        shutil.copy2(demo.opencode_db, inside)
        link = tmp_path / "store" / "opencode.db"
        link.parent.mkdir()
        link.symlink_to(inside)
        return ledger_root, link, inside, f"the opencode database {link}"
    assert where == "its-wal-at-the-ledger-path"
    db = private_store(demo, tmp_path / "store")
    subprocess.run([sys.executable, "-c", WAL_WITH_FRAMES, str(db)], check=True, timeout=60)
    # The store's -wal file is reached through a link that leads to the round's ledger path.
    shutil.move(f"{db}-wal", inside)
    Path(f"{db}-wal").symlink_to(inside)
    return ledger_root, db, inside, f"{inside}, a file SQLite keeps beside the opencode database {db},"


@pytest.mark.parametrize(
    "where", ["the-rounds-ledger-path", "a-symlink-leading-to-the-ledger-path", "its-wal-at-the-ledger-path"]
)
def test_an_opencode_store_inside_the_ledger_root_is_refused_and_left_untouched(
    demo: DemoLayout, tmp_path: Path, where: str
) -> None:
    ledger_root, opencode_db, inside, named = store_inside_the_ledger_root(demo, tmp_path, where)
    before = tree_hashes(tmp_path)

    with instance_for_test() as instance:
        result = materialize_round(instance, round_resources(demo, ledger_root, opencode_db=opencode_db), SPEC.name)

    assert not result.success
    assert step_failures(result) == {
        "round_manifest": (
            f"refusing ledger root {ledger_root}: {named} lies inside it, and outputs there could overwrite the "
            "store; set ROLLOUT_LEDGER_ROOT to a folder that does not hold OPENCODE_DB"
        )
    }
    assert tree_hashes(tmp_path) == before  # the store, its WAL and the ledger root as they were
    if where != "its-wal-at-the-ledger-path":
        assert inside.read_bytes().startswith(b"SQLite format 3\x00")


def test_a_ledger_root_beside_the_inputs_is_accepted(demo: DemoLayout, tmp_path: Path) -> None:
    # Names that merely start like an input's are apart from it: containment is by path, not by text.
    from rollout_assets.defs.resources import ClaudeProjects, LedgerRoot, OpencodeDatabase, RoundsRoot

    inputs = (
        RoundsRoot(root_dir=str(demo.rounds_root)),
        OpencodeDatabase(path=str(demo.opencode_db)),
        ClaudeProjects(projects_dir=str(demo.claude_projects_dir)),
    )
    for beside in (f"{demo.rounds_root}-ledgers", f"{demo.claude_projects_dir}2", str(tmp_path / "ledgers")):
        LedgerRoot(root_dir=beside).check_apart_from_inputs(*inputs)


# ---------------------------------------------------------------------------
# Files read through a run folder stay inside the round or a configured root
# ---------------------------------------------------------------------------

SECRET = "aws_secret_access_key = do-not-copy-me"


def first_cell(demo: DemoLayout) -> tuple[Path, Path]:
    """(the first baseline cell's cache, its run folder)."""
    cache = sorted((demo.rounds[0] / "improve-run" / "baseline").iterdir())[0] / "cached-result.json"
    return cache, Path(json.loads(cache.read_text())["artifact"]["runDir"])


def secret_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / "credentials"
    secret.write_text(json.dumps(SECRET))
    secret.chmod(0o600)
    return secret


def test_the_demo_keeps_its_run_folders_inside_its_rounds(demo: DemoLayout) -> None:
    _, run_dir = first_cell(demo)
    assert run_dir.resolve().is_relative_to(demo.rounds[0].resolve())


@pytest.mark.parametrize("name", ["judge.json", "result.json"])
def test_a_run_folder_file_symlinked_out_of_the_round_is_never_copied(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A judge.json symlinked to a private credentials file put its content into
    outcome.verdict; now it reads as missing, with a warning naming it."""
    monkeypatch.delenv("ROLLOUT_RUN_DIR_ROOTS", raising=False)
    _, run_dir = first_cell(demo)
    secret = secret_file(tmp_path / "home")
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(secret)

    result = cli_backfill(demo, tmp_path / "ledger.jsonl", demo.opencode_db)

    assert result.returncode == 0, result.stderr
    assert SECRET not in (tmp_path / "ledger.jsonl").read_text()
    assert f"{run_dir / name} resolves to {secret}, outside the round {demo.rounds[0]}" in result.stderr
    lines = list(read_ledger_dicts(tmp_path / "ledger.jsonl"))
    supervisor = next(line for line in lines if line["role"] == "supervisor")
    if name == "judge.json":
        assert supervisor["outcome"]["verdict"] is None
    else:
        assert supervisor["provenance"]["gap"].endswith(
            "result.json missing: this cell's worker sessions cannot be listed"
        )


def test_a_run_folder_outside_the_round_is_read_only_under_a_configured_root(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, run_dir = first_cell(demo)
    elsewhere = tmp_path / "runs-elsewhere" / run_dir.name
    shutil.move(run_dir, elsewhere)
    record = json.loads(cache.read_text())
    record["artifact"]["runDir"] = str(elsewhere)
    cache.write_text(json.dumps(record))

    monkeypatch.delenv("ROLLOUT_RUN_DIR_ROOTS", raising=False)
    refused = cli_backfill(demo, tmp_path / "refused.jsonl", demo.opencode_db)
    monkeypatch.setenv("ROLLOUT_RUN_DIR_ROOTS", f"/nonexistent:{tmp_path / 'runs-elsewhere'}")
    read = cli_backfill(demo, tmp_path / "read.jsonl", demo.opencode_db)

    assert (refused.returncode, read.returncode) == (0, 0)
    assert "outside the round" in refused.stderr and "outside the round" not in read.stderr
    verdicts = [
        next(line for line in read_ledger_dicts(tmp_path / ledger) if line["role"] == "supervisor")[
            "outcome"
        ]["verdict"]
        for ledger in ("refused.jsonl", "read.jsonl")
    ]
    assert verdicts[0] is None
    assert verdicts[1] == json.loads((elsewhere / "judge.json").read_text())


def test_the_audit_reads_no_result_json_outside_the_round_either(
    demo: DemoLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's own reading of result.json applies the same rule: a ledger whose supervisor
    says the workers cannot be listed passes, and the join's ledger of the round passes."""
    from rollout_assets import audit

    monkeypatch.delenv("ROLLOUT_RUN_DIR_ROOTS", raising=False)
    _, run_dir = first_cell(demo)
    moved = tmp_path / "home" / "result.json"
    moved.parent.mkdir()
    shutil.move(run_dir / "result.json", moved)
    (run_dir / "result.json").symlink_to(moved)
    ledger = tmp_path / "ledger.jsonl"
    assert cli_backfill(demo, ledger, demo.opencode_db).returncode == 0

    inputs = audit.recount_inputs(demo.rounds[0], demo.opencode_db, claude_projects=demo.claude_projects_dir)
    recount = audit.recount_ledger(ledger)

    assert inputs.cells_without_worker_list
    for verdict in (audit.inputs_match_verdict, audit.workers_verdict, audit.gaps_warranted_verdict):
        result = verdict(inputs, recount)
        assert (result.passed, result.sample) == (True, [])
