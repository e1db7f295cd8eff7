"""`js_date_parse_ms` against JavaScript's `Date.parse`: every expected value below is what
Node 20's `Date.parse` returns for the string (with TZ=UTC, so a time without an offset is
UTC on both sides)."""

from typing import Any

import pytest

from rollout_assets.backfill.jsdate import js_date_parse_ms

READ_AS_NODE_READS_THEM = [
    ("2025-01-01T10:00:00.000Z", 1735725600000),
    ("2025-01-01t10:00:00.000z", 1735725600000),
    ("2025-01-01 10:00:00Z", 1735725600000),
    ("2025-01-01T10:00:00", 1735725600000),
    ("2025-01-01T10:00", 1735725600000),
    ("2025-01-01T10:00:00.1Z", 1735725600100),
    ("2025-01-01T10:00:00.123456789Z", 1735725600123),
    # Past nine digits V8 keeps nine significant ones and still divides as for nine.
    ("2025-01-01T10:00:00.0264183151Z", 1735725600264),
    ("2025-01-01T10:00:00+01:00", 1735722000000),
    ("2025-01-01T10:00:00+0100", 1735722000000),
    ("2025-01-01T10:00:00.000+0000", 1735725600000),
    ("2025-01-01T10:00:00+23:59", 1735639260000),
    ("2025-01-01Z", 1735689600000),
    ("2025-01", 1735689600000),
    ("2025", 1735689600000),
    ("+002025-01-01T10:00:00Z", 1735725600000),
    ("-000001-01-01T00:00:00Z", -62198755200000),
    ("+275760-09-13T00:00:00Z", 8640000000000000),
    ("-271821-04-20T00:00:00Z", -8640000000000000),
    ("2025-01-01T24:00:00Z", 1735776000000),
    ("2025-02-30T00:00:00Z", 1740873600000),  # 2 March, as Date.UTC counts
    ("2024-02-29T00:00:00Z", 1709164800000),
    ("Wed, 01 Jan 2025 10:00:00 GMT", 1735725600000),
    ("Thu, 01 Jan 2025 10:00:00 GMT", 1735725600000),  # the weekday is not checked
    ("Wed, 1 Jan 2025 10:00:00 +0100", 1735722000000),
    ("01 Jan 2025 10:00:00 GMT", 1735725600000),
    (" Wed, 01 Jan 2025 10:00:00 GMT ", 1735725600000),
    ("Wed, 01 Jan 2025 10:00:00 est", 1735743600000),
    ("Wed, 01 Jan 2025 10:00:00 UTC+0100", 1735722000000),
    ("Wed Jan 01 2025 10:00:00 GMT+0100 (Central European Standard Time)", 1735722000000),
    ("Wed Jan 01 2025 10:00:00 GMT+0000 (Coordinated Universal Time)", 1735725600000),
    ("Jan 1 2025", 1735689600000),
]

NAN_IN_NODE = [
    "2025-01-01T10",
    "2025-01-01T10Z",
    "2025-01-01T10:00:00.Z",
    "2025-01-01T10:00:00+01",
    "2025-01-01T10:00:00 Z",
    "2025-01-01T10:00:00 GMT",
    "20250101T100000Z",
    "2025-W01-3T10:00:00Z",
    "2025-01-01T10:00:00,123Z",
    "-000000-01-01T00:00:00Z",
    "2025-01-01T24:00:01Z",
    "2025-01-01T23:60:00Z",
    "2025-01-01T23:59:60Z",
    "2025-13-01T00:00:00Z",
    "2025-01-00T00:00:00Z",
    "2025-01-32T00:00:00Z",
    "2025-01-01T10:00:00+24:00",
    "2025-01-01T10:00:00+12:60",
    "+275760-09-13T00:00:00.001Z",
    "-271821-04-19T23:59:59.999Z",
    " 2025-01-01T10:00:00.000Z",
    "2025-01-01T10:00:00.000Z[UTC]",
    "2025-1-1T10:00:00Z",
    "1735725600000",
    "9999-05-26+05:30",
    "22 January 2025 +0100",
    "Wed, 01 Jan 2025 10:00:00GMT",
    "Wed, 01 Jan 2025 25:00:00 GMT",
    "Wed, 32 Jan 2025 10:00:00 GMT",
    "",
]


@pytest.mark.parametrize(("value", "expected"), READ_AS_NODE_READS_THEM)
def test_reads_what_date_parse_reads_with_its_result(value: str, expected: int) -> None:
    assert js_date_parse_ms(value) == expected


@pytest.mark.parametrize("value", NAN_IN_NODE)
def test_gives_none_where_date_parse_gives_nan(value: str) -> None:
    assert js_date_parse_ms(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "0099-01-01 10:00:00Z",  # V8: 1999; its legacy parser moves years below 100
        "0000-11-23Z",  # V8: 2000
        "2025/01/01",
        "1/1/2025",
    ],
)
def test_legacy_forms_beyond_the_documented_ones_read_as_no_time(value: str) -> None:
    # Date.parse accepts these (docs/seed.md, the deliberate differences); reading
    # them as no time makes the join fall back to "the only candidate" instead of
    # possibly choosing by a wrong time.
    assert js_date_parse_ms(value) is None


@pytest.mark.parametrize("value", [None, 1_735_689_600_000, ["2025-01-01"], {"at": "2025"}])
def test_anything_but_a_string_is_no_time(value: Any) -> None:
    assert js_date_parse_ms(value) is None
