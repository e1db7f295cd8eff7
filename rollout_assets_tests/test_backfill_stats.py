"""The backfill's reward and cost sums: exact, so the order lines are counted in (one process,
or parts merged from several) never changes the stats, and a sum beyond a double is null."""

import dataclasses
import json
import math
import random
from typing import Any

import pytest

from rollout_assets.backfill.stats import BackfillStats
from rollout_assets_tests.ledger_samples import sample_line


def line(reward: float | None, usd: float | None, role: str = "supervisor") -> dict[str, Any]:
    built = sample_line(role=role)
    built["outcome"]["reward"] = reward
    built["cost"]["usd"] = usd
    return built


def counted(lines: list[dict[str, Any]], parts: list[int]) -> dict[str, Any]:
    """The stats of `lines`, counted in parts cut at `parts` and merged, as processes do."""
    total = BackfillStats()
    for start, stop in zip([0, *parts], [*parts, len(lines)], strict=True):
        part = BackfillStats()
        for each in lines[start:stop]:
            part.observe(each)
        total.merge(part)
    return total.to_json()


def test_means_and_costs_are_the_same_however_the_lines_are_cut_into_parts() -> None:
    rng = random.Random(7)
    lines = [line(rng.random(), rng.random() * 10, role) for _ in range(300) for role in ("supervisor", "worker")]
    rewards = [each["outcome"]["reward"] for each in lines if each["role"] == "worker"]
    costs = [each["cost"]["usd"] for each in lines if each["role"] == "worker"]

    printed = [counted(lines, parts) for parts in ([], [1], [100, 101, 350], list(range(1, 600, 7)))]

    assert all(stats == printed[0] for stats in printed)
    assert printed[0]["rewardByRole"]["worker"] == {"labeled": 300, "mean": round(math.fsum(rewards) / 300, 12)}
    assert printed[0]["costUsdByRole"]["worker"] == {"usd": round(math.fsum(costs), 6), "linesWithCost": 300}


def test_integer_rewards_and_costs_are_summed_exactly_with_the_fractional_ones() -> None:
    lines = [line(1, 2**60), line(0.1, 0.25), line(0, 2**60), line(None, None)]

    stats = counted(lines, [2])

    assert stats["rewardByRole"]["supervisor"] == {"labeled": 3, "mean": round(1.1 / 3, 12)}
    assert stats["costUsdByRole"]["supervisor"] == {"usd": float(2**61), "linesWithCost": 3}


def test_a_sum_beyond_a_double_is_null() -> None:
    stats = counted([line(1.5e308, 1.5e308), line(1.5e308, 1.5e308)], [])

    assert stats["rewardByRole"]["supervisor"] == {"labeled": 2, "mean": None}
    assert stats["costUsdByRole"]["supervisor"] == {"usd": None, "linesWithCost": 2}
    assert json.loads(json.dumps(stats, allow_nan=False)) == stats


def test_a_sum_that_passes_beyond_a_double_on_the_way_is_its_exact_total_in_any_order() -> None:
    # Added one by one in floats, 1.5e308 + 1.5e308 is infinite before -1.5e308 comes.
    lines = [line(None, 1.5e308), line(None, 1.5e308), line(None, -1.5e308)]

    assert counted(lines, [])["costUsdByRole"]["supervisor"]["usd"] == 1.5e308
    assert counted(lines, [1])["costUsdByRole"]["supervisor"]["usd"] == 1.5e308


@pytest.mark.parametrize("usd", [0.1, 1.5e308])
def test_counters_stored_as_json_and_read_back_give_the_same_stats(usd: float) -> None:
    stats = BackfillStats()
    for each in (line(0.3, usd), line(0.6, usd), line(None, 0.7, "proposer")):
        stats.observe(each)

    # As the Dagster stages store them between steps (strict JSON: no Infinity).
    stored = json.loads(json.dumps(dataclasses.asdict(stats), allow_nan=False))

    assert BackfillStats(**stored).to_json() == stats.to_json()


def test_counters_stored_with_float_sums_are_still_read() -> None:
    stored = dataclasses.asdict(BackfillStats())
    stored.update(
        reward_labeled_by_role={"supervisor": 2},
        reward_sum_by_role={"supervisor": 0.9},
        cost_usd_by_role={"supervisor": 1.25},
        cost_recorded_by_role={"supervisor": 2},
    )

    stats = BackfillStats(**stored).to_json()

    assert stats["rewardByRole"] == {"supervisor": {"labeled": 2, "mean": 0.45}}
    assert stats["costUsdByRole"] == {"supervisor": {"usd": 1.25, "linesWithCost": 2}}


def test_a_stored_sum_that_was_already_beyond_a_double_stays_null() -> None:
    stored = dataclasses.asdict(BackfillStats())
    stored.update(cost_usd_by_role={"supervisor": math.nan}, cost_recorded_by_role={"supervisor": 2})

    stats = BackfillStats(**stored)
    stats.observe(line(None, -1.0))

    assert stats.to_json()["costUsdByRole"] == {"supervisor": {"usd": None, "linesWithCost": 3}}
