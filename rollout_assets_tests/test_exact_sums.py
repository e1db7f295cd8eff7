"""The recount's exact sums: whole units of 2**-1074 stand for the exact value of every JSON
number, so a sum of them is the exact sum, in any order and across processes."""

from __future__ import annotations

import random
import sys
from fractions import Fraction

import pytest

from rollout_assets.audit.exact_sums import exact_value, units

EDGES = [
    0, 1, -1, 2**63 - 1, -(2**63), 10**30,
    0.0, -0.0, 0.1, -0.1, 1e-7, 0.3333333333333333, 1.5, 123456.789,
    sys.float_info.max, -sys.float_info.max, sys.float_info.min, 5e-324, -5e-324, 2.2250738585072e-308,
]


@pytest.mark.parametrize("value", EDGES)
def test_a_value_in_units_is_exactly_that_value(value: int | float) -> None:
    assert exact_value(units(value)) == Fraction(value)
    assert isinstance(units(value), int)


def test_a_sum_of_units_is_the_exact_sum_in_any_order() -> None:
    rng = random.Random(11)
    values: list[int | float] = [*EDGES[:-10], *(rng.uniform(-1, 1) * 10 ** rng.randint(-12, 12) for _ in range(2_000))]
    exact = sum((Fraction(value) for value in values), Fraction(0))

    assert exact_value(sum(units(value) for value in values)) == exact
    rng.shuffle(values)
    halves = sum(units(value) for value in values[:700]), sum(units(value) for value in values[700:])
    assert exact_value(halves[1] + halves[0]) == exact
    # A float sum would not do: it differs from the exact one on these values.
    assert Fraction(sum(values)) != exact
