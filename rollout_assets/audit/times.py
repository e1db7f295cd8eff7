"""The audit's own reading of the time stamps a proposer shot is joined by, and the shot's time
window (docs/input-formats.md §6).

Only the form Claude Code and the loop write is read: the ECMAScript date-time format with a
zone, `YYYY-MM-DDTHH:mm[:ss[.fff]]Z` or `±HH:mm` (JavaScript's `Date.parse` gives these the
same instant; it truncates a fraction to the millisecond). Any other string is `UNREAD`: not
"no time" (the join's reader may read forms this one does not), but a time the audit cannot
place, so a proof that depends on it is not made.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

# docs/input-formats.md §6: a transcript may start this long before startedAt or after completedAt.
WINDOW_SLACK_MS: Final = 120_000


class _Unread:
    """A time stamp that is a string the audit does not read (see the module docstring)."""

    def __repr__(self) -> str:
        return "UNREAD"


UNREAD: Final = _Unread()

_ISO_WITH_ZONE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?(?:(Z)|([+-])(\d\d):(\d\d))\Z", re.ASCII
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(value: Any) -> int | _Unread | None:
    """Epoch milliseconds of `value`; None when it is no string (no time for any reader);
    UNREAD for a string outside the one form read here, or naming no real instant (a 30
    February, hour 24: readers disagree on those)."""
    if not isinstance(value, str):
        return None
    match = _ISO_WITH_ZONE.match(value)
    if match is None:
        return UNREAD
    year, month, day, hour, minute = (int(match[i]) for i in range(1, 6))
    second = int(match[6] or 0)
    millisecond = int((match[7] or "0").ljust(3, "0")[:3])
    offset = 0 if match[8] else (-1 if match[9] == "-" else 1) * (int(match[10]) * 60 + int(match[11]))
    if int(match[10] or 0) > 23 or int(match[11] or 0) > 59:
        return UNREAD
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(timedelta(minutes=offset)))
    except ValueError:
        return UNREAD
    return (moment - _EPOCH) // timedelta(milliseconds=1) + millisecond


def format_ms(ms: int) -> str:
    """An epoch millisecond as the ISO form Claude Code writes."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


class ShotWindow:
    """When a transcript qualifies for a shot (docs/input-formats.md §6): with the receipt's
    `startedAt` and `completedAt` both read, a transcript starting within WINDOW_SLACK_MS
    before the one or after the other; with either of them no time at all, only the worktree's
    only candidate; with either a string the audit does not read, it cannot tell."""

    def __init__(self, started_at: Any, completed_at: Any):
        self.started_text, self.completed_text = started_at, completed_at
        self.started, self.completed = epoch_ms(started_at), epoch_ms(completed_at)

    @property
    def only_candidate_rule(self) -> bool:
        """Either time is no string: the window is no rule, the only candidate is."""
        return self.started is None or self.completed is None

    @property
    def unread(self) -> str | None:
        """The receipt's time the audit cannot read (when the rule depends on it), else None."""
        if self.only_candidate_rule:
            return None
        for name, text, ms in (
            ("startedAt", self.started_text, self.started),
            ("completedAt", self.completed_text, self.completed),
        ):
            if ms is UNREAD:
                return f"{name} {text!r}"
        return None

    def contains(self, start_ms: int) -> bool:
        assert isinstance(self.started, int) and isinstance(self.completed, int)
        return self.started - WINDOW_SLACK_MS <= start_ms <= self.completed + WINDOW_SLACK_MS

    def __str__(self) -> str:
        if self.only_candidate_rule:
            return "a receipt without both startedAt and completedAt (then only the worktree's only transcript qualifies)"
        if self.unread is not None:
            return f"a window the audit cannot place (the receipt's {self.unread})"
        assert isinstance(self.started, int) and isinstance(self.completed, int)
        return (
            f"the shot's window {format_ms(self.started - WINDOW_SLACK_MS)} to "
            f"{format_ms(self.completed + WINDOW_SLACK_MS)}"
        )
