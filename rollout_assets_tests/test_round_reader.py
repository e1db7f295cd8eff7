"""The round reader on real round directories: campaigns, cells, fail-loud evidence, costs, receipts."""

import os
from pathlib import Path

import pytest

from rollout_assets.io import round_half_up
from rollout_assets.sources.round import (
    RoundInputError,
    build_manifest,
    discover_campaigns,
    list_shot_receipts,
    read_supervisor_result,
    resolve_out_dir,
    worker_cwds_of,
)
from rollout_assets_tests.builders import (
    artifact,
    campaign_dir,
    cell,
    cost_receipt,
    write_cell,
    write_cost_ledger,
    write_json,
)


def round_dir(tmp_path: Path) -> Path:
    out_dir = tmp_path / "round"
    out_dir.mkdir()
    return out_dir


def coordinates(out_dir: Path) -> list[tuple[int, int]]:
    return [(entry.generation, entry.candidate_index) for entry in build_manifest(out_dir).entries]


def cell_keys(out_dir: Path, index: int = 0) -> list[tuple[str, int]]:
    return [(c.scenario_id, c.rep) for c in build_manifest(out_dir).entries[index].cells]


def load_error(out_dir: Path) -> str:
    with pytest.raises(RoundInputError) as raised:
        build_manifest(out_dir)
    return str(raised.value)


# ---------------------------------------------------------------------------
# Campaign discovery and order
# ---------------------------------------------------------------------------


def test_campaigns_come_baseline_first_then_generation_and_candidate_in_numeric_order(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    for generation, candidate in [(10, 0), (2, 10), (2, 9), (1, 0)]:
        write_cell(campaign_dir(out_dir, generation, candidate), "c", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))

    assert coordinates(out_dir) == [(-1, -1), (1, 0), (2, 9), (2, 10), (10, 0)]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("gen-1", "candidate-0"), ("gen-01", "candidate-0")),
        (("gen-0", "candidate-2"), ("gen-0", "candidate-002")),
    ],
)
def test_two_folders_of_the_same_candidate_stop_the_round_naming_both(
    tmp_path: Path, first: tuple[str, str], second: tuple[str, str]
) -> None:
    out_dir = round_dir(tmp_path)
    for generation, candidate in (first, second):
        write_cell(out_dir / "improve-run" / generation / candidate, "c", cell("a__a-1", 0))

    error = load_error(out_dir)

    assert "/".join(first) in error and "/".join(second) in error
    assert "two campaign directories" in error


def test_discovered_campaign_dirs_are_the_absolute_campaign_paths(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    (campaign_dir(out_dir)).mkdir(parents=True)
    campaign_dir(out_dir, 0, 1).mkdir(parents=True)

    assert discover_campaigns(out_dir) == [
        (-1, -1, out_dir / "improve-run" / "baseline"),
        (0, 1, out_dir / "improve-run" / "gen-0" / "candidate-1"),
    ]


def test_other_names_under_improve_run_are_not_campaigns(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    improve_run = out_dir / "improve-run"
    for name in [
        "gen-x/candidate-0",
        "gen-1/cand-0",
        "gen-1/candidate-0a",
        "gen-1/candidate--1",
        "gen1/candidate-0",
        "generation-1/candidate-0",
        "baseline2/c",
    ]:
        (improve_run / name).mkdir(parents=True)
    write_json(improve_run / "gen-2", "a file, not a generation dir")
    write_json(improve_run / "gen-3" / "candidate-4", "a file, not a candidate dir")
    campaign_dir(out_dir, 1, 2).mkdir(parents=True)

    assert discover_campaigns(out_dir) == [(1, 2, improve_run / "gen-1" / "candidate-2")]


def test_non_ascii_digits_and_trailing_newlines_do_not_make_a_campaign_name(tmp_path: Path) -> None:
    # The seed's /^gen-(\d+)$/ matches ASCII digits only and `$` does not match before "\n".
    out_dir = round_dir(tmp_path)
    improve_run = out_dir / "improve-run"
    (improve_run / "gen-\u0661" / "candidate-0").mkdir(parents=True)
    (improve_run / "gen-1" / "candidate-\u0662").mkdir(parents=True)
    (improve_run / "gen-1\n" / "candidate-0").mkdir(parents=True)
    (improve_run / "gen-1" / "candidate-3\n").mkdir(parents=True)

    assert discover_campaigns(out_dir) == []


def test_baseline_without_cells_has_no_entry_and_no_instances(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    (campaign_dir(out_dir) / "empty-cell-dir").mkdir(parents=True)
    write_cell(campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0))

    manifest = build_manifest(out_dir)

    assert [(e.generation, e.candidate_index) for e in manifest.entries] == [(0, 0)]
    assert manifest.instances == []


def test_candidate_without_cells_still_has_an_entry(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    campaign_dir(out_dir, 0, 3).mkdir(parents=True)

    manifest = build_manifest(out_dir)

    assert [(e.generation, e.candidate_index, e.cells, e.reps) for e in manifest.entries] == [(0, 3, [], 0)]


def test_round_without_improve_run_gives_an_empty_manifest(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)

    manifest = build_manifest(out_dir).to_json()

    assert (manifest["instances"], manifest["generations"]) == ([], [])


def test_missing_out_dir_fails_loud_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-round"

    assert load_error(missing) == f"{missing}: round outDir does not exist or is not a directory"


def test_instances_are_the_sorted_distinct_baseline_scenarios(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "1", cell("b__b-2", 0))
    write_cell(baseline, "2", cell("a__a-1", 1))
    write_cell(baseline, "3", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 0), "c", cell("z__z-9", 0))

    assert build_manifest(out_dir).instances == ["a__a-1", "b__b-2"]


# ---------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------


def test_cells_are_sorted_by_scenario_in_code_point_order_then_numeric_rep(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    for name, scenario, rep in [
        ("1", "a__x", 0),
        ("2", "B__y", 10),
        ("3", "B__y", 2),
        ("4", "_z", 0),
        ("5", "B__y", 0),
    ]:
        write_cell(baseline, name, cell(scenario, rep))

    assert cell_keys(out_dir) == [("B__y", 0), ("B__y", 2), ("B__y", 10), ("_z", 0), ("a__x", 0)]


def test_a_cell_dir_without_cached_result_is_skipped(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "real", cell("a__a-1", 0))
    (baseline / "pending").mkdir()
    write_json(baseline / "pending" / "other.json", {"scenarioId": "b__b-1", "rep": 0})
    write_json(baseline / "loose-file.json", {"scenarioId": "c__c-1", "rep": 0})

    assert cell_keys(out_dir) == [("a__a-1", 0)]


def test_a_whole_float_rep_reads_as_an_int(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", '{"scenarioId": "a__a-1", "rep": 2.0}')

    assert cell_keys(out_dir) == [("a__a-1", 2)]


BROKEN_CELLS = {
    "not-json": ('{"scenarioId": "a__a-1", "rep": 0', "cell cache is not valid JSON ("),
    "nan-literal": ('{"scenarioId": "a__a-1", "rep": 0, "costUsd": NaN}', "cell cache is not valid JSON ("),
    "infinity-literal": ('{"scenarioId": "a__a-1", "rep": Infinity}', "cell cache is not valid JSON ("),
    "array": ('[{"scenarioId": "a__a-1", "rep": 0}]', "cell cache is not a JSON object"),
    "string": ('"a__a-1"', "cell cache is not a JSON object"),
    "missing-scenario": ('{"rep": 0}', "cell cache has no string scenarioId"),
    "numeric-scenario": ('{"scenarioId": 11532, "rep": 0}', "cell cache has no string scenarioId"),
    "null-scenario": ('{"scenarioId": null, "rep": 0}', "cell cache has no string scenarioId"),
    "missing-rep": ('{"scenarioId": "a__a-1"}', "cell cache has no numeric rep"),
    "string-rep": ('{"scenarioId": "a__a-1", "rep": "0"}', "cell cache has no numeric rep"),
    "boolean-rep": ('{"scenarioId": "a__a-1", "rep": true}', "cell cache has no numeric rep"),
    "fractional-rep": ('{"scenarioId": "a__a-1", "rep": 1.5}', "cell cache rep 1.5 is not a whole number"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CELLS))
def test_a_broken_cell_cache_stops_the_round_naming_the_file(tmp_path: Path, case: str) -> None:
    text, reason = BROKEN_CELLS[case]
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "good", cell("a__a-0", 0))
    path = write_cell(campaign_dir(out_dir), "broken", text)

    message = load_error(out_dir)

    assert message.startswith(f"{path}: {reason}")


def test_a_nan_literal_is_reported_as_not_json(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    path = write_cell(campaign_dir(out_dir), "c", '{"scenarioId": "a__a-1", "rep": NaN}')

    assert load_error(out_dir) == f"{path}: cell cache is not valid JSON (NaN is not valid JSON)"


def test_a_broken_cell_in_a_candidate_also_stops_the_round(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    path = write_cell(campaign_dir(out_dir, 3, 1), "c", '{"scenarioId": "a__a-1"}')

    assert load_error(out_dir) == f"{path}: cell cache has no numeric rep"


def test_a_candidate_mixing_commits_stops_the_round_naming_the_dir_and_both_commits(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 2)
    write_cell(candidate, "1", cell("a__a-1", 0, artifact=artifact(commit="bbbbbbb")))
    write_cell(candidate, "2", cell("a__a-2", 0, artifact=artifact(commit="aaaaaaa")))
    write_cell(candidate, "3", cell("a__a-3", 0, artifact=artifact(commit="bbbbbbb")))

    assert load_error(out_dir) == f"{candidate}: candidate cells name more than one commit: aaaaaaa, bbbbbbb"


def test_a_candidate_with_one_commit_and_errored_cells_takes_that_commit(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "1", cell("a__a-1", 0, artifact=None, error="boom"))
    write_cell(candidate, "2", cell("a__a-2", 0, artifact=artifact(commit="abc1234")))

    assert build_manifest(out_dir).entries[0].commit == "abc1234"


def test_a_duplicate_cell_stops_the_round_naming_both_files(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    first = write_cell(baseline, "cell-a", cell("a__a-1", 1))
    second = write_cell(baseline, "cell-b", cell("a__a-1", 1.0))

    assert load_error(out_dir) == f"{second}: duplicates cell a__a-1 rep 1 of {first}"


def test_the_same_cell_in_two_campaigns_is_not_a_duplicate(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0))

    assert [len(entry.cells) for entry in build_manifest(out_dir).entries] == [1, 1]


def test_baseline_commit_is_the_first_cell_in_scenario_rep_order_not_directory_order(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "a-dir", cell("z__z-1", 0, artifact=artifact(commit="from-z")))
    write_cell(baseline, "b-dir", cell("a__a-1", 1, artifact=artifact(commit="from-a-rep1")))
    write_cell(baseline, "c-dir", cell("a__a-1", 0, artifact=artifact(commit="from-a-rep0")))

    assert build_manifest(out_dir).entries[0].commit == "from-a-rep0"


def test_baseline_commit_skips_a_first_cell_without_an_artifact(tmp_path: Path) -> None:
    # Ambiguous in docs/input-formats.md ("its first cell's"): the current rule takes the first cell
    # that names a commit, rather than null from an errored first cell.
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "1", cell("a__a-1", 0, artifact=None, error="crashed"))
    write_cell(baseline, "2", cell("b__b-1", 0, artifact=artifact(commit="from-b")))

    assert build_manifest(out_dir).entries[0].commit == "from-b"


def test_commit_is_null_when_no_cell_names_one(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir, 0, 0), "1", cell("a__a-1", 0, artifact=artifact(commit=None)))

    assert build_manifest(out_dir).entries[0].commit is None


# ---------------------------------------------------------------------------
# Outcome: reps, resolvedCount, cellsCached
# ---------------------------------------------------------------------------


def test_reps_is_max_rep_plus_one_over_the_campaign(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "1", cell("a__a-1", 0))
    write_cell(candidate, "2", cell("b__b-1", 2))

    assert build_manifest(out_dir).entries[0].reps == 3


def _round_with_baseline(tmp_path: Path, *instances: str) -> Path:
    """A round whose baseline ran `instances` once each: the instances a resolved count counts."""
    out_dir = round_dir(tmp_path)
    for index, instance in enumerate(instances):
        write_cell(campaign_dir(out_dir), f"b{index}", cell(instance, 0))
    return out_dir


def _candidate_resolved_count(out_dir: Path) -> int:
    entry = build_manifest(out_dir).entry_for(0, 0)
    assert entry is not None
    return entry.resolved_count


def test_an_instance_with_every_replicate_resolved_counts_as_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1")
    candidate = campaign_dir(out_dir, 0, 0)
    for rep in range(3):
        write_cell(candidate, f"a{rep}", cell("a__a-1", rep))

    assert _candidate_resolved_count(out_dir) == 1


def test_an_instance_missing_a_replicate_is_not_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1", "b__b-1")
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "a0", cell("a__a-1", 0))
    write_cell(candidate, "a1", cell("a__a-1", 1))
    write_cell(candidate, "b1", cell("b__b-1", 1))

    assert _candidate_resolved_count(out_dir) == 1


def test_an_instance_with_an_errored_replicate_is_not_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1")
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "a0", cell("a__a-1", 0))
    write_cell(candidate, "a1", cell("a__a-1", 1, artifact=None, error="harness crashed"))

    assert _candidate_resolved_count(out_dir) == 0


def test_a_replicate_with_an_error_beside_a_resolved_artifact_is_not_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1", "b__b-1")
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "a0", cell("a__a-1", 0, error="judge crashed"))
    write_cell(candidate, "b0", cell("b__b-1", 0, error=None))

    assert _candidate_resolved_count(out_dir) == 1


def test_an_instance_with_an_unresolved_replicate_is_not_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1")
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "a0", cell("a__a-1", 0))
    write_cell(candidate, "a1", cell("a__a-1", 1, artifact=artifact(resolved=False)))

    assert _candidate_resolved_count(out_dir) == 0


def test_a_non_boolean_resolved_flag_is_not_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1")
    write_cell(campaign_dir(out_dir, 0, 0), "a0", cell("a__a-1", 0, artifact={**artifact(), "resolved": 1}))

    assert _candidate_resolved_count(out_dir) == 0


def test_only_the_baselines_instances_count_as_resolved(tmp_path: Path) -> None:
    out_dir = _round_with_baseline(tmp_path, "a__a-1")
    candidate = campaign_dir(out_dir, 0, 0)
    for index, instance in enumerate(("a__a-1", "x__x-1", "y__y-1")):
        write_cell(candidate, str(index), cell(instance, 0))

    manifest = build_manifest(out_dir)

    # A fraction of the baseline's instances, never above one.
    assert (_candidate_resolved_count(out_dir), manifest.instances) == (1, ["a__a-1"])


def test_without_baseline_cells_no_instance_counts_as_resolved(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir, 0, 0), "a0", cell("a__a-1", 0))

    assert _candidate_resolved_count(out_dir) == 0


def test_cells_cached_counts_cells_whose_cached_flag_is_true(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "1", cell("a__a-1", 0, cached=True))
    write_cell(candidate, "2", cell("b__b-1", 0, cached=False))
    write_cell(candidate, "3", cell("c__c-1", 0, cached="true"))
    write_cell(candidate, "4", cell("d__d-1", 0))
    write_cell(candidate, "5", cell("e__e-1", 0, cached=True))

    assert build_manifest(out_dir).entries[0].cells_cached == 2


def test_per_instance_rows_hold_resolved_and_a_string_error_only(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    ok = write_cell(baseline, "1", cell("a__a-1", 0, error=None))
    bad = write_cell(baseline, "2", cell("b__b-1", 0, artifact=None, error="timeout"))

    rows = build_manifest(out_dir).to_json()["generations"][0]["rollouts"][0]["outcome"]["perInstance"]

    assert rows == [
        {"scenarioId": "a__a-1", "rep": 0, "resolved": True, "error": None, "cellPath": str(ok)},
        {"scenarioId": "b__b-1", "rep": 0, "resolved": None, "error": "timeout", "cellPath": str(bad)},
    ]


# ---------------------------------------------------------------------------
# Cost and the cost ledger
# ---------------------------------------------------------------------------


def test_campaign_cost_sums_numbers_and_ignores_everything_else(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(
        candidate,
        "1",
        cell(
            "a__a-1",
            0,
            costUsd=1.5,
            tokenUsage={"input": 100, "output": 10},
            artifact=artifact(spentUsd=0.5, spentTokens=1000, wallS=60, judgeWallS=4),
        ),
    )
    write_cell(
        candidate,
        "2",
        cell(
            "b__b-1",
            0,
            costUsd=2.25,
            tokenUsage={"input": 50, "output": "many"},
            artifact=artifact(spentUsd=None, spentTokens=500, wallS=30.5, judgeWallS=True),
        ),
    )
    write_cell(candidate, "3", cell("c__c-1", 0, costUsd="3", tokenUsage=[1, 2], artifact=None))

    cost = build_manifest(out_dir).entries[0].cost

    assert cost == {
        "costUsd": 3.75,
        "tokenUsage": {"input": 150, "output": 10},
        "spentUsd": 0.5,
        "spentTokens": 1500,
        "wallS": 90.5,
        "judgeWallS": 4,
        "settledCallIds": [],
    }


def test_a_cost_sum_that_overflows_a_double_is_null(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(candidate, "1", cell("a__a-1", 0, costUsd=1.5e308, artifact=artifact(wallS=60)))
    write_cell(candidate, "2", cell("b__b-1", 0, costUsd=1.5e308, artifact=artifact(wallS=30)))

    cost = build_manifest(out_dir).entries[0].cost

    # JSON has no Infinity: the manifest's file and the seed's JSON.stringify both make it null.
    assert (cost["costUsd"], cost["wallS"]) == (None, 90)


def test_settled_call_ids_go_to_the_campaign_their_run_dir_tags(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline, candidate = campaign_dir(out_dir), campaign_dir(out_dir, 0, 1)
    write_cell(baseline, "c", cell("a__a-1", 0))
    write_cell(candidate, "c", cell("a__a-1", 0))
    write_cost_ledger(
        out_dir,
        [
            cost_receipt("call-1", str(baseline)),
            cost_receipt("call-2", str(candidate)),
            cost_receipt("call-3", str(baseline)),
            cost_receipt("call-4", str(out_dir / "elsewhere")),
        ],
    )

    entries = build_manifest(out_dir).entries

    assert [entry.cost["settledCallIds"] for entry in entries] == [["call-1", "call-3"], ["call-2"]]


def test_pending_unidentified_and_garbage_ledger_lines_are_skipped(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "c", cell("a__a-1", 0))
    write_cost_ledger(
        out_dir,
        [
            cost_receipt("call-pending", str(baseline), status="pending"),
            "{not json",
            '{"version": 1, "record": {"status": "settled", "callId": "call-nan", "costUsd": NaN}}',
            "",
            cost_receipt(7, str(baseline)),
            cost_receipt("call-no-dir", None),
            '["settled"]',
            '{"version": 1, "record": "settled"}',
            cost_receipt("call-ok", str(baseline)),
        ],
    )

    manifest = build_manifest(out_dir)

    assert manifest.entries[0].cost["settledCallIds"] == ["call-ok"]


def test_cost_ledger_counts_lines_and_skipped_garbage(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "c", cell("a__a-1", 0))
    write_cost_ledger(
        out_dir,
        [
            cost_receipt("call-1", str(baseline)),
            "garbage",
            "",
            cost_receipt("p", str(baseline), status="pending"),
        ],
    )

    costs = build_manifest(out_dir).to_json()["costLedger"]

    assert costs == {"lines": 3, "skipped": 1, "settledCalls": 1}


def test_a_round_without_cost_ledger_has_no_settled_calls(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))

    manifest = build_manifest(out_dir)

    assert (manifest.entries[0].cost["settledCallIds"], manifest.cost_ledger_lines) == ([], 0)


# ---------------------------------------------------------------------------
# Candidate diff and artifact paths
# ---------------------------------------------------------------------------


def test_diff_path_is_the_candidate_patch_named_by_the_commit_prefix(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(
        campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0, artifact=artifact(commit="0123456789abcdef"))
    )
    patch = write_json(out_dir / "candidates" / "0123456789.patch", "diff --git a/x b/x\n")

    assert build_manifest(out_dir).entries[0].diff_path == str(patch)


def test_diff_path_is_null_when_the_candidate_patch_does_not_exist(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(
        campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0, artifact=artifact(commit="0123456789abcdef"))
    )
    write_json(out_dir / "candidates" / "0123456789abcdef.patch", "a full-commit name is not the rule")

    assert build_manifest(out_dir).entries[0].diff_path is None


def test_the_baseline_has_no_diff_path_even_when_its_commit_has_a_patch(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0, artifact=artifact(commit="0123456789abcdef")))
    write_json(out_dir / "candidates" / "0123456789.patch", "diff")

    assert build_manifest(out_dir).entries[0].diff_path is None


def test_artifact_paths_list_existing_result_judge_and_patch_files(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    run_dir = tmp_path / "runs" / "arm-1"
    write_json(run_dir / "result.json", {"sup_status": "done"})
    patch = write_json(out_dir / "patches" / "a.patch", "diff")
    missing_run = tmp_path / "runs" / "arm-2"
    candidate = campaign_dir(out_dir, 0, 0)
    write_cell(
        candidate, "1", cell("a__a-1", 0, artifact=artifact(runDir=str(run_dir), patchPath=str(patch)))
    )
    write_cell(
        candidate, "2", cell("b__b-1", 0, artifact=artifact(runDir=str(missing_run), patchPath="/nope"))
    )

    assert build_manifest(out_dir).entries[0].artifact_paths == [str(run_dir / "result.json"), str(patch)]


# ---------------------------------------------------------------------------
# Proposer shot receipts
# ---------------------------------------------------------------------------


def test_a_relative_patch_path_is_no_artifact_path_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(
        campaign_dir(out_dir, 0, 0), "c", cell("a__a-1", 0, artifact=artifact(patchPath="patches/a.patch"))
    )
    monkeypatch.chdir(tmp_path)
    write_json(tmp_path / "patches" / "a.patch", "diff")

    assert build_manifest(out_dir).entries[0].artifact_paths == []


def receipt_rows(out_dir: Path) -> list[tuple[str, str | None, int, int, int]]:
    return [
        (r.relative_path(out_dir), r.author, r.generation, r.candidate_index, r.shot)
        for r in list_shot_receipts(out_dir)
    ]


def test_shot_receipts_flat_and_per_author_are_sorted_by_path(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    shots = out_dir / "proposer-shots"
    for name in [
        "gen1-cand0-shot0.json",
        "gen0-cand10-shot2.json",
        "zeta/gen0-cand1-shot1.json",
        "Alpha/gen0-cand1-shot0.json",
        "gen0-cand2-shot0.json",
    ]:
        write_json(shots / name, {"receipt": {}})

    assert receipt_rows(out_dir) == [
        ("proposer-shots/Alpha/gen0-cand1-shot0.json", "Alpha", 0, 1, 0),
        ("proposer-shots/gen0-cand10-shot2.json", None, 0, 10, 2),
        ("proposer-shots/gen0-cand2-shot0.json", None, 0, 2, 0),
        ("proposer-shots/gen1-cand0-shot0.json", None, 1, 0, 0),
        ("proposer-shots/zeta/gen0-cand1-shot1.json", "zeta", 0, 1, 1),
    ]


def test_other_names_in_proposer_shots_are_ignored(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    shots = out_dir / "proposer-shots"
    for name in [
        "gen0-cand0-shot0.json.bak",
        "gen0-cand0-shot0.jsonl",
        "gen0-cand0.json",
        "notes.txt",
        "Gen0-cand0-shot0.json",
        "gen0-cand0-shotX.json",
        "alice/readme.md",
        "alice/deeper/gen0-cand0-shot0.json",
    ]:
        write_json(shots / name, {"receipt": {}})
    write_json(shots / "gen0-cand0-shot3.json", {"receipt": {}})

    assert receipt_rows(out_dir) == [("proposer-shots/gen0-cand0-shot3.json", None, 0, 0, 3)]


def test_non_ascii_digits_and_trailing_newlines_do_not_make_a_receipt_name(tmp_path: Path) -> None:
    # The seed's /^gen(\d+)-cand(\d+)-shot(\d+)\.json$/ matches ASCII digits only, and its
    # `$` does not match before a trailing "\n".
    out_dir = round_dir(tmp_path)
    shots = out_dir / "proposer-shots"
    for name in [
        "gen\u0661-cand0-shot0.json",
        "gen0-cand0-shot\u0662.json",
        "gen0-cand0-shot0.json\n",
        "dave/gen0-cand\u0663-shot0.json",
    ]:
        write_json(shots / name, {"receipt": {}})

    assert receipt_rows(out_dir) == []


def test_a_symlink_to_a_directory_in_proposer_shots_is_not_descended_into(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    shots = out_dir / "proposer-shots"
    elsewhere = tmp_path / "elsewhere"
    write_json(elsewhere / "gen0-cand0-shot0.json", {"receipt": {}})
    write_json(shots / "bob" / "gen0-cand0-shot1.json", {"receipt": {}})
    (shots / "linked").symlink_to(elsewhere, target_is_directory=True)

    assert receipt_rows(out_dir) == [("proposer-shots/bob/gen0-cand0-shot1.json", "bob", 0, 0, 1)]


def test_no_proposer_shots_dir_gives_no_receipts(tmp_path: Path) -> None:
    assert list_shot_receipts(round_dir(tmp_path)) == []


def test_a_candidate_entry_lists_its_own_receipts_sorted_and_the_baseline_none(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_cell(campaign_dir(out_dir), "c", cell("a__a-1", 0))
    write_cell(campaign_dir(out_dir, 0, 1), "c", cell("a__a-1", 0))
    shots = out_dir / "proposer-shots"
    for name in [
        "gen0-cand1-shot1.json",
        "bob/gen0-cand1-shot0.json",
        "gen0-cand10-shot0.json",
        "gen0-cand1-shot0.json",
        "gen-1-cand-1-shot0.json",
        "gen00-cand01-shot2.json",  # the same candidate's, by number, as its proposer line joins it
    ]:
        write_json(shots / name, {"receipt": {}})

    baseline, candidate = build_manifest(out_dir).entries

    assert (baseline.shot_receipt_paths, candidate.shot_receipt_paths) == (
        [],
        [
            str(shots / "bob/gen0-cand1-shot0.json"),
            str(shots / "gen0-cand1-shot0.json"),
            str(shots / "gen0-cand1-shot1.json"),
            str(shots / "gen00-cand01-shot2.json"),
        ],
    )


def test_worktree_cwd_is_under_proposer_wt_with_the_author_suffix(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_json(out_dir / "proposer-shots" / "gen2-cand3-shot0.json", {})
    write_json(out_dir / "proposer-shots" / "carol" / "gen2-cand3-shot1.json", {})

    cwds = [receipt.worktree_cwd(out_dir) for receipt in list_shot_receipts(out_dir)]

    assert cwds == [
        str(out_dir / "proposer-wt" / "gen2-cand3-carol"),
        str(out_dir / "proposer-wt" / "gen2-cand3"),
    ]


# ---------------------------------------------------------------------------
# Supervisor result.json and worker cwds
# ---------------------------------------------------------------------------


def test_worker_cwds_are_deduplicated_in_first_occurrence_order_ignoring_non_strings() -> None:
    result = {
        "recoveredSpend": {"workerCwds": ["/w/b", 7, "/w/a", None, "/w/b", {"cwd": "/w/c"}, "/w/c", "/w/a"]}
    }

    assert worker_cwds_of(result) == ["/w/b", "/w/a", "/w/c"]


@pytest.mark.parametrize(
    "result",
    [
        None,
        {},
        {"recoveredSpend": None},
        {"recoveredSpend": ["/w/a"]},
        {"recoveredSpend": {"workerCwds": "/w/a"}},
    ],
)
def test_worker_cwds_are_empty_without_a_worker_list(result: dict | None) -> None:
    assert worker_cwds_of(result) == []


def test_supervisor_result_is_the_result_json_object(tmp_path: Path) -> None:
    write_json(tmp_path / "result.json", {"sup_status": "done", "spawned": 2})

    assert read_supervisor_result(str(tmp_path)) == {"sup_status": "done", "spawned": 2}


@pytest.mark.parametrize(
    "content",
    [None, "{truncated", '{"spawned": NaN}', "[1, 2]", '"done"', "null", b"\xff\xfe"],
    ids=["missing", "invalid", "nan", "array", "string", "null", "binary"],
)
def test_supervisor_result_is_none_when_missing_invalid_or_not_an_object(
    tmp_path: Path, content: object
) -> None:
    if content is not None:
        write_json(tmp_path / "result.json", content)

    assert read_supervisor_result(str(tmp_path)) is None


def test_supervisor_result_is_none_without_a_run_dir() -> None:
    assert read_supervisor_result(None) is None


# ---------------------------------------------------------------------------
# run_id and the outDir
# ---------------------------------------------------------------------------


def test_run_id_comes_from_loop_provenance(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_json(out_dir / "improve-run" / "loop-provenance.json", {"runId": "run-2025-01-01", "seed": 3})

    manifest = build_manifest(out_dir)

    assert (manifest.run_id, manifest.provenance) == (
        "run-2025-01-01",
        {"runId": "run-2025-01-01", "seed": 3},
    )


@pytest.mark.parametrize("provenance", [None, '{"runId": 42}', '["runId"]', '{"runId": ""}'])
def test_run_id_falls_back_to_the_absolute_out_dir(tmp_path: Path, provenance: str | None) -> None:
    out_dir = round_dir(tmp_path)
    if provenance is not None:
        write_json(out_dir / "improve-run" / "loop-provenance.json", provenance)

    assert build_manifest(out_dir).run_id == str(out_dir)


def test_a_relative_out_dir_resolves_to_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    round_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    expected = Path(os.getcwd()) / "round"

    manifest = build_manifest("round")

    assert (manifest.out_dir, manifest.run_id) == (expected, str(expected))


def test_resolving_the_out_dir_keeps_a_symlinked_name(tmp_path: Path) -> None:
    real = round_dir(tmp_path)
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)

    assert resolve_out_dir(link) == link


@pytest.mark.parametrize("as_bytes", [True, False])
def test_json_nested_exactly_to_the_limit_is_read_and_one_level_more_is_refused(as_bytes: bool) -> None:
    from rollout_assets.io import MAX_NESTING, NotJson, parse_json

    def nested(depth: int) -> str | bytes:
        text = "[" * depth + "]" * depth
        return text.encode() if as_bytes else text

    assert parse_json(nested(MAX_NESTING)) is not None
    with pytest.raises(NotJson, match="nested deeper"):
        parse_json(nested(MAX_NESTING + 1))
    # Objects count as levels too, and padding does not hide depth.
    deep_object = '{"a":' * (MAX_NESTING + 1) + "1" + "}" * (MAX_NESTING + 1)
    with pytest.raises(NotJson, match="nested deeper"):
        parse_json(deep_object.encode() if as_bytes else deep_object)


# ---------------------------------------------------------------------------
# Entries the reader cannot examine: the round stops rather than drop them unseen
# ---------------------------------------------------------------------------


# A folder without search permission: test_bad_inputs.py runs that case as `nobody`.
def test_a_cell_whose_cache_cannot_be_examined_stops_the_round_naming_it(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "a", cell("a__a-1", 0))
    (baseline / "b").mkdir()
    # stat() of this cache fails with ENAMETOOLONG (even for root, unlike a folder without
    # search permission): whether "b" is a cell cannot be told.
    (baseline / "b" / "cached-result.json").symlink_to("x" * 300)

    assert load_error(out_dir) == (
        f"{baseline / 'b'}: cannot tell whether it holds a cached-result.json (File name too long)"
    )


def test_a_plain_file_or_a_symlink_loop_among_the_entries_is_still_not_a_cell(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "a", cell("a__a-1", 0))
    (baseline / "loop").symlink_to("loop")
    (baseline / "file").write_text("{}")

    assert cell_keys(out_dir) == [("a__a-1", 0)]


def test_a_cell_folder_whose_cache_is_a_symlink_loop_stops_the_round_naming_it(tmp_path: Path) -> None:
    """The cache is there but cannot be read: skipping the cell would drop it unseen."""
    out_dir = round_dir(tmp_path)
    baseline = campaign_dir(out_dir)
    write_cell(baseline, "a", cell("a__a-1", 0))
    (baseline / "loop").mkdir()
    (baseline / "loop" / "cached-result.json").symlink_to("cached-result.json")

    with pytest.raises(RoundInputError) as raised:
        build_manifest(out_dir)

    assert str(raised.value) == f"{baseline / 'loop' / 'cached-result.json'}: cannot read cell cache (a symlink loop)"


def test_a_receipts_folder_that_cannot_be_listed_stops_the_round_naming_it(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    (out_dir / "proposer-shots").symlink_to("y" * 300)

    with pytest.raises(RoundInputError) as raised:
        list_shot_receipts(out_dir)

    assert str(raised.value) == f"{out_dir / 'proposer-shots'}: cannot list directory (File name too long)"


@pytest.mark.parametrize(
    "name",
    [
        "gen99999999999999999999-cand0-shot0.json",
        "gen0-cand9223372036854775808-shot0.json",
        "gen0-cand0-shot1" + "0" * 19 + ".json",
    ],
)
def test_a_receipt_name_with_a_number_beyond_64_bits_stops_the_round_naming_it(
    tmp_path: Path, name: str
) -> None:
    out_dir = round_dir(tmp_path)
    write_json(out_dir / "proposer-shots" / name, {"receipt": {}})

    with pytest.raises(RoundInputError) as raised:
        list_shot_receipts(out_dir)

    assert str(raised.value).startswith(f"{out_dir / 'proposer-shots' / name}: the number ")
    assert str(raised.value).endswith(" in its name is too large (more than 64 bits)")


def test_the_largest_64_bit_number_in_a_receipt_name_is_read(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    write_json(out_dir / "proposer-shots" / "gen9223372036854775807-cand0-shot0.json", {"receipt": {}})

    assert [r.generation for r in list_shot_receipts(out_dir)] == [9223372036854775807]


def test_a_campaign_folder_numbered_beyond_64_bits_stops_the_round_naming_it(tmp_path: Path) -> None:
    out_dir = round_dir(tmp_path)
    candidate = out_dir / "improve-run" / ("gen-" + "9" * 20) / "candidate-0"
    write_cell(candidate, "a", cell("a__a-1", 0, artifact=artifact(commit="c1")))

    assert load_error(out_dir) == (
        f"{candidate.parent}: the number {'9' * 20} in its name is too large (more than 64 bits)"
    )


def test_a_run_dir_holding_a_nul_names_no_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "arm"
    write_json(run_dir / "result.json", {"workerCwds": ["/clones/w0"]})

    assert read_supervisor_result(str(run_dir)) is not None
    assert read_supervisor_result(f"{run_dir}\0") is None


def test_a_run_folder_resolves_as_realpath_resolves_it(tmp_path: Path) -> None:
    """The kernel's answer (an O_PATH descriptor read back through /proc) and realpath's agree,
    and realpath answers where the kernel cannot open the path."""
    from rollout_assets.sources.round.run_dirs import _real_folder

    real = tmp_path / "real" / "runs" / "arm"
    real.mkdir(parents=True)
    (real / "result.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for path in (
        real,
        tmp_path / "link" / "runs" / "arm",
        f"{tmp_path}/link/runs/arm/",
        f"{tmp_path}/link/runs/../runs/./arm",
        f"{tmp_path}/link/../link/runs/arm",
        real / "result.json",
        tmp_path / "missing" / "arm",
        tmp_path / "loop" / "arm",
        tmp_path / "dangling" / "arm",
        real / "result.json" / "arm",
        "/",
    ):
        assert _real_folder(str(path)) == os.path.realpath(path), path


@pytest.mark.parametrize(
    ("value", "rounded"),
    [
        (2.5, 3),
        (-2.5, -2),
        (2.4999, 2),
        (-0.5, 0),
        # floor(x + 0.5) gets these wrong: the sum itself rounds (Math.round gives 0 and the value).
        (0.49999999999999994, 0),
        (4503599627370497.0, 4503599627370497),
        (-4503599627370497.0, -4503599627370497),
    ],
)
def test_round_half_up_is_javascripts_math_round(value: float, rounded: int) -> None:
    assert round_half_up(value) == rounded
