"""The audit's own count of the chat messages a session's rows make: one pass over the message
rows and one over the part rows of any set of sessions (`session_counts`, run by
stores.session_rows), each row's JSON parsed once.

Counted by opencode's rules for what it hands the model (docs/input-formats.md §4), written
out here as row predicates, not taken from the reader:

- a message row counts only when its data is a JSON object whose role is user or assistant;
  a part row only when its data is a JSON object; a message without such a part adds nothing;
- a user message adds one message when it has a text part (a string text, not marked
  `ignored: true`), a file part not already text (a mime other than text/plain and
  application/x-directory), a compaction or a subtask part;
- an assistant message whose `error` is set (not null, false, 0, "", [] or {}) adds nothing,
  unless the error is an object named MessageAbortedError and it has a part other than
  step-start and reasoning;
- a sent assistant message is cut into steps at each step-start part (parts in id order); a
  step adds one message when its text parts join to a non-empty text (a non-empty text, or two
  texts or more: the newline between them), or it has a non-empty reasoning text or a tool
  part with a string callID; and one tool message per such tool part;
- a session whose count is not 0 adds the system message when one of its assistant messages
  records a non-empty `system`: a non-empty string, or a list whose strings join to a
  non-empty text.

The pass also gives, for the gap proofs of "has no readable message parts", the session's
message rows and the part rows that make a message by a narrower rule that holds under any
reading of the docs: a non-empty text (not ignored), or in an assistant message a non-empty
reasoning text or a tool call with a call id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import orjson

# Row order: messages by id, parts by their message's id and then their own, so the two streams
# are walked side by side and no message of the round is held beyond the one being counted.
_MESSAGES = "SELECT session_id, id, data FROM message WHERE session_id IN (SELECT value FROM json_each(?)) ORDER BY id"
_PARTS = (
    "SELECT message_id, id, data FROM part WHERE message_id IN "
    "(SELECT id FROM message WHERE session_id IN (SELECT value FROM json_each(?))) ORDER BY message_id, id"
)
_NOT_SENT_AS_FILES = ("text/plain", "application/x-directory")


@dataclass
class _Session:
    rows: int = 0  # message rows
    system: bool = False  # an assistant message records a non-empty system prompt
    narrow: int = 0  # part rows that make a message by the narrow rule
    made: int = 0  # chat messages the rows make


@dataclass(frozen=True)
class _Message:
    session_id: Any
    role: str
    error_set: bool
    aborted: bool


def _object(data: Any) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _error_set(error: Any) -> bool:
    """Set: present and not null, false, 0, "", [] or {}."""
    if error is None or error is False:
        return False
    if isinstance(error, int | float) and not isinstance(error, bool) and error == 0:
        return False
    return error not in ("", [], {})


def _system(system: Any) -> bool:
    if isinstance(system, str):
        return system != ""
    if isinstance(system, list):
        texts = [item for item in system if isinstance(item, str)]
        return len(texts) >= 2 or any(texts)
    return False


def _chat_message(session_id: Any, data: Any) -> _Message | None:
    message = _object(data)
    if message is None or message.get("role") not in ("user", "assistant"):
        return None
    error = message.get("error")
    aborted = isinstance(error, dict) and error.get("name") == "MessageAbortedError"
    return _Message(session_id, message["role"], message["role"] == "assistant" and _error_set(error), aborted)


def _non_empty_text(part: dict[str, Any]) -> bool:
    return isinstance(part.get("text"), str) and part["text"] != ""


def _narrow(role: str, part: dict[str, Any]) -> bool:
    kind = part.get("type")
    if kind == "text" and _non_empty_text(part) and part.get("ignored") is not True:
        return True
    if role != "assistant":
        return False
    return (kind == "reasoning" and _non_empty_text(part)) or (kind == "tool" and isinstance(part.get("callID"), str))


def _user_made(parts: list[dict[str, Any]]) -> int:
    for part in parts:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part.get("ignored") is not True:
            return 1
        if kind == "file" and (part.get("mime") is None or part.get("mime") not in _NOT_SENT_AS_FILES):
            return 1
        if kind in ("compaction", "subtask"):
            return 1
    return 0


def _assistant_made(parts: list[dict[str, Any]]) -> int:
    """Steps start at each step-start part; a step that speaks is one message, and each tool
    call with a call id one more (its tool result)."""
    made, steps = 0, [[]]
    for part in parts:
        if part.get("type") == "step-start":
            steps.append([])
        steps[-1].append(part)
    for step in steps:
        if not step:
            continue
        texts = [part for part in step if part.get("type") == "text" and isinstance(part.get("text"), str)]
        speaks = any(part["text"] != "" for part in texts) or len(texts) >= 2 or any(
            part.get("type") == "reasoning" and _non_empty_text(part) for part in step
        )
        calls = sum(part.get("type") == "tool" and isinstance(part.get("callID"), str) for part in step)
        made += (speaks or calls > 0) + calls
    return made


def _messages(connection: sqlite3.Connection, wanted: str, sessions: dict[Any, _Session]) -> Iterator[tuple[Any, _Message | None]]:
    for session_id, message_id, data in connection.execute(_MESSAGES, (wanted,)):
        counts = sessions.setdefault(session_id, _Session())
        counts.rows += 1
        message = _chat_message(session_id, data)
        if message is not None and message.role == "assistant":
            counts.system = counts.system or _system((_object(data) or {}).get("system"))
        yield message_id, message


def session_counts(connection: sqlite3.Connection, wanted: str) -> list[tuple[Any, int, int, int]]:
    """(session id, its message rows, its narrow part rows, the chat messages its rows make)
    for each session of `wanted` (a JSON list of ids) that has message rows."""
    sessions: dict[Any, _Session] = {}
    messages = _messages(connection, wanted, sessions)
    parts = groupby(connection.execute(_PARTS, (wanted,)), key=lambda row: row[0])
    for message_id, rows in parts:
        message = None
        for candidate_id, candidate in messages:  # messages without parts are passed over
            if candidate_id == message_id:
                message = candidate
                break
        if message is None:
            continue
        objects = [part for part in (_object(data) for _, _, data in rows) if part is not None]
        if not objects:
            continue
        counts = sessions[message.session_id]
        counts.narrow += sum(_narrow(message.role, part) for part in objects)
        if message.role == "user":
            counts.made += _user_made(objects)
        elif not message.error_set or (
            message.aborted and any(part.get("type") not in ("step-start", "reasoning") for part in objects)
        ):
            counts.made += _assistant_made(objects)
    for _ in messages:  # the rows of messages after the last one with parts
        pass
    return [
        (session_id, counts.rows, counts.narrow, counts.made + (counts.made > 0 and counts.system))
        for session_id, counts in sessions.items()
    ]
