"""The fixed Arrow schemas of the training files: the same types in every row and every round.

Tool-call arguments and tool parameters stay JSON strings (what chat templates expect); a key
a message does not have is null, never a type that changes from row to row.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
MESSAGES = pa.list_(MESSAGE)
TOOL = pa.struct(
    [
        ("type", pa.string()),
        (
            "function",
            pa.struct([("name", pa.string()), ("description", pa.string()), ("parameters", pa.string())]),
        ),
    ]
)
LINE_METADATA = pa.struct(
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
    ]
)
SFT_SCHEMA = pa.schema(
    [
        ("messages", MESSAGES),
        ("tools", pa.list_(TOOL)),
        ("tokens", pa.int64()),
        ("n_messages", pa.int64()),
        ("metadata", LINE_METADATA),
    ]
)
PAIR_METADATA = pa.struct(
    [
        ("round", pa.string()),
        ("run_id", pa.string()),
        ("role", pa.string()),
        ("instance_id", pa.string()),
        ("chosen_rollout_id", pa.string()),
        ("rejected_rollout_id", pa.string()),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
    ]
)
PAIR_SCHEMA = pa.schema(
    [
        ("prompt", MESSAGES),
        ("chosen", MESSAGES),
        ("rejected", MESSAGES),
        ("margin", pa.float64()),
        ("metadata", PAIR_METADATA),
    ]
)
GROUP_METADATA = pa.struct(
    [("round", pa.string()), ("run_id", pa.string()), ("role", pa.string()), ("instance_id", pa.string())]
)
GROUP_SCHEMA = pa.schema(
    [
        ("prompt", MESSAGES),
        ("completions", pa.list_(MESSAGES)),
        ("rewards", pa.list_(pa.float64())),
        ("rollout_ids", pa.list_(pa.string())),
        ("metadata", GROUP_METADATA),
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
