"""The whole Dagster layer as `dagster dev` loads it: assets, lineage, checks, job, sensor,
resources and their environment variables, the code-location pointers, and the partition-key rule."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, AutomationCondition, DefaultSensorStatus, Definitions, EnvVar

import rollout_assets.definitions as definitions_module
from rollout_assets.defs.partitions import ROUNDS, InvalidRoundKey, round_key_problem, validate_round_key
from rollout_assets.defs.resources import LedgerRoot, RoundsRoot

PROJECT_DIR = Path(__file__).resolve().parent.parent
OWNERS = ["team:rollouts"]
ENV_VARS = (
    "ROLLOUT_ROUNDS_ROOT",
    "OPENCODE_DB",
    "CLAUDE_PROJECTS_DIR",
    "ROLLOUT_LEDGER_ROOT",
    "ROLLOUT_QUIET_PERIOD_SECONDS",
)

# key -> (kinds, description); every one is in group `rounds`, partitioned by `rounds`
ROUND_ASSETS = {
    "round_manifest": (
        {"python", "json"},
        "The manifest of one round: generations, candidates, commits, resolved counts and cost.",
    ),
    "campaign_cells": (
        {"python", "jsonl"},
        "The campaign cells of one round, each with its supervisor line, reward and worker cwds.",
    ),
    "worker_sessions": (
        {"python", "sqlite", "jsonl"},
        "The worker lines of one round, joined from the opencode store, gap lines included.",
    ),
    "proposer_transcripts": (
        {"python", "jsonl"},
        "The proposer lines of one round, joined to Claude Code transcripts by time window.",
    ),
    "rollout_ledger": (
        {"python", "jsonl"},
        "The validated tangle.rollout.v1 ledger of one round, one line per agent invocation.",
    ),
    "rollout_stats": (
        {"python", "json"},
        "The counters of one round's ledger, per role and per gap reason.",
    ),
}
# key -> (kinds, description, partitioned by `rounds`); every one is in group `sources`
EXTERNAL_INPUTS = {
    "round_outdir": (
        {"file"},
        "A round's outDir under the rounds root, as the improvement loop wrote it.",
        True,
    ),
    "opencode_db": (
        {"sqlite"},
        "The opencode SQLite store holding worker sessions (read-only).",
        False,
    ),
    "claude_projects": (
        {"file"},
        "The Claude Code projects folder holding proposer transcripts (read-only).",
        False,
    ),
}
LINEAGE = {
    "round_manifest": {"round_outdir"},
    "campaign_cells": {"round_manifest", "round_outdir"},
    "worker_sessions": {"campaign_cells", "opencode_db"},
    "proposer_transcripts": {"round_manifest", "round_outdir", "claude_projects"},
    "rollout_ledger": {"campaign_cells", "worker_sessions", "proposer_transcripts"},
    "rollout_stats": {"rollout_ledger"},
}
# check name -> (asset, blocking)
CHECKS = {
    "every_cell_has_one_supervisor_line": ("rollout_ledger", True),
    "every_worker_session_accounted_for": ("rollout_ledger", True),
    "every_shot_receipt_has_one_proposer_line": ("rollout_ledger", True),
    "every_line_is_its_invocation_in_order": ("rollout_ledger", True),
    "every_gap_is_warranted": ("rollout_ledger", True),
    "every_usage_is_its_transcripts": ("rollout_ledger", True),
    "ledger_lines_valid_and_linked": ("rollout_ledger", True),
    "stats_reconcile_with_ledger": ("rollout_stats", True),
    "every_cell_lists_its_workers": ("campaign_cells", False),
}


@pytest.fixture(scope="module")
def defs() -> Definitions:
    return definitions_module.defs


@pytest.fixture(scope="module")
def specs(defs: Definitions) -> dict:
    return {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}


def test_definitions_are_loadable(defs: Definitions) -> None:
    Definitions.validate_loadable(defs)


# ---------------------------------------------------------------------------
# Assets and lineage
# ---------------------------------------------------------------------------


def test_group_rounds_holds_exactly_the_six_round_assets(specs: dict) -> None:
    assert {key for key, spec in specs.items() if spec.group_name == "rounds"} == set(ROUND_ASSETS)


def test_group_sources_holds_exactly_the_three_external_inputs(specs: dict) -> None:
    assert {key for key, spec in specs.items() if spec.group_name == "sources"} == set(EXTERNAL_INPUTS)


def test_group_inspect_holds_the_inspect_logs_of_a_round_downstream_of_its_ledger(specs: dict) -> None:
    spec = specs["inspect_logs"]

    assert {key for key, spec in specs.items() if spec.group_name == "inspect"} == {"inspect_logs"}
    assert (spec.kinds, spec.owners, spec.description) == (
        {"python", "inspect"},
        OWNERS,
        "Every line of one round's ledger as an Inspect sample, one eval log per role and candidate.",
    )
    assert spec.partitions_def == ROUNDS
    assert {dep.asset_key.to_user_string() for dep in spec.deps} == {"rollout_ledger"}


@pytest.mark.parametrize("key", sorted(ROUND_ASSETS))
def test_round_asset_is_described_owned_and_partitioned_by_round(specs: dict, key: str) -> None:
    kinds, description = ROUND_ASSETS[key]
    spec = specs[key]

    assert (spec.group_name, spec.kinds, spec.owners, spec.description) == (
        "rounds",
        kinds,
        OWNERS,
        description,
    )
    assert spec.partitions_def == ROUNDS


@pytest.mark.parametrize("key", sorted(EXTERNAL_INPUTS))
def test_external_input_is_described_owned_and_not_materializable(
    defs: Definitions, specs: dict, key: str
) -> None:
    kinds, description, partitioned = EXTERNAL_INPUTS[key]
    spec = specs[key]
    node = defs.resolve_asset_graph().get(AssetKey(key))

    assert (spec.group_name, spec.kinds, spec.owners, spec.description) == (
        "sources",
        kinds,
        OWNERS,
        description,
    )
    assert spec.partitions_def == (ROUNDS if partitioned else None)
    assert (node.is_external, node.is_materializable) == (True, False)


@pytest.mark.parametrize("key", sorted(LINEAGE))
def test_round_asset_depends_exactly_on_its_upstreams(specs: dict, key: str) -> None:
    assert {dep.asset_key.to_user_string() for dep in specs[key].deps} == LINEAGE[key]


def test_rounds_partitions_are_one_dynamic_definition_named_rounds() -> None:
    assert ROUNDS.name == "rounds"


# ---------------------------------------------------------------------------
# Job, sensor, checks
# ---------------------------------------------------------------------------


TRAINING_ASSETS = {"sft_rows", "preference_pairs", "grpo_groups", "training_report"}


def test_materialize_round_job_selects_the_rounds_training_and_inspect_groups_and_their_checks(defs: Definitions) -> None:
    from rollout_assets.training.verify import CHECKS as TRAINING_CHECKS

    job = defs.resolve_job_def("materialize_round")

    assert {key.to_user_string() for key in job.asset_layer.executable_asset_keys} == (
        set(ROUND_ASSETS) | TRAINING_ASSETS | {"inspect_logs"}
    )
    assert job.partitions_def == ROUNDS
    check_steps = {f"{asset}_{name}" for name, (asset, _) in CHECKS.items()}
    check_steps |= {f"{dataset}_{name}" for dataset, names in TRAINING_CHECKS.items() for name in names}
    assert check_steps <= {node.name for node in job.nodes}


def test_round_sensor_runs_by_default_and_targets_the_round_job(defs: Definitions) -> None:
    sensor = defs.resolve_sensor_def("round_dirs_sensor")

    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.job_name == "materialize_round"


def test_summary_automation_sensor_runs_by_default_and_covers_only_the_summary(defs: Definitions) -> None:
    sensor = defs.resolve_sensor_def("rounds_summary_automation")

    # Dagster's default automation sensor starts stopped; this one does not.
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.asset_selection.resolve(defs.resolve_asset_graph()) == {AssetKey("rounds_summary")}


def test_summary_automation_is_eager_without_waiting_for_rounds_without_stats(defs: Definitions) -> None:
    condition = defs.resolve_asset_graph().get(AssetKey("rounds_summary")).automation_condition
    eager = AutomationCondition.eager()

    assert ~AutomationCondition.any_deps_missing() in eager.children
    assert condition.children == [
        child for child in eager.children if child != ~AutomationCondition.any_deps_missing()
    ]


def test_the_round_checks_are_exactly_these_on_their_assets(defs: Definitions) -> None:
    keys = defs.resolve_asset_graph().asset_check_keys
    round_assets = set(ROUND_ASSETS)
    assert {(key.name, key.asset_key.to_user_string()) for key in keys if key.asset_key.to_user_string() in round_assets} == {
        (name, asset) for name, (asset, _) in CHECKS.items()
    }


def test_the_training_and_release_checks_are_the_ones_their_recounts_run(defs: Definitions) -> None:
    from rollout_assets.release.verify import RELEASE_CHECKS
    from rollout_assets.training.verify import CHECKS as TRAINING_CHECKS

    keys = defs.resolve_asset_graph().asset_check_keys
    others = {(key.name, key.asset_key.to_user_string()) for key in keys} - {
        (name, asset) for name, (asset, _) in CHECKS.items()
    }
    expected = {(name, dataset) for dataset, names in TRAINING_CHECKS.items() for name in names}
    expected |= {(name, "dataset_release") for name in RELEASE_CHECKS}
    assert others == expected


def test_the_ledgers_blocking_checks_are_the_ones_whose_verdicts_are_asked(defs: Definitions) -> None:
    from rollout_assets.defs.constants import LEDGER_BLOCKING_CHECKS

    blocking = {
        spec.name for checks in defs.asset_checks for spec in checks.check_specs
        if spec.blocking and spec.asset_key == AssetKey("rollout_ledger")
    }  # fmt: skip
    assert blocking == set(LEDGER_BLOCKING_CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_check_is_partitioned_by_round_and_blocking_as_designed(defs: Definitions, name: str) -> None:
    (checks_def,) = [c for c in defs.asset_checks if any(spec.name == name for spec in c.check_specs)]
    (spec,) = checks_def.check_specs

    assert checks_def.partitions_def == ROUNDS
    assert spec.blocking is CHECKS[name][1]
    assert spec.description


# ---------------------------------------------------------------------------
# Resources from the environment
# ---------------------------------------------------------------------------


@pytest.fixture
def load_definitions(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Definitions]]:
    """Re-import `rollout_assets.definitions` under the given environment (other variables unset)."""

    def load(**env: str) -> Definitions:
        for variable in ENV_VARS:
            monkeypatch.delenv(variable, raising=False)
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        return importlib.reload(definitions_module).defs

    yield load
    monkeypatch.undo()
    importlib.reload(definitions_module)


def test_resources_read_their_environment_variables(
    load_definitions: Callable[..., Definitions], tmp_path: Path
) -> None:
    defs = load_definitions(
        ROLLOUT_ROUNDS_ROOT=str(tmp_path / "rounds"),
        OPENCODE_DB=str(tmp_path / "opencode.db"),
        CLAUDE_PROJECTS_DIR=str(tmp_path / "claude"),
        ROLLOUT_LEDGER_ROOT=str(tmp_path / "ledgers"),
        ROLLOUT_QUIET_PERIOD_SECONDS="7",
    )
    resources = defs.resources
    locations = resources["locations"]

    # Bound as EnvVar, so the UI shows the variable and a run resolves it.
    assert [type(getattr(locations, name)).__name__ for name in ("rounds_root", "opencode", "claude", "ledger_root")] == [
        "RoundsRoot", "OpencodeDatabase", "ClaudeProjects", "LedgerRoot",
    ]  # fmt: skip
    assert isinstance(locations.rounds_root.root_dir, EnvVar)
    with locations.process_config_and_initialize_cm() as resolved:
        assert resolved.rounds_root.path == tmp_path / "rounds"
        assert resolved.opencode.db_path == tmp_path / "opencode.db"
        assert resolved.claude.path == tmp_path / "claude"
        assert resolved.ledger_root.path == tmp_path / "ledgers"
    assert resources["round_discovery"].process_config_and_initialize().quiet_period_seconds == 7


def test_resources_fall_back_to_the_documented_defaults(load_definitions: Callable[..., Definitions]) -> None:
    resources = load_definitions().resources
    locations = resources["locations"]
    home = os.path.expanduser("~")

    assert locations.rounds_root.root_dir == "./rounds"
    assert locations.ledger_root.root_dir == "./ledgers"
    assert locations.rounds_root.path == Path.cwd() / "rounds"
    assert locations.ledger_root.path == Path.cwd() / "ledgers"
    assert locations.opencode.db_path == Path(home, ".local", "share", "opencode", "opencode.db")
    assert locations.claude.path == Path(home, ".claude", "projects")
    assert resources["round_discovery"].quiet_period_seconds == 120


def test_the_rounds_root_and_ledger_root_are_bound_once_for_every_user(
    load_definitions: Callable[..., Definitions], tmp_path: Path
) -> None:
    # The sensor and `rollout-assets materialize` use the very objects the assets and checks do.
    resources = load_definitions(ROLLOUT_ROUNDS_ROOT=str(tmp_path / "rounds")).resources

    assert sorted(resources) == ["ledger_root", "locations", "round_discovery", "rounds_root"]
    assert resources["rounds_root"] is resources["locations"].rounds_root
    assert resources["ledger_root"] is resources["locations"].ledger_root


def test_the_resources_docstring_table_names_exactly_the_bound_resources(defs: Definitions) -> None:
    from rollout_assets.defs import resources as resources_module

    rows = [line.split("|") for line in resources_module.__doc__.splitlines() if line.startswith("| ")]
    documented = {(row[1].strip(), row[2].strip()) for row in rows[1:] if not row[1].startswith("   .")}
    assert documented == {(key, type(resource).__name__) for key, resource in defs.resources.items()}


@pytest.mark.parametrize(("value", "expected"), [("5", 5), (None, 60)])
def test_sensor_interval_comes_from_the_environment(value: str | None, expected: int) -> None:
    env = {key: val for key, val in os.environ.items() if key != "ROLLOUT_SENSOR_INTERVAL_SECONDS"}
    if value is not None:
        env["ROLLOUT_SENSOR_INTERVAL_SECONDS"] = value
    code = "from rollout_assets.defs.sensors import round_dirs_sensor as s; print(s.minimum_interval_seconds)"

    completed = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        check=False,
        env=env,
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
    )

    assert completed.stdout == f"{expected}\n", completed.stderr


@pytest.mark.parametrize(
    ("variable", "minimum", "default"),
    [("ROLLOUT_SENSOR_INTERVAL_SECONDS", 1, 60), ("ROLLOUT_QUIET_PERIOD_SECONDS", 0, 120)],
)
@pytest.mark.parametrize("value", ["2m", "1.5", "-3"])
def test_a_seconds_variable_that_is_no_whole_number_stops_loading_with_one_sentence(
    variable: str, minimum: int, default: int, value: str
) -> None:
    env = {key: val for key, val in os.environ.items() if not key.startswith("ROLLOUT_")}
    env[variable] = value

    completed = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "import rollout_assets.definitions"],
        check=False, env=env, cwd=PROJECT_DIR, capture_output=True, text=True,
    )  # fmt: skip

    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == (
        f"rollout_assets.defs.resources.ConfigurationError: {variable}={value!r} is not a whole number of seconds "
        f"of at least {minimum}: set it to one (for example {default}, the default) or unset it"
    )


def _materialize_command(**variables: str) -> subprocess.CompletedProcess[str]:
    """`rollout-assets materialize` with only `variables` of the ROLLOUT_/DAGSTER_ ones set."""
    env = {key: val for key, val in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(variables)
    return subprocess.run(
        [str(Path(sys.executable).parent / "rollout-assets"), "materialize"],
        check=False, env=env, cwd=PROJECT_DIR, capture_output=True, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("variable", ["ROLLOUT_SENSOR_INTERVAL_SECONDS", "ROLLOUT_QUIET_PERIOD_SECONDS"])
def test_rollout_assets_materialize_names_a_wrong_seconds_variable_in_one_line(variable: str, tmp_path: Path) -> None:
    completed = _materialize_command(**{variable: "2m", "ROLLOUT_ROUNDS_ROOT": str(tmp_path)})

    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [
        f"rollout-assets: error: {variable}='2m' is not a whole number of seconds of at least "
        f"{1 if variable == 'ROLLOUT_SENSOR_INTERVAL_SECONDS' else 0}: set it to one (for example "
        f"{60 if variable == 'ROLLOUT_SENSOR_INTERVAL_SECONDS' else 120}, the default) or unset it"
    ]


def test_rollout_assets_materialize_names_a_rounds_root_it_cannot_list_in_one_line(tmp_path: Path) -> None:
    completed = _materialize_command(
        ROLLOUT_ROUNDS_ROOT=str(tmp_path / "no-such-rounds"), ROLLOUT_LEDGER_ROOT=str(tmp_path / "ledgers")
    )

    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        "DAGSTER_HOME is not set: using a temporary instance (nothing is kept for the UI)",
        f"rollout-assets: error: rounds root {tmp_path / 'no-such-rounds'} cannot be listed (No such file or "
        "directory): set ROLLOUT_ROUNDS_ROOT",
    ]


def test_an_empty_seconds_variable_means_the_default(load_definitions: Callable[..., Definitions]) -> None:
    resources = load_definitions(ROLLOUT_QUIET_PERIOD_SECONDS="").resources
    assert resources["round_discovery"].quiet_period_seconds == 120


# ---------------------------------------------------------------------------
# Code-location pointers
# ---------------------------------------------------------------------------


def test_workspace_yaml_loads_the_definitions_module() -> None:
    workspace = yaml.safe_load((PROJECT_DIR / "workspace.yaml").read_text(encoding="utf-8"))
    assert workspace == {
        "load_from": [
            {
                "python_module": {
                    "module_name": "rollout_assets.definitions",
                    "working_directory": ".",
                    "location_name": "rollout_assets",
                }
            }
        ]
    }


def test_pyproject_points_dagster_at_the_definitions_module() -> None:
    pyproject = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["tool"]["dagster"] == {
        "module_name": "rollout_assets.definitions",
        "code_location_name": "rollout_assets",
    }


# ---------------------------------------------------------------------------
# The partition key rule
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["round-001", "r", "7", "Round_2026.12.02", "a.b-c_d", "x" * 100, "0-starts-with-a-digit"],
)
def test_round_key_is_accepted(name: str) -> None:
    assert round_key_problem(name) is None
    assert validate_round_key(name) == name


GENERIC = "must start with a letter or digit and hold at most 100 letters, digits, '.', '_' or '-'"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("round 001", GENERIC),
        ("a..b", "must not contain '..'"),
        ("round-001..", "must not contain '..'"),
        ("..", GENERIC),
        (".hidden", GENERIC),
        ("-dash", GENERIC),
        ("_underscore", GENERIC),
        ("x" * 101, GENERIC),
        ("rönd-001", GENERIC),
        ("ラウンド", GENERIC),
        ("a/b", GENERIC),
        ("", GENERIC),
        ("round-001\n", GENERIC),
        ("round\t1", GENERIC),
        ("a,b", GENERIC),
    ],
)
def test_round_key_is_refused_with_the_reason(name: str, why: str) -> None:
    assert round_key_problem(name) == f"round name {name!r} is not a valid partition key: it {why}"
    with pytest.raises(InvalidRoundKey, match="is not a valid partition key"):
        validate_round_key(name)


@pytest.mark.parametrize("name", ["rounds-summary.parquet", "Rounds-Summary.PARQUET"])
def test_round_key_naming_a_file_of_the_ledger_root_is_refused(name: str) -> None:
    # Compared without case: on a case-insensitive file system both are the summary file.
    assert round_key_problem(name) == (
        f"round name {name!r} is not a valid partition key: it is the name of the cross-round summary file at "
        "the ledger root, where the round's folder would collide with it; rename the round directory"
    )
    with pytest.raises(InvalidRoundKey):
        LedgerRoot(root_dir="/nowhere").outputs(name)
    assert round_key_problem("rounds-summary.parquet2") is None  # only the exact name is reserved


def test_ledger_root_outputs_of_a_valid_key_stay_inside_the_root(tmp_path: Path) -> None:
    outputs = LedgerRoot(root_dir=str(tmp_path)).outputs("round-001")
    assert outputs.folder == tmp_path / "round-001"
    assert outputs.ledger == tmp_path / "round-001" / "rollout-ledger.jsonl"


HOSTILE_KEYS = ["..", "../escape", "../../etc", "/etc", "a/../../b", "round-001/../../x", ".", "", "~root"]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_ledger_root_refuses_a_hostile_key(tmp_path: Path, key: str) -> None:
    root = tmp_path / "ledgers"
    root.mkdir()
    ledger_root = LedgerRoot(root_dir=str(root))

    with pytest.raises(InvalidRoundKey):
        ledger_root.outputs(key)
    with pytest.raises(InvalidRoundKey):
        ledger_root.writable_outputs(key)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["ledgers"]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_rounds_root_refuses_a_hostile_key(tmp_path: Path, key: str) -> None:
    with pytest.raises(InvalidRoundKey):
        RoundsRoot(root_dir=str(tmp_path)).round_dir(key)


def _core_modules() -> list[str]:
    """Every module of the domain core: the package less the Dagster layer (defs/, definitions.py,
    and materialize.py, which runs rounds through Dagster for the command line)."""
    package = Path(definitions_module.__file__).parent
    dagster_layer = {"defs", "definitions", "materialize"}
    modules = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[0] in dagster_layer:
            continue
        modules.append(".".join(("rollout_assets", *(part for part in parts if part != "__init__"))))
    return modules


def test_the_domain_core_imports_no_dagster() -> None:
    """The schema, readers, join, stages, audit and summary run, test and benchmark without
    Dagster; the Dagster layer imports them, never the other way round."""
    modules = _core_modules()
    assert "rollout_assets.sources.fingerprint" in modules and "rollout_assets.audit" in modules
    code = f"import importlib, sys\nfor name in {modules!r}: importlib.import_module(name)\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {{'dagster', 'dagster_webserver', 'dagster_graphql'}}))"
    completed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert completed.stdout.strip() == "[]"


def test_the_definitions_import_neither_pandas_nor_pyarrow_nor_the_secret_scanner() -> None:
    """Every Dagster process of the project imports the definitions; pandas and pyarrow alone
    would add ~120 MiB to each, and only the summary, training and release steps use them."""
    code = "import sys, rollout_assets.definitions\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'pyarrow', 'detect_secrets'}))"
    completed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert completed.stdout.strip() == "[]"


def test_the_definitions_do_not_import_inspect() -> None:
    """The code location loads the definitions for every run; inspect_ai (about a second and
    50 MB) is imported by the inspect_logs step alone, when it runs."""
    code = "import sys, rollout_assets.definitions\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'inspect_ai', 'zstandard'}))"
    completed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert completed.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# The import graph of the package
# ---------------------------------------------------------------------------


def _package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    package = Path(definitions_module.__file__).parent
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The names an import statement of `module` imports: `from X import Y` imports module X.Y
    when there is one, else X. Relative imports are resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join([*anchor[: len(anchor) - node.level + 1], *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at the top or inside a function (a lazy import hides
    a cycle at import time, not from the reader), but not under `if TYPE_CHECKING:`, which never
    runs (the idiom for an annotation's type from a module that imports this one)."""
    for_typing = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and "TYPE_CHECKING" in ast.unparse(guard.test)
        for statement in guard.body
        for node in ast.walk(statement)
    }
    return [
        node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in for_typing
    ]


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (see `_runtime_imports`)."""
    modules = _package_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        imported: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = _imported(node, module, path.name == "__init__.py")
            # `from X import Y`: module X.Y if there is one, else X itself.
            first = next((name for name in names if name in modules), None)
            if first is not None:
                imported.add(first)
        graph[module] = imported - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: each strongly connected group of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


def test_every_module_of_the_package_imports() -> None:
    for module in _package_modules():
        importlib.import_module(module)


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_import_graph()) == []


def test_the_import_graph_holds_imports_made_inside_functions() -> None:
    graph = _import_graph()
    # `rollout-assets materialize` imports the definitions only when it runs.
    assert "rollout_assets.definitions" in graph["rollout_assets.materialize"]
    assert "rollout_assets.defs.failures" in graph["rollout_assets.defs.assets.stats"]
    assert "rollout_assets.defs.instance" in graph["rollout_assets.defs.failures"]


def test_the_import_graph_leaves_out_imports_for_type_checking_only() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import B\n"
        "def f():\n    import c\n"
    )
    assert [ast.unparse(node) for node in _runtime_imports(tree)] == ["from typing import TYPE_CHECKING", "import c"]


def test_the_cycle_finder_finds_every_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_the_package_uses_only_the_public_dagster_api() -> None:
    private = [
        (module, name)
        for module, path in _package_modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in ([alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if name.startswith("dagster._")
    ]
    assert private == []
