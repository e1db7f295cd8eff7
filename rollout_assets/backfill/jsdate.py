"""`Date.parse` for the time stamps a round records, as the seed reads them.

The seed joins a proposer shot to its transcript by comparing the receipt's `startedAt` and
`completedAt` with each transcript's first time stamp, all through JavaScript's `Date.parse`.
Python's `datetime.fromisoformat` disagrees with it both ways: it refuses `2025-01-01T10:00:00z`,
`…+0000` and the RFC 1123 form `date -R` and `toUTCString()` write, accepts forms `Date.parse`
refuses (`20250101T100000Z`, `2025-01-01T10Z`), and keeps microseconds where JavaScript
truncates to the millisecond. Either way a shot could join another transcript than the seed's.

This reads what V8's `Date.parse` reads, with its results (checked against Node):

- the ECMAScript date-time format `YYYY[-MM[-DD]][THH:mm[:ss[.fff…]]][Z|±HH:mm]`, with V8's
  leniencies: `t`/`z` in lower case, a space for `T`, `±HHmm`, `+YYYYYY`/`-YYYYYY` years, `24:00`
  as the end of the day, any number of fraction digits (truncated), a day up to 31 in any month
  (`02-30` is 2 March, as `Date.UTC` counts);
- the RFC 2822 / RFC 1123 form `[Wed,] 01 Jan 2025 10:00[:00] GMT|UT|UTC|Z|±HHMM|EST…` and the
  `Date.prototype.toString()` form `Wed Jan 01 2025 10:00:00 GMT+0100 (zone name)`.

Two differences, on purpose: a time without an offset is read as UTC (JavaScript would use the
host's zone, so the seed's join would depend on the machine), and the rest of V8's legacy
forms (`Jan 1 2025`, `2025/01/01`, `1/1/2025`, …) read as no time at all.
"""

from __future__ import annotations

import re
from typing import Any

_MS_PER_DAY = 86_400_000
# ECMAScript's time value range: ±100,000,000 days around the epoch.
_MAX_TIME_MS = 8_640_000_000_000_000

_ES_FORM = re.compile(
    r"(?P<year>\d{4}|[+-]\d{6})(?:-(?P<month>\d\d)(?:-(?P<day>\d\d))?)?"
    r"(?:(?:(?P<separator>[Tt ])(?P<hour>\d\d):(?P<minute>\d\d)(?::(?P<second>\d\d)(?:\.(?P<fraction>\d+))?)?)?"
    r"(?P<zone>[Zz]|[+-]\d\d:?\d\d)?)\Z",
    re.ASCII,
)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAY = r"(?:[A-Za-z]+,?\s+)?"
_CLOCK = r"(?P<hour>\d\d?):(?P<minute>\d\d)(?::(?P<second>\d\d)(?:\.(?P<fraction>\d+))?)?"
_ZONE = r"(?:\s+(?P<zone>(?:GMT|UTC|UT)?[+-]\d\d:?\d\d|GMT|UTC|UT|Z|[ECMP][SD]T))?"
_COMMENT = r"(?:\s*\([^()]*\))?"
# 01 Jan 2025 10:00:00 GMT (RFC 2822, RFC 1123, toUTCString)
_DAY_MONTH_YEAR = re.compile(
    rf"{_WEEKDAY}(?P<day>\d\d?)\s+(?P<month>[A-Za-z]+)\s+(?P<year>\d{{4}})(?:\s+{_CLOCK})?{_ZONE}{_COMMENT}\Z",
    re.ASCII | re.IGNORECASE,
)
# Wed Jan 01 2025 10:00:00 GMT+0100 (Central European Standard Time) (toString)
_MONTH_DAY_YEAR = re.compile(
    rf"{_WEEKDAY}(?P<month>[A-Za-z]+)\s+(?P<day>\d\d?)\s+(?P<year>\d{{4}})(?:\s+{_CLOCK})?{_ZONE}{_COMMENT}\Z",
    re.ASCII | re.IGNORECASE,
)
# RFC 2822's obsolete North American zones, which V8 knows by name.
_NAMED_ZONE_MINUTES = {
    "EST": -300,
    "EDT": -240,
    "CST": -360,
    "CDT": -300,
    "MST": -420,
    "MDT": -360,
    "PST": -480,
    "PDT": -420,
}


def js_date_parse_ms(value: Any) -> float | None:
    """Epoch milliseconds as `Date.parse(value)` gives them, or None where it gives NaN
    (and for anything that is not a string)."""
    if not isinstance(value, str):
        return None
    match = _ES_FORM.match(value)
    if match is not None:
        return _es_form_ms(match)
    for form in (_DAY_MONTH_YEAR, _MONTH_DAY_YEAR):
        match = form.match(value.strip())
        if match is not None:
            return _written_form_ms(match)
    return None


def _es_form_ms(match: re.Match[str]) -> float | None:
    year_text = match["year"]
    if year_text == "-000000":  # ECMAScript forbids minus zero as a year
        return None
    month = int(match["month"] or 1)
    day = int(match["day"] or 1)
    zone = match["zone"]
    if match["hour"] is None and zone is not None and (match["day"] is None or zone not in "Zz"):
        return None  # only a full date may carry a zone without a time, and only Z
    legacy = match["separator"] == " " or (match["hour"] is None and zone is not None)
    if legacy and not _four_digit_year_from_100(year_text):
        return None  # V8 reads these forms with its legacy parser, which moves years below 100
    return _time_ms(
        int(year_text),
        month,
        day,
        int(match["hour"] or 0),
        int(match["minute"] or 0),
        int(match["second"] or 0),
        match["fraction"],
        match["zone"],
    )


def _written_form_ms(match: re.Match[str]) -> float | None:
    month_name = match["month"].lower()
    if len(month_name) < 3 or month_name[:3] not in _MONTHS or not _four_digit_year_from_100(match["year"]):
        return None
    if match["hour"] is None and match["zone"] not in (None, "Z", "z"):
        return None
    return _time_ms(
        int(match["year"]),
        _MONTHS.index(month_name[:3]) + 1,
        int(match["day"]),
        int(match["hour"] or 0),
        int(match["minute"] or 0),
        int(match["second"] or 0),
        match["fraction"],
        match["zone"],
    )


def _four_digit_year_from_100(year_text: str) -> bool:
    # V8's legacy parser reads years 0-49 as 2000-2049 and 50-99 as 1900-1999, even written
    # with four digits; such dates read as no time here rather than as another century.
    return len(year_text) == 4 and int(year_text) >= 100


def _time_ms(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    fraction: str | None,
    zone: str | None,
) -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and minute <= 59 and second <= 59):
        return None
    if hour > 24 or (hour == 24 and (minute or second or (fraction and fraction.strip("0")))):
        return None
    offset = _zone_minutes(zone)
    if offset is None:
        return None
    millisecond = _milliseconds(fraction) if fraction else 0
    days = _days_from_civil(year, month, 1) + day - 1
    time_ms = days * _MS_PER_DAY + ((hour * 60 + minute - offset) * 60 + second) * 1000 + millisecond
    if abs(time_ms) > _MAX_TIME_MS:
        return None
    return float(time_ms)


def _milliseconds(fraction: str) -> int:
    """V8's reading of a fraction of a second: its first three digits, except that past nine
    digits it keeps the first nine significant ones (leading zeros skipped) and still divides
    as if there were nine (`.0264183151` is 264 ms)."""
    value = int(fraction.lstrip("0")[:9] or "0")
    length = min(len(fraction), 9)
    if length < 3:
        return value * 10 ** (3 - length)
    return value // 10 ** (length - 3)


def _zone_minutes(zone: str | None) -> int | None:
    """Minutes east of UTC; 0 for no zone (read as UTC, see the module note); None if invalid."""
    if zone is None:
        return 0
    zone = zone.upper()
    if zone in ("Z", "GMT", "UTC", "UT"):
        return 0
    if zone in _NAMED_ZONE_MINUTES:
        return _NAMED_ZONE_MINUTES[zone]
    digits = zone.lstrip("GMTUC").replace(":", "")
    hours, minutes = int(digits[1:3]), int(digits[3:5])
    if hours > 23 or minutes > 59:
        return None
    return (hours * 60 + minutes) * (-1 if digits[0] == "-" else 1)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a proleptic Gregorian date, for any year (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468
