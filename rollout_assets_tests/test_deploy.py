"""The shipped instance configurations, and the same definitions on PostgreSQL storage."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance
from dagster._config import process_config
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.instance.config import (
    get_default_tick_retention_settings,
    get_tick_retention_settings,
    retention_config_schema,
)
from dagster._core.scheduler.instigation import TickStatus

from rollout_assets.demo import DEFAULT_ROUNDS, write_demo
from rollout_assets_tests.dagster_rounds import CHECK_NAMES
from rollout_assets_tests.postgres_server import postgres_bin_dir, run_postgres

PROJECT = Path(__file__).resolve().parents[1]
DEPLOY = PROJECT / "deploy"


def _instance_from(config_file: Path, home: Path) -> DagsterInstance:
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(config_file, home / "dagster.yaml")
    return DagsterInstance.from_config(str(home))


def _per_round_limit(concurrency: dict) -> list[dict]:
    return [
        limit
        for limit in concurrency["runs"]["tag_concurrency_limits"]
        if limit["key"] == "dagster/partition" and limit["value"] == {"applyLimitPerUniqueValue": True}
    ]


def test_local_instance_turns_telemetry_off_and_runs_one_run_per_round(tmp_path: Path) -> None:
    instance = _instance_from(DEPLOY / "local" / "dagster.yaml", tmp_path / "home")
    assert instance.telemetry_enabled is False
    limits = instance.run_coordinator.get_run_tag_limits() if hasattr(instance.run_coordinator, "get_run_tag_limits") else None
    config = yaml.safe_load((DEPLOY / "local" / "dagster.yaml").read_text())
    assert _per_round_limit(config["concurrency"]) == [
        {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    ]
    assert limits is None or limits  # the coordinator accepted the configuration


K8S_ENVIRONMENT = {
    "DAGSTER_RUN_IMAGE": "registry.example/rollout-assets:1",
    "DAGSTER_PG_HOST": "dagster-postgresql",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "secret",
}


def test_k8s_configuration_validates_against_the_launcher_and_storage_schemas(monkeypatch) -> None:
    from dagster_k8s import K8sRunLauncher
    from dagster_postgres import DagsterPostgresStorage

    for name, value in K8S_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    config = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())
    assert config["run_launcher"]["class"] == "K8sRunLauncher"
    launcher = process_config(K8sRunLauncher.config_type(), config["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    storage = process_config(DagsterPostgresStorage.config_type(), config["storage"]["postgres"])
    assert storage.success, storage.errors
    assert config["telemetry"] == {"enabled": False}
    assert len(_per_round_limit(config["concurrency"])) == 1


def test_a_broken_launcher_configuration_is_refused(monkeypatch) -> None:
    # The validation above can fail: a misspelt key is an error.
    from dagster_k8s import K8sRunLauncher

    for name, value in K8S_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    config = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())["run_launcher"]["config"]
    config["job_namespce"] = config.pop("job_namespace")
    assert not process_config(K8sRunLauncher.config_type(), config).success


def test_dockerfile_serves_the_definitions_over_grpc() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "pip install --no-cache-dir '.[deploy]'" in dockerfile
    assert '"-m", "rollout_assets.definitions"' in dockerfile
    workspace = yaml.safe_load((DEPLOY / "k8s" / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["grpc_server"]["location_name"] == "rollout_assets"


@pytest.fixture
def postgres():
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")
    yield from run_postgres()


@pytest.mark.slow
def test_two_rounds_materialize_in_parallel_on_postgres_storage(tmp_path: Path, postgres) -> None:
    layout = write_demo(tmp_path / "demo", DEFAULT_ROUNDS[:2])
    rounds = [path.name for path in layout.rounds]
    home = tmp_path / "dagster_home"
    env = {
        **os.environ,
        **postgres.environment(),
        "DAGSTER_HOME": str(home),
        **layout.environment(tmp_path / "ledgers"),
    }
    os.environ.update(postgres.environment())
    try:
        instance = _instance_from(DEPLOY / "postgres" / "dagster.yaml", home)
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        instance.add_dynamic_partitions("rounds", rounds)

        dagster = str(Path(sys.executable).parent / "dagster")
        processes = [
            subprocess.Popen(
                [dagster, "asset", "materialize", "-m", "rollout_assets.definitions",
                 "--select", "group:rounds", "--partition", key],
                cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for key in rounds
        ]
        outputs = [process.communicate(timeout=600)[0] for process in processes]
        assert [process.returncode for process in processes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]

        runs = instance.get_runs()
        assert sorted(run.tags["dagster/partition"] for run in runs) == sorted(rounds)
        for run in runs:
            logs = instance.all_logs(run.run_id)
            messages = [entry.message for entry in logs]
            # The project's executor: steps in the run's process, which forks its own workers.
            assert any("Executing steps in process" in message for message in messages)
            evaluations = [
                entry.dagster_event.event_specific_data
                for entry in logs
                if entry.dagster_event and entry.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            ]
            assert len(evaluations) == len(CHECK_NAMES)
            blocking = [e for e in evaluations if e.check_name != "every_cell_lists_its_workers"]
            assert all(e.passed for e in blocking)
        # The two runs overlapped in time: they really ran in parallel.
        records = sorted(instance.get_run_records(), key=lambda record: record.start_time)
        assert records[1].start_time < records[0].end_time
        for key in rounds:
            ledger = tmp_path / "ledgers" / key / "rollout-ledger.jsonl"
            stats = json.loads((tmp_path / "ledgers" / key / "rollout-stats.json").read_text())
            assert sum(1 for _ in ledger.open()) == stats["lines"] > 0
    finally:
        for name in postgres.environment():
            os.environ.pop(name, None)



@pytest.mark.parametrize("deployment", ["local", "postgres", "k8s"])
def test_sensor_ticks_that_request_nothing_are_kept_one_day(deployment: str) -> None:
    """The sensor's cursor, stored in every tick, grows with the rounds: skipped ticks must not pile up."""
    config = yaml.safe_load((DEPLOY / deployment / "dagster.yaml").read_text())
    checked = process_config(retention_config_schema().config_type, config["retention"])
    assert checked.success, checked.errors
    retention = get_tick_retention_settings(
        checked.value["sensor"], get_default_tick_retention_settings(InstigatorType.SENSOR)
    )
    assert retention[TickStatus.SKIPPED] == 1
    assert retention[TickStatus.SUCCESS] == -1  # ticks that started runs: kept, as Dagster keeps them


def test_the_local_instance_applies_the_sensor_tick_retention(tmp_path: Path) -> None:
    instance = _instance_from(DEPLOY / "local" / "dagster.yaml", tmp_path / "home")
    assert instance.get_tick_retention_settings(InstigatorType.SENSOR)[TickStatus.SKIPPED] == 1


def test_a_run_whose_process_died_does_not_hold_its_round_for_ever(tmp_path: Path) -> None:
    """The default launcher cannot see a killed run's process: only a maximum runtime fails it,
    freeing the per-round limit for the round's later runs."""
    instance = _instance_from(DEPLOY / "local" / "dagster.yaml", tmp_path / "home")
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_max_runtime_seconds == 6 * 3600
    postgres = yaml.safe_load((DEPLOY / "postgres" / "dagster.yaml").read_text())
    assert postgres["run_monitoring"]["max_runtime_seconds"] == 6 * 3600
