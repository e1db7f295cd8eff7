"""Stages materialized one by one, at different times: the ledger never mixes two states.

Each case materializes the whole round on a real instance, changes the round (or the
configuration) the way an operator or a running loop would, then materializes only some of
the stages. The stage that would mix two moments must fail saying which stage is stale, and
the ledger from before must stay as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, instance_for_test

from rollout_assets.defs.assets import (
    campaign_cells,
    proposer_transcripts,
    rollout_ledger,
    rollout_stats,
    round_manifest,
    worker_sessions,
)
from rollout_assets.demo import DemoLayout
from rollout_assets_tests.dagster_rounds import (
    SMALL_SPEC,
    materialize_round,
    round_resources,
    step_failures,
    write_rounds,
)

KEY = SMALL_SPEC.name


@pytest.fixture
def materialized(tmp_path: Path) -> tuple[DemoLayout, DagsterInstance, dict[str, Any], Path]:
    """SMALL materialized once, every stage; yields (layout, instance, resources, ledger)."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    resources = round_resources(layout, tmp_path / "ledgers")
    with instance_for_test() as instance:
        assert materialize_round(instance, resources, KEY).success
        yield layout, instance, resources, tmp_path / "ledgers" / KEY / "rollout-ledger.jsonl"


def _cell_cache(layout: DemoLayout) -> Path:
    return next((layout.rounds_root / KEY / "improve-run" / "baseline").glob("*/cached-result.json"))


def _edit_json(path: Path, change: Any) -> None:
    value = json.loads(path.read_text(encoding="utf-8"))
    change(value)
    path.write_text(json.dumps(value), encoding="utf-8")


def test_a_round_changed_since_the_manifest_is_refused_by_the_next_stage_that_reads_it(materialized) -> None:
    layout, instance, resources, ledger = materialized
    before = ledger.read_bytes()
    _edit_json(_cell_cache(layout), lambda record: record.update(costUsd=9.9999))

    result = materialize_round(
        instance, resources, KEY, selection=[proposer_transcripts, rollout_ledger, rollout_stats]
    )

    assert step_failures(result)["proposer_transcripts"].startswith(
        f"round {layout.rounds_root / KEY} changed since its round_manifest was materialized"
    )
    assert ledger.read_bytes() == before


def test_stages_built_from_another_manifest_are_refused_by_the_ledger_stage(materialized) -> None:
    layout, instance, resources, ledger = materialized
    before = ledger.read_bytes()
    _edit_json(_cell_cache(layout), lambda record: record.update(costUsd=9.9999))

    # The manifest and the proposers see the new round; the cells and workers do not.
    result = materialize_round(
        instance, resources, KEY, selection=[round_manifest, proposer_transcripts, rollout_ledger, rollout_stats]
    )

    assert step_failures(result) == {
        "rollout_ledger": "campaign_cells is out of date (built from another manifest.json): materialize it and "
        "the stages after it again"
    }
    assert ledger.read_bytes() == before


def test_a_store_configured_after_the_worker_stage_is_refused_by_the_ledger_stage(materialized, tmp_path: Path) -> None:
    layout, instance, resources, ledger = materialized
    before = ledger.read_bytes()
    other_store = Path(shutil.copy(layout.opencode_db, tmp_path / "other.db"))

    result = materialize_round(
        instance, round_resources(layout, tmp_path / "ledgers", opencode_db=other_store), KEY,
        selection=[rollout_ledger, rollout_stats],
    )  # fmt: skip

    assert step_failures(result) == {
        "rollout_ledger": f"worker_sessions is out of date (read the opencode store {layout.opencode_db}, and the "
        f"store configured now is {other_store}): materialize it and the stages after it again"
    }
    assert ledger.read_bytes() == before


def test_rerunning_the_stages_after_a_change_in_order_gives_the_whole_rounds_ledger(materialized) -> None:
    """The refusals above never block a real re-materialization: every stage again succeeds."""
    layout, instance, resources, ledger = materialized
    _edit_json(_cell_cache(layout), lambda record: record.update(costUsd=9.9999))

    for stage in (round_manifest, campaign_cells, worker_sessions, proposer_transcripts, rollout_ledger):
        assert materialize_round(instance, resources, KEY, selection=[stage]).success, stage.key

    costs = [json.loads(line)["cost"]["usd"] for line in ledger.read_text(encoding="utf-8").splitlines()]
    assert 9.9999 in costs


def test_a_stage_selected_before_the_stage_it_reads_says_what_to_materialize_first(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    resources = round_resources(layout, tmp_path / "ledgers")
    with instance_for_test() as instance:
        result = materialize_round(instance, resources, KEY, selection=[campaign_cells])

    record = tmp_path / "ledgers" / KEY / "stages" / "built-from" / "round_manifest.json"
    assert step_failures(result) == {
        "campaign_cells": f"round_manifest has no record of what it was built from ({record}; not materialized "
        "yet, or by an older version): materialize round_manifest"
    }
