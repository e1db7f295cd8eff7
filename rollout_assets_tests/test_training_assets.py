"""The training assets and their checks on a real Dagster instance, over a demo round."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import AssetSelection, DagsterInstance, materialize

from rollout_assets.defs.assets.training import TRAINING_ASSETS
from rollout_assets.defs.training_checks import TRAINING_CHECKS
from rollout_assets.training.verify import CHECKS
from rollout_assets_tests.dagster_rounds import (
    ALL_ROUND_DEFS,
    ROUND,
    evaluations,
    materialize_round,
    materializations,
    metadata_values,
    round_resources,
    step_failures,
    write_rounds,
)

ALL_DEFS = [*ALL_ROUND_DEFS, *TRAINING_ASSETS, *TRAINING_CHECKS]
TRAINING_CHECK_NAMES = {name for names in CHECKS.values() for name in names}


@pytest.fixture
def demo(tmp_path: Path):
    layout = write_rounds(tmp_path / "demo")
    return layout, round_resources(layout, tmp_path / "ledgers"), tmp_path / "ledgers" / ROUND


def _materialize(instance: DagsterInstance, resources: dict, selection=None):
    return materialize(
        ALL_DEFS, selection=selection, partition_key=ROUND, instance=instance, resources=resources,
        raise_on_error=False,
    )  # fmt: skip


def test_a_round_is_trainable_in_the_same_run(demo) -> None:
    _, resources, folder = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)  # adds the partition; round assets only
        result = _materialize(instance, resources)
        assert result.success, step_failures(result)
        found = materializations(result)
        sft = metadata_values(found["sft_rows"].metadata)
        assert sft["dagster/row_count"] == pq.ParquetFile(folder / "training" / "sft.parquet").metadata.num_rows > 0
        assert sft["rows"] + sft["dropped"] == sft["lines"] == metadata_values(found["rollout_ledger"].metadata)["lines"]
        report = metadata_values(found["training_report"].metadata)
        assert report["sft_rows_rows"] == sft["rows"]
        # The demo's workers take tasks that recur across reps and candidates, each in a clone
        # of its own: once the clones are normalized, pairs and groups form.
        assert report["preference_pairs_rows"] > 0 and report["grpo_groups_rows"] > 0
        ledger_lines = (folder / "rollout-ledger.jsonl").read_text().splitlines()
        ledger = metadata_values(found["rollout_ledger"].metadata)
        assert ledger["lines_agent"] == sum('"role":"agent"' in line for line in ledger_lines) > 0
        checks = {name: e for name, e in evaluations(result).items() if name in TRAINING_CHECK_NAMES}
        assert set(checks) == TRAINING_CHECK_NAMES
        assert all(e.passed for e in checks.values()), {n: e.metadata for n, e in checks.items() if not e.passed}


def test_a_broken_rows_file_fails_its_check(demo) -> None:
    _, resources, folder = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)
        assert _materialize(instance, resources).success
        accounting = folder / "training" / "sft.accounting.jsonl"
        accounting.write_text("".join(accounting.read_text().splitlines(keepends=True)[1:]))
        result = materialize(
            ALL_DEFS, selection=AssetSelection.checks_for_assets("sft_rows"), instance=instance,
            resources=resources, tags={"dagster/partition": ROUND}, raise_on_error=False,
        )  # fmt: skip
        found = evaluations(result)
        assert not found["sft_rows_account_for_every_line"].passed
        assert "neither in a row nor dropped" in found["sft_rows_account_for_every_line"].metadata["problems"].value[0]
        assert found["sft_rows_match_ledger"].passed


def test_no_training_data_from_a_ledger_that_failed_its_checks(demo) -> None:
    _, resources, folder = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)
        ledger = folder / "rollout-ledger.jsonl"
        ledger.write_text("".join(ledger.read_text().splitlines(keepends=True)[1:]))  # a line lost
        materialize(
            ALL_DEFS, selection=AssetSelection.checks_for_assets("rollout_ledger"), instance=instance,
            resources=resources, tags={"dagster/partition": ROUND}, raise_on_error=False,
        )  # fmt: skip
        result = _materialize(instance, resources, selection=AssetSelection.groups("training"))
        failures = step_failures(result)
        assert "not writing training data, its ledger failed the blocking check(s)" in failures["training_datasets"]
        assert not (folder / "training" / "sft.parquet").exists()


def test_the_normalization_grouping_and_length_settings_reach_the_rows(demo) -> None:
    _, resources, folder = demo
    config = {"normalize_identifiers": False, "group_by": "instance", "max_tokens": 900}
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)
        result = materialize(
            ALL_DEFS, selection=AssetSelection.groups("training"), partition_key=ROUND, instance=instance,
            resources=resources, raise_on_error=False, run_config={"ops": {"training_datasets": {"config": config}}},
        )  # fmt: skip
        assert result.success, step_failures(result)
        report = json.loads((folder / "training" / "training-report.json").read_text())
        assert {key: report["filter"][key] for key in config} == config
        assert report["datasets"]["sft_rows"]["drops"]["too_long"] > 0
        groups = pq.read_table(folder / "training" / "grpo-groups.parquet").to_pylist()
        assert groups and {group["metadata"]["group_by"] for group in groups} == {"instance"}
        assert all(e.passed for name, e in evaluations(result).items() if name in TRAINING_CHECK_NAMES)


def test_bad_filter_settings_fail_the_step_in_one_sentence(demo) -> None:
    _, resources, _ = demo
    with DagsterInstance.ephemeral() as instance:
        materialize_round(instance, resources)
        result = materialize(
            ALL_DEFS, selection=AssetSelection.groups("training"), partition_key=ROUND, instance=instance,
            resources=resources, raise_on_error=False,
            run_config={"ops": {"training_datasets": {"config": {"roles": ["judge"]}}}},
        )  # fmt: skip
        assert step_failures(result)["training_datasets"].startswith("training filter: unknown role(s) judge")


def test_a_release_of_the_rounds_that_passed(tmp_path: Path) -> None:
    import json

    from dagster import DagsterInvalidConfigError

    from rollout_assets.defs.assets.release import dataset_release
    from rollout_assets.defs.release_checks import RELEASE_ASSET_CHECKS
    from rollout_assets_tests.dagster_rounds import SMALL_SPEC, ROUND_SPEC

    layout = write_rounds(tmp_path / "demo", (ROUND_SPEC, SMALL_SPEC))
    resources = round_resources(layout, tmp_path / "ledgers")
    defs = [*ALL_DEFS, dataset_release, *RELEASE_ASSET_CHECKS]
    with DagsterInstance.ephemeral() as instance:
        for key in (ROUND, SMALL_SPEC.name):
            materialize_round(instance, resources, key)
            assert materialize(defs[: len(ALL_DEFS)], partition_key=key, instance=instance, resources=resources).success
        config = {"ops": {"dataset_release": {"config": {"license": "cc-by-4.0", "test_fraction": 0.3}}}}
        release = AssetSelection.assets("dataset_release")
        result = materialize(defs, selection=release, instance=instance, resources=resources, run_config=config,
                             raise_on_error=False)  # fmt: skip
        assert result.success, step_failures(result)
        found = evaluations(result)
        assert {name for name in found} == {
            "release_splits_do_not_overlap", "release_has_no_secrets", "release_card_matches_files",
            "release_rows_are_distinct",
        }  # fmt: skip
        assert all(e.passed for e in found.values()), {n: e.metadata for n, e in found.items()}
        folder = tmp_path / "ledgers" / "releases" / "rollout-dataset"
        manifest = json.loads((folder / "manifest.json").read_text())
        assert [entry["round"] for entry in manifest["rounds"]] == [ROUND, SMALL_SPEC.name]
        assert metadata_values(materializations(result)["dataset_release"].metadata)["sft_train"] == manifest["rows"]["sft"]["train"]
        with pytest.raises(DagsterInvalidConfigError, match="license"):
            materialize(defs, selection=release, instance=instance, resources=resources)
