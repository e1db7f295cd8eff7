"""A ledger transcript as Inspect chat messages, in the JSON shape Inspect writes them.

Each ledger message (docs/line-format.md, Top level: the OpenAI chat-with-tools shape) becomes
what Inspect's `ChatMessageSystem`, `ChatMessageUser`, `ChatMessageAssistant` or
`ChatMessageTool` dumps to (`model_dump(exclude_none=True)`), key order included:

- an assistant's `reasoning_content` becomes a `ContentReasoning` part before its text, and
  each tool call an Inspect `ToolCall` whose `arguments` are the parsed JSON object; arguments
  that are not a JSON object keep their text in the call's `parse_error`, as Inspect does when a
  model emits malformed arguments;
- a tool message names the call it answers (`tool_call_id`) and the tool (`function`);
- a null `content` is an empty text (Inspect's content is never null);
- message ids are the rollout id and the message's index, so the same line gives the same ids.

Plain dicts, not the models: validating a pydantic model per message costs about ten times the
rest of a line's conversion, and a round holds hundreds of thousands of messages. The tests hold
every message of the demo's rounds to Inspect's own models (validated and dumped again, it is
the same JSON), and the writer validates the first sample of each log with them.
"""

from __future__ import annotations

from typing import Any

import orjson


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    arguments_text = function["arguments"]
    try:
        arguments = orjson.loads(arguments_text)
    except orjson.JSONDecodeError:
        arguments = None
    shaped: dict[str, Any] = {"id": call["id"], "function": function["name"]}
    if isinstance(arguments, dict):
        shaped["arguments"] = arguments
    else:
        # Evidence kept: what the model emitted, as Inspect shows a call it could not parse.
        shaped["arguments"] = {}
        shaped["parse_error"] = f"arguments are not a JSON object: {arguments_text}"
    shaped["type"] = "function"
    return shaped


def _assistant_content(message: dict[str, Any]) -> str | list[dict[str, Any]]:
    text, reasoning = message.get("content"), message.get("reasoning_content")
    if not reasoning:
        return text or ""
    parts: list[dict[str, Any]] = [{"type": "reasoning", "reasoning": reasoning, "redacted": False}]
    if text is not None:
        parts.append({"type": "text", "text": text})
    return parts


def chat_message(message: dict[str, Any], message_id: str) -> dict[str, Any]:
    """One ledger message as the JSON of the Inspect chat message of its role."""
    role = message["role"]
    if role == "assistant":
        shaped: dict[str, Any] = {"id": message_id, "content": _assistant_content(message), "role": role}
        calls = message.get("tool_calls")
        if calls:
            shaped["tool_calls"] = [_tool_call(call) for call in calls]
        return shaped
    shaped = {"id": message_id, "content": message.get("content") or "", "role": role}
    if role == "tool":
        shaped["tool_call_id"] = message["tool_call_id"]
        if message.get("name") is not None:
            shaped["function"] = message["name"]
    return shaped


def chat_messages(messages: list[dict[str, Any]], rollout_id: str) -> list[dict[str, Any]]:
    """A line's transcript as Inspect chat messages, in order."""
    return [chat_message(message, f"{rollout_id}-m{index}") for index, message in enumerate(messages)]
