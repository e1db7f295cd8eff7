"""The `tangle.rollout.v1` line as pydantic v2 models: its types and its rules.

Owns what a valid line is (spec: docs/line-format.md). Does not own where a
line's values come from (backfill/) nor how lines reach disk (ledger/io.py).

Lines are produced elsewhere as plain dicts; these models only judge them. Types are
strict on purpose: a `"3"` rep or a `true` generation is a bug in the producer, and
coercing it would hide that bug in the ledger for good.
"""

import math
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

ROLLOUT_SCHEMA = "tangle.rollout.v1"

Role = Literal["agent", "supervisor", "worker", "proposer", "judge", "analyst"]
Split = Literal["search", "dev", "holdout", "canary"]
Capture = Literal["mint", "settle-time", "backfill"]
ChatRole = Literal["system", "user", "assistant", "tool"]

# int before float: smart-mode unions keep the exact type, so 12 stays 12, not 12.0.
# Strict on both sides: a bool or a numeric string is not a number.
Number = StrictInt | StrictFloat


def _non_empty(value: str) -> str:
    if not value:
        raise PydanticCustomError(
            "string_too_short", "String should have at least {min_length} character", {"min_length": 1}
        )
    return value


# Checked in Python, not with `min_length`: pydantic-core measures a constrained string as
# UTF-8 and refuses one holding a lone surrogate (a torn escape in a scenarioId, a file name
# that is not UTF-8), which a line may carry and the writer escapes. Same JSON Schema.
NonEmptyStr = Annotated[
    StrictStr, AfterValidator(_non_empty), WithJsonSchema({"type": "string", "minLength": 1})
]

# A line is plain JSON and nothing else; `allow_inf_nan=False` covers typed floats only.
_LINE_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)


def json_value_problem(value: Any, where: str) -> str | None:
    """Say where and why `value` is not plain, finite JSON; None when it is.

    Fields typed `Any` (verdict, metrics, sampling, tool_defs) skip pydantic's float
    checks, and `json.dumps(allow_nan=False)` would only fail later, at write time.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"{where} is {value!r}: NaN and Infinity are not JSON"
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_value_problem(item, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the non-string key {key!r}: JSON object keys are strings"
            problem = json_value_problem(item, f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    return f"{where} is a {type(value).__name__}, not a JSON value"


# The validation context of a line its caller parsed from JSON text by a parser that refuses
# NaN and Infinity (`RolloutLine.model_validate(value, context=PARSED_FROM_JSON)`): its
# free-form values are plain JSON by construction, so they are not walked again.
_PARSED_FROM_JSON_KEY = "parsed_from_json"
PARSED_FROM_JSON = {_PARSED_FROM_JSON_KEY: True}


def _require_json(value: Any, where: str, info: ValidationInfo) -> Any:
    if info.context is not None and info.context.get(_PARSED_FROM_JSON_KEY) is True:
        return value
    problem = json_value_problem(value, where)
    if problem is not None:
        raise ValueError(problem)
    return value


def captured_at_problem(captured_at: str) -> str | None:
    """Why `captured_at` is no UTC ISO-8601 timestamp; None when it is one."""
    try:
        moment = datetime.fromisoformat(captured_at)
    except ValueError:
        return f"captured_at {captured_at!r} is not an ISO-8601 timestamp"
    # A naive or offset timestamp cannot be compared across machines without guessing.
    if moment.utcoffset() is None:
        return f"captured_at {captured_at!r} has no timezone; write UTC ('Z' or '+00:00')"
    if moment.utcoffset() != timedelta(0):
        return f"captured_at {captured_at!r} is not UTC ('Z' or '+00:00')"
    return None


def _drop_schema_default(field_schema: dict[str, Any]) -> None:
    # The Python default None stands for "key omitted"; null is not a value the key may hold.
    field_schema.pop("default", None)


def _omitted_when_absent() -> Any:
    """Default of an optional key: absent reads as None, but an explicit null is rejected.

    The annotation says what a present key must hold (no `| None`), so `null` fails
    like any other wrong type, with the field named; defaults are not validated.
    """
    return Field(default=None, json_schema_extra=_drop_schema_default)


class ToolCallFunction(BaseModel):
    """The called tool and its arguments, kept as the JSON string the model emitted."""

    model_config = _LINE_CONFIG

    name: StrictStr
    # Not parsed: a model can emit malformed arguments, and that is evidence to keep.
    arguments: StrictStr


class ToolCall(BaseModel):
    """One tool call of an assistant message (OpenAI chat-with-tools shape)."""

    model_config = _LINE_CONFIG

    id: StrictStr
    type: Literal["function"]
    function: ToolCallFunction


_CHAT_OPTIONAL_KEYS = ("reasoning_content", "tool_calls", "tool_call_id", "name")


class ChatMessage(BaseModel):
    """One message of a transcript; optional keys are omitted, never null."""

    model_config = _LINE_CONFIG

    role: ChatRole
    content: StrictStr | None
    reasoning_content: StrictStr = _omitted_when_absent()
    tool_calls: list[ToolCall] = _omitted_when_absent()
    tool_call_id: StrictStr = _omitted_when_absent()
    name: StrictStr = _omitted_when_absent()

    @model_validator(mode="after")
    def _tool_message_answers_a_call(self) -> "ChatMessage":
        # Without the id, a tool result cannot be paired with the call it answers.
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("tool_call_id is required on a message with role 'tool'")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        message = handler(self)
        for key in _CHAT_OPTIONAL_KEYS:
            if message.get(key) is None:
                message.pop(key, None)
        return message


class Task(BaseModel):
    """What was attempted: one instance of a suite, at one seed and repetition."""

    model_config = _LINE_CONFIG

    suite: StrictStr
    instance_id: StrictStr
    split: Split
    seed: StrictInt | None
    rep: StrictInt


class Policy(BaseModel):
    """Who attempted it; every field is null when the source did not record it."""

    model_config = _LINE_CONFIG

    harness: StrictStr | None
    harness_version: StrictStr | None
    model: StrictStr | None
    provider: StrictStr | None
    profile_commit: StrictStr | None
    sampling: dict[str, Any] | None

    @field_validator("sampling")
    @classmethod
    def _sampling_is_json(cls, sampling: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        return _require_json(sampling, "sampling", info)


class Outcome(BaseModel):
    """How it went. `reward` null means "no verdict", never zero."""

    model_config = _LINE_CONFIG

    reward: Number | None
    reward_source: StrictStr | None
    verdict: Any
    metrics: dict[str, Any]
    is_completed: StrictBool
    is_truncated: StrictBool
    error: StrictStr | None
    realness_gated: StrictBool

    @field_validator("verdict", "metrics")
    @classmethod
    def _free_form_is_json(cls, value: Any, info: ValidationInfo) -> Any:
        return _require_json(value, str(info.field_name), info)

    @model_validator(mode="after")
    def _gated_reward_is_not_positive(self) -> "Outcome":
        # A rollout that failed the realness screen must never read as a success.
        if self.realness_gated and self.reward is not None and self.reward > 0:
            raise ValueError(
                f"reward is {self.reward!r} but realness_gated is true: "
                "a gated rollout's reward must be null or <= 0"
            )
        return self


class Cost(BaseModel):
    """What it cost; null is "not measured", never zero."""

    model_config = _LINE_CONFIG

    usd: Number | None
    tokens_in: Number | None
    tokens_out: Number | None
    tokens_reasoning: Number | None
    cache_read: Number | None
    cache_write: Number | None
    wall_s: Number | None


class Artifacts(BaseModel):
    """Where the evidence behind the line lives."""

    model_config = _LINE_CONFIG

    patch_path: StrictStr | None
    run_dir: StrictStr | None
    transcript_ref: StrictStr | None


class Provenance(BaseModel):
    """When and how the line was captured, and why its transcript is missing if it is."""

    model_config = _LINE_CONFIG

    captured_at: StrictStr = Field(json_schema_extra={"format": "date-time"})
    capture: Capture
    gap: NonEmptyStr = _omitted_when_absent()

    @field_validator("gap")
    @classmethod
    def _gap_says_why(cls, gap: str) -> str:
        if not gap.strip():
            raise ValueError("gap must say why the transcript is missing; it is blank")
        return gap

    @field_validator("captured_at")
    @classmethod
    def _captured_at_is_utc(cls, captured_at: str) -> str:
        problem = captured_at_problem(captured_at)
        if problem is not None:
            raise ValueError(problem)
        return captured_at

    @model_serializer(mode="wrap")
    def _omit_absent_gap(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        provenance = handler(self)
        if provenance.get("gap") is None:
            provenance.pop("gap", None)
        return provenance


class RolloutLine(BaseModel):
    """One agent invocation: a line of a `tangle.rollout.v1` ledger."""

    # `schema` is a BaseModel attribute, hence the alias. Validation by the field name is
    # deliberately off: a dict keyed `schema_` would pass and then be written off-spec.
    model_config = ConfigDict(**_LINE_CONFIG, serialize_by_alias=True)

    schema_: Literal[ROLLOUT_SCHEMA] = Field(alias="schema")
    rollout_id: NonEmptyStr
    parent_rollout_id: NonEmptyStr | None
    run_id: NonEmptyStr
    experiment_id: StrictStr | None
    candidate_id: StrictStr | None
    generation: StrictInt | None
    candidate_index: StrictInt | None
    role: Role
    task: Task
    policy: Policy
    messages: list[ChatMessage]
    tool_defs: list[dict[str, Any]]
    outcome: Outcome
    cost: Cost
    artifacts: Artifacts
    provenance: Provenance

    @field_validator("tool_defs")
    @classmethod
    def _tool_defs_are_json(cls, tool_defs: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        return _require_json(tool_defs, "tool_defs", info)

    @model_validator(mode="after")
    def _gap_line_says_why(self) -> "RolloutLine":
        # Nothing silently dropped: a line without a transcript must carry the reason.
        if not self.messages and self.provenance.gap is None:
            raise ValueError("messages is empty, so provenance.gap is required (why is there no transcript?)")
        return self


def rollout_json_schema() -> dict[str, Any]:
    """The JSON Schema of one ledger line, keyed as in the file (`schema`, not `schema_`).

    Besides the types pydantic derives, it states the rules the models check in code, so a
    consumer validating with the schema accepts and refuses the lines this module does: a
    `tool` message answers a call (`tool_call_id`), a gated rollout's reward is null or <= 0,
    a line without messages says why (`provenance.gap`), and a gap is not blank. It is looser
    in two places: `captured_at` (`format: date-time`, which validators need not enforce; the
    models also require UTC), and integers, which JSON Schema lets be written `1.0`.
    """
    # The draft first, so a validator need not guess it (pydantic writes 2020-12 keywords).
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **RolloutLine.model_json_schema(by_alias=True),
    }
    definitions = schema["$defs"]
    definitions["ChatMessage"]["if"] = {"properties": {"role": {"const": "tool"}}, "required": ["role"]}
    definitions["ChatMessage"]["then"] = {"required": ["tool_call_id"]}
    definitions["Outcome"]["if"] = {
        "properties": {"realness_gated": {"const": True}},
        "required": ["realness_gated"],
    }
    definitions["Outcome"]["then"] = {
        "properties": {"reward": {"anyOf": [{"type": "null"}, {"type": "number", "maximum": 0}]}}
    }
    definitions["Provenance"]["properties"]["gap"]["pattern"] = r"\S"
    definitions["Provenance"]["properties"]["captured_at"]["format"] = "date-time"
    schema["if"] = {"properties": {"messages": {"maxItems": 0}}, "required": ["messages"]}
    schema["then"] = {"properties": {"provenance": {"required": ["gap"]}}}
    return schema
