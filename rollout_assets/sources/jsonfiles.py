"""JSON reading with the seed's semantics, shared by every reader.

The seed parses with JavaScript's `JSON.parse`, which rejects `NaN` and `Infinity`
(Python's `json` accepts them) and decodes invalid UTF-8 as U+FFFD instead of failing.
Both rules are mirrored here, so an input parses in exactly the cases the seed's did.

Parsing is most of a backfill's work, so it goes through orjson (about 4x the standard
module here). orjson is stricter than JavaScript in three places: invalid UTF-8 bytes, lone
surrogate escapes and integers beyond 64 bits. A document it refuses is parsed again by the
standard module with the seed's rules, so the answer is the same, only slower.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson


class NotJson(ValueError):
    """Raised when text is not strict JSON (as JavaScript's JSON.parse sees it)."""


def _reject_constant(name: str) -> Any:
    raise NotJson(f"{name} is not valid JSON")


# One decoder, built once: json.loads(..., parse_constant=...) would build one per call.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# Compact and non-ASCII kept, like JSON.stringify.
_COMPACT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def parse_json(text: str | bytes) -> Any:
    """Parse strict JSON. Bytes are decoded as UTF-8 with replacement, like Node's readFile(…, 'utf8')."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # not JSON, or one of the cases where orjson is stricter than JavaScript
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        return _STRICT_DECODER.decode(text)
    except NotJson:
        raise
    except (ValueError, RecursionError) as error:
        raise NotJson(str(error)) from error


def read_json_or_none(path: str | Path) -> Any:
    """The seed's `readJson`: the parsed value, or None when the file is missing, unreadable or not JSON."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    try:
        return parse_json(raw)
    except NotJson:
        return None


def to_json_text(value: Any) -> str:
    """Compact JSON as JavaScript's JSON.stringify writes it (no spaces, non-ASCII kept)."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        # Lone surrogates and integers beyond 64 bits: the standard module writes them.
        return _COMPACT_ENCODER.encode(value)


def is_record(value: Any) -> bool:
    return isinstance(value, dict)


def is_number(value: Any) -> bool:
    """A JSON number: int or float, never a bool (Python's bool is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def number_or_none(value: Any) -> int | float | None:
    return value if is_number(value) else None


def integer_or_none(value: Any) -> int | None:
    """An integral JSON number as int (2.0 → 2); anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def round_half_up(value: float) -> int:
    """JavaScript's Math.round: halves round towards +infinity (2.5 → 3, -2.5 → -2)."""
    return math.floor(value + 0.5)
