"""The audits' own JSON reading: input files as the seed reads them, ledger lines strictly.

Not the readers' or the ledger's code: a check that parsed with the code it checks could not
catch that code's mistakes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from rollout_assets.io import MAX_NESTING  # the rule, not the reader


def is_number(value: Any) -> bool:
    """A JSON number: Python's bool is an int, and no number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _int_or_double_or_none(text: str) -> int | float | None:
    value = int(text)
    if -(2**63) <= value < 2**64:
        return value
    return _finite_or_none(text)


def _loads(raw: bytes) -> Any:
    """Strict JSON (NaN/Infinity refused); orjson for speed, the standard module for what only
    it accepts (invalid UTF-8, decoded with replacement as the seed does; lone surrogates). A
    number beyond a double reads as null, and an integer beyond 64 bits as a double, as orjson
    and JavaScript read them."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(
            raw.decode("utf-8", errors="replace"),
            parse_constant=_reject_constant,
            parse_float=_finite_or_none,
            parse_int=_int_or_double_or_none,
        )


def input_json(raw: bytes) -> Any:
    """Input files are read as the seed reads them: UTF-8 with replacement, NaN/Infinity refused;
    and, as the readers do, a document nested deeper than MAX_NESTING levels is unreadable."""
    try:
        value = _loads(raw)
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    depths = [(value, 1)] if isinstance(value, (dict, list)) else []
    while depths:
        item, depth = depths.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"nested deeper than {MAX_NESTING} levels")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                depths.append((child, depth + 1))
    return value


def any_depth_json(raw: bytes) -> Any:
    """A transcript record, read as `input_json` reads a file but at any depth the parsers
    reach (docs/input-formats.md: no record of a transcript is refused for its depth)."""
    try:
        return _loads(raw)
    except RecursionError as error:
        raise ValueError("nested deeper than the parsers read") from error


class NotALedgerLine(ValueError):
    """Bytes that are no `tangle.rollout.v1` line whatever their JSON: not UTF-8, not ended by
    a single `\\n`, or holding a number no double can hold."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotALedgerLine(f"the number {text[:40]} overflows a double")
    return value


def _int_or_finite_float(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else _finite_float(text)


def ledger_json(raw: bytes) -> Any:
    """One ledger line, read strictly (docs/line-format.md: UTF-8, `\\n` after every line):
    unlike the inputs, nothing is repaired. Invalid UTF-8, a line without its `\\n` (a ledger
    cut short), a `\\r\\n` end, NaN/Infinity and a number beyond a double (`1e400`, which
    JavaScript reads as Infinity) are refused. Past the line end, orjson refuses all of these
    itself; the standard module reads only what orjson refuses although the ledger writer
    writes it: the escape of a lone UTF-16 surrogate."""
    if not raw.endswith(b"\n"):
        raise NotALedgerLine("no \\n at the end of the line: the ledger ends mid-line")
    if raw.endswith(b"\r\n"):
        raise NotALedgerLine("the line ends with \\r\\n, not \\n")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NotALedgerLine(f"not UTF-8 ({error})") from None
    try:
        return json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_int_or_finite_float
        )
    except RecursionError:
        raise NotALedgerLine("nested deeper than the parsers read") from None
