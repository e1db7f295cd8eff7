"""A ledger transcript as training messages: the OpenAI/TRL chat shape, its prompt, its tokens.

A ledger message is already in the OpenAI chat-with-tools shape
(docs/line-format.md, Top level); a training message keeps exactly its keys (`role`, `content`, `reasoning_content`,
`tool_calls` with `id`, `type`, `function.name`, `function.arguments` as a JSON string,
`tool_call_id`, `name`) and drops nothing else, because nothing else is there.
"""

from __future__ import annotations

import math
from typing import Any

MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")
_OPTIONAL_KEYS = MESSAGE_KEYS[2:]


def training_message(message: dict[str, Any]) -> dict[str, Any]:
    """One ledger message in the chat shape, absent keys left out (the JSONL form)."""
    shaped: dict[str, Any] = {"role": message["role"], "content": message.get("content")}
    for key in _OPTIONAL_KEYS:
        value = message.get(key)
        if value is not None:
            shaped[key] = value
    calls = shaped.get("tool_calls")
    if calls is not None:
        shaped["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": call.get("type", "function"),
                "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]},
            }
            for call in calls
        ]
    return shaped


def prompt_length(messages: list[dict[str, Any]]) -> int:
    """How many messages come before the first assistant turn (the prompt both sides share)."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return index
    return len(messages)


def token_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The texts a transcript's tokens are counted in: every content, reasoning, tool name and
    tool arguments."""
    texts = []
    for message in messages:
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                texts.append(message[key])
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            texts += [str(function.get("name", "")), str(function.get("arguments", ""))]
    return texts


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """A tokenizer-free estimate: UTF-8 bytes of every content, reasoning, tool name and tool
    arguments, divided by 4 and rounded up (about 4 bytes a token for English text and code
    with common BPE vocabularies). An estimate for budgeting, not a count."""
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in token_texts(messages))
    return math.ceil(size / 4)
