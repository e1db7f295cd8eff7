"""The `tangle.rollout.v1` line rules: each one accepted when kept, rejected when broken."""

from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from rollout_assets.ledger import ROLLOUT_SCHEMA, ChatMessage, RolloutLine, rollout_json_schema
from rollout_assets.ledger.schema import PARSED_FROM_JSON
from rollout_assets_tests.ledger_samples import SUPERVISOR_GAP, sample_line, sample_worker_line


def rejection(line: dict[str, Any]) -> list[tuple[str, str]]:
    """The (field path, message) pairs pydantic reports for an invalid line."""
    with pytest.raises(ValidationError) as caught:
        RolloutLine.model_validate(line)
    return [(".".join(str(part) for part in error["loc"]), error["msg"]) for error in caught.value.errors()]


def test_supervisor_gap_line_is_valid() -> None:
    rollout = RolloutLine.model_validate(sample_line())

    assert rollout.schema_ == ROLLOUT_SCHEMA
    assert rollout.role == "supervisor"
    assert rollout.messages == []
    assert rollout.provenance.gap == SUPERVISOR_GAP


def test_worker_line_with_tool_calls_is_valid() -> None:
    rollout = RolloutLine.model_validate(sample_worker_line())

    assert [message.role for message in rollout.messages] == ["user", "assistant", "tool", "assistant"]
    tool_call = rollout.messages[1].tool_calls[0]
    assert (tool_call.id, tool_call.type, tool_call.function.name) == ("call_1", "function", "read")
    assert tool_call.function.arguments == '{"path":"astropy/io/tests/test_x.py"}'
    assert rollout.messages[2].tool_call_id == "call_1"
    assert rollout.provenance.gap is None


def test_dump_gives_back_the_line_with_schema_key_and_absent_keys_omitted() -> None:
    line = sample_worker_line()

    dumped = RolloutLine.model_validate(line).model_dump(mode="json")

    assert dumped == line
    assert next(iter(dumped)) == "schema"
    assert "gap" not in dumped["provenance"]
    assert dumped["messages"][0] == {"role": "user", "content": "Fix the failing test in astropy/io."}


def test_ints_stay_ints() -> None:
    rollout = RolloutLine.model_validate(sample_line())

    assert type(rollout.cost.wall_s) is int
    assert type(rollout.outcome.reward) is int
    assert type(rollout.cost.usd) is float


def test_wrong_schema_constant_is_rejected() -> None:
    assert rejection(sample_line(schema="tangle.rollout.v2")) == [
        ("schema", "Input should be 'tangle.rollout.v1'")
    ]


def test_schema_key_spelled_as_python_field_name_is_rejected() -> None:
    line = sample_line()
    line["schema_"] = line.pop("schema")

    assert rejection(line) == [
        ("schema", "Field required"),
        ("schema_", "Extra inputs are not permitted"),
    ]


def test_unknown_role_is_rejected() -> None:
    assert rejection(sample_line(role="reviewer")) == [
        ("role", "Input should be 'agent', 'supervisor', 'worker', 'proposer', 'judge' or 'analyst'")
    ]


def test_unknown_split_is_rejected() -> None:
    line = sample_line()
    line["task"]["split"] = "train"

    assert rejection(line) == [("task.split", "Input should be 'search', 'dev', 'holdout' or 'canary'")]


def test_unknown_capture_is_rejected() -> None:
    line = sample_line()
    line["provenance"]["capture"] = "live"

    assert rejection(line) == [("provenance.capture", "Input should be 'mint', 'settle-time' or 'backfill'")]


def test_unknown_chat_role_is_rejected() -> None:
    line = sample_worker_line()
    line["messages"][0]["role"] = "developer"

    assert rejection(line) == [("messages.0.role", "Input should be 'system', 'user', 'assistant' or 'tool'")]


def test_tool_message_without_tool_call_id_is_rejected() -> None:
    line = sample_worker_line()
    del line["messages"][2]["tool_call_id"]

    assert rejection(line) == [
        ("messages.2", "Value error, tool_call_id is required on a message with role 'tool'")
    ]


def test_tool_call_type_other_than_function_is_rejected() -> None:
    line = sample_worker_line()
    line["messages"][1]["tool_calls"][0]["type"] = "tool_use"

    assert rejection(line) == [("messages.1.tool_calls.0.type", "Input should be 'function'")]


def test_tool_call_arguments_must_be_a_json_string_not_an_object() -> None:
    line = sample_worker_line()
    line["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"path": "a.py"}

    assert rejection(line) == [
        ("messages.1.tool_calls.0.function.arguments", "Input should be a valid string")
    ]


def test_optional_chat_key_written_as_null_is_rejected() -> None:
    line = sample_worker_line()
    line["messages"][0]["reasoning_content"] = None

    assert rejection(line) == [("messages.0.reasoning_content", "Input should be a valid string")]


def test_empty_messages_without_gap_is_rejected() -> None:
    line = sample_line()
    del line["provenance"]["gap"]

    assert rejection(line) == [
        ("", "Value error, messages is empty, so provenance.gap is required (why is there no transcript?)")
    ]


def test_blank_gap_is_rejected() -> None:
    line = sample_line()
    line["provenance"]["gap"] = "  "

    assert rejection(line) == [
        ("provenance.gap", "Value error, gap must say why the transcript is missing; it is blank")
    ]


def test_realness_gated_with_positive_reward_is_rejected() -> None:
    line = sample_line()
    line["outcome"].update(realness_gated=True, reward=0.5)

    assert rejection(line) == [
        (
            "outcome",
            (
                "Value error, reward is 0.5 but realness_gated is true: "
                "a gated rollout's reward must be null or <= 0"
            ),
        )
    ]


@pytest.mark.parametrize("reward", [0, None])
def test_realness_gated_with_zero_or_null_reward_is_valid(reward: int | None) -> None:
    line = sample_line()
    line["outcome"].update(realness_gated=True, reward=reward)

    assert RolloutLine.model_validate(line).outcome.reward == reward


def test_bool_where_int_expected_is_rejected() -> None:
    assert rejection(sample_line(generation=True)) == [("generation", "Input should be a valid integer")]


def test_numeric_string_rep_is_rejected() -> None:
    line = sample_line()
    line["task"]["rep"] = "3"

    assert rejection(line) == [("task.rep", "Input should be a valid integer")]


def test_string_where_number_expected_is_rejected() -> None:
    line = sample_line()
    line["outcome"]["reward"] = "0.5"

    assert rejection(line) == [
        ("outcome.reward.int", "Input should be a valid integer"),
        ("outcome.reward.float", "Input should be a valid number"),
    ]


def test_bool_where_number_expected_is_rejected() -> None:
    line = sample_line()
    line["cost"]["usd"] = True

    assert rejection(line) == [
        ("cost.usd.int", "Input should be a valid integer"),
        ("cost.usd.float", "Input should be a valid number"),
    ]


def test_nan_in_cost_is_rejected() -> None:
    line = sample_line()
    line["cost"]["usd"] = float("nan")

    assert rejection(line) == [
        ("cost.usd.int", "Input should be a valid integer"),
        ("cost.usd.float", "Input should be a finite number"),
    ]


def test_nan_nested_in_metrics_is_rejected() -> None:
    line = sample_line()
    line["outcome"]["metrics"]["subtasks"] = [{"score": 1.0}, {"score": float("nan")}]

    assert rejection(line) == [
        ("outcome.metrics", "Value error, metrics.subtasks[1].score is nan: NaN and Infinity are not JSON")
    ]


def test_infinity_in_verdict_is_rejected() -> None:
    line = sample_line()
    line["outcome"]["verdict"] = {"composite": float("inf")}

    assert rejection(line) == [
        ("outcome.verdict", "Value error, verdict.composite is inf: NaN and Infinity are not JSON")
    ]


def test_a_line_parsed_from_json_is_not_walked_again_for_json_values() -> None:
    """PARSED_FROM_JSON is the caller's word that the free-form values came out of a strict JSON
    parser: the walk over them is skipped, the typed fields are still checked."""
    line = sample_line()
    line["outcome"]["metrics"]["subtasks"] = [{"score": float("nan")}]
    line["tool_defs"] = [{"name": float("inf")}]

    RolloutLine.model_validate(line, context=PARSED_FROM_JSON)
    assert [field for field, _ in rejection(line)] == ["tool_defs", "outcome.metrics"]
    line["cost"]["usd"] = float("nan")
    with pytest.raises(ValidationError, match="cost.usd"):
        RolloutLine.model_validate(line, context=PARSED_FROM_JSON)


def test_non_json_value_in_metrics_is_rejected() -> None:
    line = sample_line()
    line["outcome"]["metrics"]["workers"] = {"w1", "w2"}

    assert rejection(line) == [("outcome.metrics", "Value error, metrics.workers is a set, not a JSON value")]


def test_unknown_top_level_field_is_rejected() -> None:
    assert rejection(sample_line(reward=1)) == [("reward", "Extra inputs are not permitted")]


def test_experiment_id_must_be_present() -> None:
    line = sample_line()
    del line["experiment_id"]

    assert rejection(line) == [("experiment_id", "Field required")]


def test_realness_gated_must_be_present() -> None:
    line = sample_line()
    del line["outcome"]["realness_gated"]

    assert rejection(line) == [("outcome.realness_gated", "Field required")]


def test_empty_rollout_id_is_rejected() -> None:
    assert rejection(sample_line(rollout_id="")) == [
        ("rollout_id", "String should have at least 1 character")
    ]


def test_captured_at_without_timezone_is_rejected() -> None:
    line = sample_line()
    line["provenance"]["captured_at"] = "2025-01-15T10:30:00"

    assert rejection(line) == [
        (
            "provenance.captured_at",
            "Value error, captured_at '2025-01-15T10:30:00' has no timezone; write UTC ('Z' or '+00:00')",
        )
    ]


def test_captured_at_with_non_utc_offset_is_rejected() -> None:
    line = sample_line()
    line["provenance"]["captured_at"] = "2025-01-15T12:30:00+02:00"

    assert rejection(line) == [
        (
            "provenance.captured_at",
            "Value error, captured_at '2025-01-15T12:30:00+02:00' is not UTC ('Z' or '+00:00')",
        )
    ]


def test_captured_at_that_is_not_a_timestamp_is_rejected() -> None:
    line = sample_line()
    line["provenance"]["captured_at"] = "yesterday"

    assert rejection(line) == [
        ("provenance.captured_at", "Value error, captured_at 'yesterday' is not an ISO-8601 timestamp")
    ]


def test_chat_message_dump_omits_absent_optional_keys() -> None:
    message = ChatMessage.model_validate({"role": "assistant", "content": None})

    assert message.model_dump() == {"role": "assistant", "content": None}


def test_json_schema_uses_the_file_keys() -> None:
    schema = rollout_json_schema()

    assert schema["properties"]["schema"] == {"const": ROLLOUT_SCHEMA, "title": "Schema", "type": "string"}
    assert "schema_" not in schema["properties"]
    assert schema["required"][:2] == ["schema", "rollout_id"]
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Provenance"]["required"] == ["captured_at", "capture"]
    assert schema["$defs"]["ChatMessage"]["properties"]["tool_call_id"] == {
        "title": "Tool Call Id",
        "type": "string",
    }


# ---------------------------------------------------------------------------
# The published JSON Schema refuses what the models refuse
# ---------------------------------------------------------------------------


def _broken(change: Callable[[dict[str, Any]], Any], *, worker: bool = False) -> dict[str, Any]:
    line = sample_worker_line() if worker else sample_line()
    change(line)
    return line


def _gated(reward: Any) -> Callable[[dict[str, Any]], None]:
    def change(line: dict[str, Any]) -> None:
        line["outcome"].update(realness_gated=True, reward=reward)

    return change


SCHEMA_CASES = {
    # valid
    "supervisor gap line": (True, sample_line()),
    "gated, reward 0": (True, _broken(_gated(0))),
    "gated, reward -1": (True, _broken(_gated(-1))),
    "gated, reward null": (True, _broken(_gated(None))),
    "messages, no gap, a tool message answering its call": (True, sample_worker_line()),
    # invalid, each by one rule the models check in code
    "tool message without tool_call_id": (
        False,
        _broken(lambda line: line["messages"][2].pop("tool_call_id"), worker=True),
    ),
    "gated, reward 0.5": (False, _broken(_gated(0.5))),
    "gated, reward 1": (False, _broken(_gated(1))),
    "no messages and no gap": (False, _broken(lambda line: line["provenance"].pop("gap"))),
    "blank gap": (False, _broken(lambda line: line["provenance"].update(gap="  \t"))),
    "empty gap": (False, _broken(lambda line: line["provenance"].update(gap=""))),
    # invalid by type, as pydantic derives it
    "empty rollout_id": (False, _broken(lambda line: line.update(rollout_id=""))),
    "unknown key": (False, _broken(lambda line: line.update(extra=1))),
    "reward as a string": (False, _broken(lambda line: line["outcome"].update(reward="1"))),
    "rep as a float": (False, _broken(lambda line: line["task"].update(rep=0.5))),
}


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_the_json_schema_and_the_models_agree_on_a_line(case: str) -> None:
    expected, line = SCHEMA_CASES[case]
    schema = rollout_json_schema()
    # The schema names its draft, so a consumer's validator_for picks the same validator.
    # (Without `$schema` the default given here would be picked.)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)
    assert isinstance(validator, jsonschema.Draft202012Validator)

    schema_errors = list(validator.iter_errors(line))
    try:
        RolloutLine.model_validate(line)
        model_valid = True
    except ValidationError:
        model_valid = False

    assert (model_valid, not schema_errors) == (expected, expected), [e.message for e in schema_errors]
