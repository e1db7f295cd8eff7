"""The ledger recount's one-pass decoder (`audit/typed_line.py`) against the full path (orjson,
then the pydantic models): on every field of a line and every way to break it, the decoder
accepts only lines the models accept, reads them as orjson does, and accepts every valid line
but the few it leaves to the full path on purpose; a recount is the same with or without it.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import ValidationError

from rollout_assets import audit
from rollout_assets.audit import ledger as ledger_recount
from rollout_assets.audit.strict_json import ledger_json
from rollout_assets.audit.typed_line import valid_line_fields
from rollout_assets.ledger.schema import PARSED_FROM_JSON, RolloutLine
from rollout_assets_tests.dagster_rounds import ROUND, cli_backfill, write_rounds
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line

Line = dict[str, Any]

# What a field may be replaced with: each JSON type, the edges of each, and an integer just
# beyond what the decoder states (2**63), which it leaves to the full path.
REPLACEMENTS: list[Any] = [
    None, True, False, 0, 1, -1, 0.5, -0.0, 1e300, "", " ", "x", "tool", "function", "search",
    "backfill", "tangle.rollout.v1", "2025-01-15T10:30:00Z", [], [1], ["x"], {}, {"a": 1},
    2**63 - 1, -(2**63), 2**63,
]
MISSING = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value inside a line: each object key and each list index."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _changed(line: Line, path: tuple[Any, ...], replacement: Any) -> Line:
    broken = copy.deepcopy(line)
    parent = broken
    for step in path[:-1]:
        parent = parent[step]
    if replacement is MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return broken


def _raw(line: Any) -> bytes:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _full_path(raw: bytes) -> Any | None:
    """The line as the full path reads it when it is valid; None when it refuses it."""
    try:
        value = ledger_json(raw)
        RolloutLine.model_validate(value, context=PARSED_FROM_JSON)
    except (ValueError, ValidationError):
        return None
    return value


def _left_to_the_full_path(raw: bytes) -> bool:
    """The lines the decoder leaves to the full path although they are valid: an integer of
    2**63 or beyond, which it does not state (the one such value in REPLACEMENTS)."""
    return str(2**63).encode() in raw


def _agrees(raw: bytes) -> str | None:
    """What is wrong with the decoder's answer on `raw`, or None."""
    fast, full = valid_line_fields(raw), _full_path(raw)
    if fast is None:
        if full is not None and not _left_to_the_full_path(raw):
            return "a valid line the decoder refuses"
        return None
    if full is None:
        return "a line the models refuse, accepted by the decoder"
    read = {**fast, "messages": msgspec.to_builtins(fast["messages"])}
    expected = {key: full[key] for key in read}
    expected["outcome"] = {key: full["outcome"][key] for key in read["outcome"]}
    if read != expected or set(full["outcome"]) - set(read["outcome"]) != {"verdict"}:
        return f"read differently: {read} against {expected}"
    return None


@pytest.mark.parametrize("base", ["supervisor gap line", "worker line"])
def test_every_field_broken_every_way_the_decoder_agrees_with_the_models(base: str) -> None:
    line = sample_line() if base == "supervisor gap line" else sample_worker_line()
    disagreements, accepted, refused = [], 0, 0
    for path in _paths(line):
        for replacement in [MISSING, *REPLACEMENTS]:
            raw = _raw(_changed(line, path, replacement))
            problem = _agrees(raw)
            if problem is not None:
                disagreements.append(f"{'.'.join(map(str, path))} = {replacement!r}: {problem}")
            accepted += valid_line_fields(raw) is not None
            refused += _full_path(raw) is None
    # An unknown key at every level of the line
    for path in [(), *(path for path in _paths(line) if isinstance(_value_at(line, path), dict))]:
        target = _changed(line, (*path, "unknown"), 1) if path else {**line, "unknown": 1}
        problem = _agrees(_raw(target))
        if problem is not None:
            disagreements.append(f"{'.'.join(map(str, path))}.unknown: {problem}")
    assert disagreements == []
    assert accepted > 100 and refused > 500  # both sides of every rule were reached


def _value_at(line: Line, path: tuple[Any, ...]) -> Any:
    value: Any = line
    for step in path:
        value = value[step]
    return value


def _with_text(line: Line, before: bytes, after: bytes) -> bytes:
    raw = _raw(line)
    assert before in raw
    return raw.replace(before, after, 1)


RULES_IN_CODE = {
    # the rules the models check in code
    "tool message without its call id": lambda: _raw(_changed(sample_worker_line(), ("messages", 2, "tool_call_id"), MISSING)),
    "gated with a positive reward": lambda: _raw(_changed(_changed(sample_line(), ("outcome", "realness_gated"), True), ("outcome", "reward"), 0.5)),
    "no messages and no gap": lambda: _raw(_changed(sample_line(), ("provenance", "gap"), MISSING)),
    "a blank gap": lambda: _raw(_changed(sample_line(), ("provenance", "gap"), " \t")),
    "captured_at without a timezone": lambda: _raw(_changed(sample_line(), ("provenance", "captured_at"), "2025-01-15T10:30:00")),
    "captured_at not UTC": lambda: _raw(_changed(sample_line(), ("provenance", "captured_at"), "2025-01-15T10:30:00+02:00")),
    "captured_at no timestamp": lambda: _raw(_changed(sample_line(), ("provenance", "captured_at"), "yesterday")),
    "sampling a list": lambda: _raw(_changed(sample_line(), ("policy", "sampling"), [1])),
    "metrics a string": lambda: _raw(_changed(sample_line(), ("outcome", "metrics"), "x")),
    "a tool definition a string": lambda: _raw(_changed(sample_line(), ("tool_defs",), ["x"])),
    # what only the bytes can hold
    "no \\n at the end": lambda: _raw(sample_line())[:-1],
    "\\r\\n at the end": lambda: _raw(sample_line())[:-1] + b"\r\n",
    "invalid UTF-8 in a message": lambda: _with_text(sample_worker_line(), b"Fix the", b"Fix \xff the"),
    "NaN as the reward": lambda: _with_text(sample_line(), b'"reward":1,', b'"reward":NaN,'),
    "Infinity in the verdict": lambda: _with_text(sample_line(), b'"composite":1', b'"composite":Infinity'),
    "a number beyond a double in the verdict": lambda: _with_text(sample_line(), b'"composite":1', b'"composite":1e400'),
    "a number beyond a double in the metrics": lambda: _with_text(sample_line(), b'"patch_lines":12', b'"patch_lines":1e400'),
    "a number beyond a double as the cost": lambda: _with_text(sample_line(), b'"usd":0.84', b'"usd":1e400'),
    "a raw control character in a string": lambda: _with_text(sample_worker_line(), b"Fix the", b"Fix\x01the"),
    "a raw tab in a string": lambda: _with_text(sample_worker_line(), b"Fix the", b"Fix\tthe"),
    "a duplicate key, the last invalid": lambda: _with_text(sample_line(), b'"rep":0', b'"rep":0,"rep":"0"'),
    "a trailing comma": lambda: _with_text(sample_line(), b'"rep":0', b'"rep":0,'),
    "a verdict nested 2,000 deep": lambda: _with_text(sample_line(), b'"composite":1', b'"composite":' + b"[" * 2000 + b"]" * 2000),
    "an array, not an object": lambda: b"[" + _raw(sample_line())[:-1] + b"]\n",
    "two lines in one": lambda: _raw(sample_line())[:-1] + _raw(sample_line()),
    "an empty line": lambda: b"\n",
    "a byte order mark": lambda: b"\xef\xbb\xbf" + _raw(sample_line()),
}

LEFT_TO_THE_FULL_PATH = {
    # valid lines the decoder does not read the way the full path does
    "a duplicate key, the first invalid, the last valid": lambda: _with_text(sample_line(), b'"rep":0', b'"rep":"0","rep":0'),
    "an unsigned 64-bit reward": lambda: _raw(_changed(sample_line(), ("outcome", "reward"), 2**64 - 1)),
    "the escape of a lone surrogate in a message": lambda: _with_text(sample_worker_line(), b"Fix the", b"Fix \\ud800 the"),
    "the escape of a lone surrogate in the verdict": lambda: _with_text(sample_line(), b'"patch applies"', b'"patch \\udc80 applies"'),
}

ACCEPTED_AS_THEY_ARE = {
    "a verdict nested 500 deep": lambda: _with_text(sample_line(), b'"composite":1', b'"composite":' + b"[" * 500 + b"]" * 500),
    "an integer beyond 64 bits in the metrics (a double to orjson)": lambda: _with_text(sample_line(), b'"patch_lines":12', b'"patch_lines":123456789012345678901234567890'),
    "an integer beyond 64 bits in the verdict": lambda: _with_text(sample_line(), b'"composite":1', b'"composite":123456789012345678901234567890'),
    "spaces around the object": lambda: b"  " + _raw(sample_line())[:-1] + b"  \n",
    "escaped characters": lambda: _with_text(sample_worker_line(), b"Fix the", b"Fix\\t\\u00e9\\ud83d\\ude00 the"),
    "a message without content": lambda: _raw(_changed(sample_worker_line(), ("messages", 0, "content"), None)),
    "a float reward": lambda: _raw(_changed(sample_line(), ("outcome", "reward"), 0.25)),
    "a gated reward of 0": lambda: _raw(_changed(_changed(sample_line(), ("outcome", "realness_gated"), True), ("outcome", "reward"), 0)),
    "captured_at with +00:00": lambda: _raw(_changed(sample_line(), ("provenance", "captured_at"), "2025-01-15T10:30:00+00:00")),
}


@pytest.mark.parametrize("case", list(RULES_IN_CODE))
def test_the_decoder_refuses_what_the_full_path_refuses(case: str) -> None:
    raw = RULES_IN_CODE[case]()
    assert _full_path(raw) is None
    assert valid_line_fields(raw) is None


@pytest.mark.parametrize("case", list(LEFT_TO_THE_FULL_PATH))
def test_valid_lines_the_decoder_leaves_to_the_full_path(case: str) -> None:
    raw = LEFT_TO_THE_FULL_PATH[case]()
    assert _full_path(raw) is not None
    assert valid_line_fields(raw) is None


@pytest.mark.parametrize("case", list(ACCEPTED_AS_THEY_ARE))
def test_the_decoder_accepts_and_reads_valid_lines_as_orjson_does(case: str) -> None:
    raw = ACCEPTED_AS_THEY_ARE[case]()
    assert valid_line_fields(raw) is not None
    assert _agrees(raw) is None


def test_a_decoder_that_forgot_a_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The field walk fails on a decoder that lets one rule slip: here, the blank gap."""
    from rollout_assets.audit import typed_line

    original = typed_line._fields

    def forgetful(line: Any) -> dict[str, Any]:
        gap = line.provenance.gap
        if isinstance(gap, str) and not gap.strip():
            line.provenance.gap = "said"  # the check skipped
            fields = original(line)
            fields["provenance"]["gap"] = gap
            return fields
        return original(line)

    monkeypatch.setattr(typed_line, "_fields", forgetful)
    assert _agrees(RULES_IN_CODE["a blank gap"]()) == "a line the models refuse, accepted by the decoder"
    with pytest.raises(AssertionError):
        test_every_field_broken_every_way_the_decoder_agrees_with_the_models("supervisor gap line")


def _recount_fields(recount: audit.LedgerRecount) -> dict[str, Any]:
    fields = {}
    for field in dataclasses.fields(recount):
        value = getattr(recount, field.name)
        if field.name == "unreadable":
            value = {name: str(error) for name, error in value.items()}
        elif isinstance(value, audit.spill.SpilledRows):
            value = list(value)
        fields[field.name] = value
    return fields


def test_a_recount_is_the_same_with_or_without_the_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A demo round's ledger, with every broken and left-over line of this file among its own."""
    demo = write_rounds(tmp_path / "demo")
    ledger = tmp_path / "rollout-ledger.jsonl"
    cli_backfill(demo, demo.rounds_root / ROUND, ledger)
    own = ledger.read_bytes().splitlines(keepends=True)
    extra = [make() for cases in (RULES_IN_CODE, LEFT_TO_THE_FULL_PATH, ACCEPTED_AS_THEY_ARE) for make in cases.values()]
    extra = [raw if raw.endswith(b"\n") else raw + b"\n" for raw in extra]  # one line each but the last
    mixed = [line for pair in itertools.zip_longest(own, extra, fillvalue=b"") for line in pair if line]
    ledger.write_bytes(b"".join(mixed) + _raw(sample_line())[:-1])

    with_decoder = audit.recount_ledger(ledger, workers=1)
    monkeypatch.setattr(ledger_recount, "valid_line_fields", lambda raw: None)
    without = audit.recount_ledger(ledger, workers=1)

    assert _recount_fields(with_decoder) == _recount_fields(without)
    read = ledger.read_bytes().splitlines(keepends=True)
    assert with_decoder.lines == len(read)
    assert with_decoder.invalid_lines == sum(_full_path(raw) is None for raw in read) > len(RULES_IN_CODE) // 2


def test_the_recount_comparison_catches_a_decoder_that_misreads_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison above fails on a decoder that reads one field of valid lines wrongly."""
    from rollout_assets.audit import typed_line

    original = typed_line._fields

    def misreading(line: Any) -> dict[str, Any]:
        fields = original(line)
        fields["outcome"]["reward"] = None  # every reward read as "no verdict"
        return fields

    monkeypatch.setattr(typed_line, "_fields", misreading)
    with pytest.raises(AssertionError, match="reward"):
        test_a_recount_is_the_same_with_or_without_the_decoder(tmp_path, monkeypatch)
