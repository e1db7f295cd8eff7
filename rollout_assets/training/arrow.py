"""The fixed Arrow schemas of the training files: the same types in every row and every round.

Tool-call arguments and tool parameters stay JSON strings (what chat templates expect); a key
a message does not have is null, never a type that changes from row to row.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import pyarrow as pa


@cache
def schemas() -> dict[str, pa.Schema]:
    """Each dataset's schema, by dataset name; built on first use, so importing this module
    (as the Dagster definitions do) does not import pyarrow."""
    import pyarrow as pa

    messages, tools = _chat_types(pa)
    return {
        "sft_rows": _sft_schema(pa, messages, tools),
        "preference_pairs": _pair_schema(pa, messages),
        "grpo_groups": _group_schema(pa, messages),
    }


def _replacements(pa: Any) -> pa.DataType:
    """What normalization replaced in one line's transcript: per kind, its placeholder and count."""
    return pa.list_(pa.struct([("kind", pa.string()), ("placeholder", pa.string()), ("count", pa.int64())]))


def _chat_types(pa: Any) -> tuple[pa.DataType, pa.DataType]:
    """The message list and the tool list every dataset shares (OpenAI chat form)."""
    tool_call = pa.struct(
        [
            ("id", pa.string()),
            ("type", pa.string()),
            ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
        ]
    )
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("reasoning_content", pa.string()),
            ("tool_calls", pa.list_(tool_call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
        ]
    )
    tool = pa.struct(
        [
            ("type", pa.string()),
            (
                "function",
                pa.struct([("name", pa.string()), ("description", pa.string()), ("parameters", pa.string())]),
            ),
        ]
    )
    return pa.list_(message), pa.list_(tool)


def _sft_schema(pa: Any, messages: pa.DataType, tools: pa.DataType) -> pa.Schema:
    line_metadata = pa.struct(
        [
            ("rollout_id", pa.string()),
            ("run_id", pa.string()),
            ("round", pa.string()),
            ("role", pa.string()),
            ("candidate_id", pa.string()),
            ("instance_id", pa.string()),
            ("rep", pa.int64()),
            ("reward", pa.float64()),
            ("reward_source", pa.string()),
            ("model", pa.string()),
            ("token_counter", pa.string()),
            ("replacements", _replacements(pa)),
        ]
    )
    return pa.schema(
        [
            ("messages", messages),
            ("tools", tools),
            ("tokens", pa.int64()),
            ("n_messages", pa.int64()),
            ("metadata", line_metadata),
        ]
    )


def _pair_schema(pa: Any, messages: pa.DataType) -> pa.Schema:
    pair_metadata = pa.struct(
        [
            ("round", pa.string()),
            ("run_id", pa.string()),
            ("role", pa.string()),
            ("instance_id", pa.string()),
            ("chosen_rollout_id", pa.string()),
            ("rejected_rollout_id", pa.string()),
            ("chosen_reward", pa.float64()),
            ("rejected_reward", pa.float64()),
            ("group_by", pa.string()),
            ("token_counter", pa.string()),
            ("chosen_replacements", _replacements(pa)),
            ("rejected_replacements", _replacements(pa)),
        ]
    )
    return pa.schema(
        [
            ("prompt", messages),
            ("chosen", messages),
            ("rejected", messages),
            ("margin", pa.float64()),
            ("metadata", pair_metadata),
        ]
    )


def _group_schema(pa: Any, messages: pa.DataType) -> pa.Schema:
    group_metadata = pa.struct(
        [
            ("round", pa.string()),
            ("run_id", pa.string()),
            ("role", pa.string()),
            ("instance_id", pa.string()),
            ("group_by", pa.string()),
            ("token_counter", pa.string()),
            ("replacements", pa.list_(_replacements(pa))),  # one list per completion
        ]
    )
    return pa.schema(
        [
            ("prompt", messages),
            ("completions", pa.list_(messages)),
            ("rewards", pa.list_(pa.float64())),
            ("rollout_ids", pa.list_(pa.string())),
            ("metadata", group_metadata),
        ]
    )


def arrow_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition with its parameters as a JSON string (fixed type whatever the schema)."""
    function = tool.get("function") or {}
    parameters = function.get("parameters")
    return {
        "type": tool.get("type", "function"),
        "function": {
            "name": function.get("name"),
            "description": function.get("description"),
            "parameters": None if parameters is None else orjson.dumps(parameters, option=orjson.OPT_SORT_KEYS).decode(),
        },
    }
