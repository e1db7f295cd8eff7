"""Exact sums of JSON numbers in a fixed-size integer: the ledger recount's reward and cost sums.

Every double is a whole number of units of 2**-1074 (the smallest subnormal double), and so is
every integer. A sum is kept as that whole number of units, a Python int, so adding a value is
one shift and one integer addition, and parts recounted in other processes add up exactly,
whatever their order. A `Fraction` gives the same exact sums but reduces by a gcd at every
addition: 0.38 s against 0.03 s for 72,000 costs, the reward and cost of each of the 36,060
lines of the x1 benchmark round (docs/performance.md).
"""

from __future__ import annotations

from fractions import Fraction

_UNIT_BITS = 1074  # a unit is 2**-1074
_UNIT_DENOMINATOR = 1 << _UNIT_BITS


def units(value: int | float) -> int:
    """`value` (an int, or a finite float) as a whole number of units of 2**-1074, exactly."""
    if isinstance(value, int):
        return value << _UNIT_BITS
    numerator, denominator = value.as_integer_ratio()  # the denominator is a power of two
    return numerator << (_UNIT_BITS + 1 - denominator.bit_length())


def exact_value(total_units: int) -> Fraction:
    """A sum of `units`, as the exact number it stands for."""
    return Fraction(total_units, _UNIT_DENOMINATOR)
