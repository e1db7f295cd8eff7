"""A ledger line decoded and validated in one pass (`valid_line_fields`), for the ledger recount.

The recount proves every line against the schema. Parsing a line into Python objects and then
walking them with the pydantic models (`ledger/schema.py`) cost most of a check step's time;
msgspec decodes the bytes straight into typed structs and refuses what does not fit while it
parses. These structs state the same rules as the models, field by field; what msgspec cannot
state (a tool message's call id, a gated reward, a gap's reason, a UTC timestamp, the values
only orjson reads the same way) is checked after the decode.

The fast path only ever says yes. A line it does not accept, for whatever reason, is read again
by the full path (orjson, then the pydantic models), which alone words the problem: the recount
of a ledger, and every message it gives, is the same either way. `test_typed_line.py` holds the
two to that on every field and every refusal.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from rollout_assets.ledger.schema import ROLLOUT_SCHEMA, Capture, ChatRole, Role, Split, captured_at_problem

# 64-bit signed integers (the bounds msgspec can state). orjson reads unsigned ones up to
# 2**64 as integers too and, beyond, the full path reads a double or refuses: such a line is
# left to it.
_Int = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
_Number = _Int | float
_NonEmpty = Annotated[str, Meta(min_length=1)]


class _Strict(Struct, forbid_unknown_fields=True):
    """A JSON object with exactly these keys (the models' `extra="forbid"`)."""


class _ToolCallFunction(_Strict):
    name: str
    arguments: str


class _ToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: _ToolCallFunction


class _ChatMessage(_Strict):
    role: ChatRole
    content: str | None
    # Optional keys are omitted, never null: UNSET when absent, and null is no str.
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[_ToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET
    name: str | UnsetType = UNSET


class _Task(_Strict):
    suite: str
    instance_id: str
    split: Split
    seed: _Int | None
    rep: _Int


class _Policy(_Strict):
    harness: str | None
    harness_version: str | None
    model: str | None
    provider: str | None
    profile_commit: str | None
    sampling: Raw  # an object or null, read by orjson (see `_free_form`)


class _Outcome(_Strict):
    reward: _Number | None
    reward_source: str | None
    verdict: Raw
    metrics: Raw
    is_completed: bool
    is_truncated: bool
    error: str | None
    realness_gated: bool


class _Cost(_Strict):
    usd: _Number | None
    tokens_in: _Number | None
    tokens_out: _Number | None
    tokens_reasoning: _Number | None
    cache_read: _Number | None
    cache_write: _Number | None
    wall_s: _Number | None


class _Artifacts(_Strict):
    patch_path: str | None
    run_dir: str | None
    transcript_ref: str | None


class _Provenance(_Strict):
    captured_at: str
    capture: Capture
    gap: _NonEmpty | UnsetType = UNSET


class _Line(_Strict):
    schema: Literal[ROLLOUT_SCHEMA]  # type: ignore[valid-type]  (a constant, as in the models)
    rollout_id: _NonEmpty
    parent_rollout_id: _NonEmpty | None
    run_id: _NonEmpty
    experiment_id: str | None
    candidate_id: str | None
    generation: _Int | None
    candidate_index: _Int | None
    role: Role
    task: _Task
    policy: _Policy
    messages: list[_ChatMessage]
    tool_defs: list[Raw]
    outcome: _Outcome
    cost: _Cost
    artifacts: _Artifacts
    provenance: _Provenance


_DECODER = msgspec.json.Decoder(_Line)


class _NotFast(Exception):
    """The fast path does not accept the line: the full path reads it."""


def _free_form(raw: Raw, kinds: bytes = b"") -> Any:
    """A free-form value as orjson reads it (the full path's reading, big integers included),
    whose first byte, when `kinds` are given, is one of them (`{` an object, `n` null)."""
    value = bytes(raw)
    if kinds and value[0] not in kinds:
        raise _NotFast
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise _NotFast from None


def _dict(struct: Struct, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A struct's fields as the model's dump has them (an absent optional key omitted), but
    those in `leave_out`."""
    return {
        name: value
        for name in struct.__struct_fields__
        if name not in leave_out and (value := getattr(struct, name)) is not UNSET
    }


def valid_line_fields(raw: bytes) -> dict[str, Any] | None:
    """The fields of a valid ledger line, as the full path's reading holds them; None when the
    line is not valid or not one this path reads the same way (the full path then decides).

    `messages` holds one struct per message (the recount counts them and reads nothing
    inside); `policy`, `tool_defs` and `outcome.verdict` are left out.
    """
    if not raw.endswith(b"\n") or raw.endswith(b"\r\n"):
        return None
    try:
        line = _DECODER.decode(raw)
        return _fields(line)
    except (msgspec.DecodeError, _NotFast, RecursionError):  # RecursionError: nested too deeply
        return None


def _fields(line: _Line) -> dict[str, Any]:
    for message in line.messages:
        if message.role == "tool" and message.tool_call_id is UNSET:
            raise _NotFast
    outcome = line.outcome
    if outcome.realness_gated and outcome.reward is not None and outcome.reward > 0:
        raise _NotFast
    provenance = line.provenance
    if provenance.gap is UNSET:
        if not line.messages:
            raise _NotFast
    elif not provenance.gap.strip():
        raise _NotFast
    if captured_at_problem(provenance.captured_at) is not None:
        raise _NotFast
    _free_form(line.policy.sampling, b"{n")
    _free_form(outcome.verdict)
    for definition in line.tool_defs:
        _free_form(definition, b"{")
    metrics = _free_form(outcome.metrics, b"{")
    # policy, tool_defs and the verdict are not read back: a valid line's are plain JSON, which
    # is all the recount asks of them.
    return {
        **_dict(line, leave_out=("policy", "tool_defs")),
        "task": _dict(line.task),
        "outcome": {**_dict(outcome, leave_out=("verdict",)), "metrics": metrics},
        "cost": _dict(line.cost),
        "artifacts": _dict(line.artifacts),
        "provenance": _dict(provenance),
    }
