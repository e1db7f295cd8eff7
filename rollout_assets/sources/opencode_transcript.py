"""One opencode session as the model saw it: its messages and parts turned into chat messages.

Owns: the conversion of a session's stored messages and parts (docs/input-formats.md §4) into
OpenAI chat-with-tools messages, following what opencode itself hands the model (its
`toModelMessages`), and what the messages record besides: the system prompt, the model, the
spend of each assistant message, the error the session ended in, and the files the model was
handed that a text transcript cannot carry. Does not own reading the store (sources/opencode.py).

What opencode sends, and so what the transcript holds:
- a message without parts is not sent;
- a user message: its text parts (not those marked `ignored`), a compaction part as
  "What did we do so far?", a subtask part as "The following tool was executed by the user";
  its files (other than text/plain and folders, which opencode has already turned into text)
  are sent as files. A user message with nothing of these is not sent;
- an assistant message that ended in an error is not sent, unless it was aborted after
  producing more than reasoning;
- a tool call's result: its output, or "[Old tool result content cleared]" once compaction
  pruned it; an error's text (or the output an interrupted call kept); a call still pending or
  running when the session stopped as "[Tool execution was interrupted]".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout_assets.io import is_number, is_record, to_json_text

COMPACTION_PROMPT = "What did we do so far?"
SUBTASK_PROMPT = "The following tool was executed by the user"
PRUNED_OUTPUT = "[Old tool result content cleared]"
INTERRUPTED_OUTPUT = "[Tool execution was interrupted]"
# Files opencode turns into text parts of the message before it is stored: not sent as files.
_FILES_SENT_AS_TEXT = ("text/plain", "application/x-directory")


@dataclass
class MessageUsage:
    """Spend summed over the session's assistant messages; a field no message recorded is None."""

    cost_usd: int | float | None = None
    tokens_input: int | float | None = None
    tokens_output: int | float | None = None
    tokens_reasoning: int | float | None = None
    tokens_cache_read: int | float | None = None
    tokens_cache_write: int | float | None = None

    def add(self, message: dict[str, Any]) -> None:
        tokens = message.get("tokens") if is_record(message.get("tokens")) else {}
        cache = tokens.get("cache") if is_record(tokens.get("cache")) else {}
        self.cost_usd = _plus(self.cost_usd, message.get("cost"))
        self.tokens_input = _plus(self.tokens_input, tokens.get("input"))
        self.tokens_output = _plus(self.tokens_output, tokens.get("output"))
        self.tokens_reasoning = _plus(self.tokens_reasoning, tokens.get("reasoning"))
        self.tokens_cache_read = _plus(self.tokens_cache_read, cache.get("read"))
        self.tokens_cache_write = _plus(self.tokens_cache_write, cache.get("write"))

    @property
    def recorded(self) -> bool:
        return any(value is not None for value in vars(self).values())


@dataclass
class SessionTranscript:
    """A session's chat messages (its system prompt first, when the store kept it) and what its
    messages record: the model of its last assistant message, their summed spend, the error the
    last one ended in, and the files handed to the model (mime type -> count)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    model_id: str | None = None
    provider_id: str | None = None
    usage: MessageUsage = field(default_factory=MessageUsage)
    error: str | None = None
    attachments: dict[str, int] = field(default_factory=dict)


def session_transcript(messages: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> SessionTranscript:
    """The transcript of a session's (message, parts) in stored order."""
    transcript = SessionTranscript()
    system: str | None = None
    for message, parts in messages:
        role = message.get("role")
        if role == "assistant":
            system = _system_prompt(message) or system
            _note_assistant(transcript, message)
        if not parts:
            continue  # opencode sends no message without parts
        if role == "user":
            transcript.messages.extend(_user_messages(transcript, parts))
        elif role == "assistant" and _is_sent(message, parts):
            transcript.messages.extend(_assistant_messages(transcript, parts))
    if transcript.messages and system is not None:
        transcript.messages.insert(0, {"role": "system", "content": system})
    return transcript


def _plus(total: int | float | None, value: Any) -> int | float | None:
    if not is_number(value):
        return total
    return value if total is None else total + value


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _system_prompt(message: dict[str, Any]) -> str | None:
    """The system prompt an assistant message was produced under (older opencode kept it on
    every assistant message, as the list of system messages it sent); None when not kept."""
    system = message.get("system")
    if isinstance(system, list):
        system = "\n".join(item for item in system if isinstance(item, str))
    return system if isinstance(system, str) and system else None


def _note_assistant(transcript: SessionTranscript, message: dict[str, Any]) -> None:
    transcript.usage.add(message)
    if isinstance(message.get("modelID"), str):
        transcript.model_id = message["modelID"]
        transcript.provider_id = _string(message.get("providerID"))
    # The last assistant message decides: a session that recovered from an error did not end in it.
    transcript.error = _error_text(message.get("error"))


def _error_text(error: Any) -> str | None:
    """opencode's error object (`{name, data: {message, ...}}`) as one line: "name: message"."""
    if error is None or error is False:
        return None
    if isinstance(error, str):
        return error or None
    if not is_record(error):
        return to_json_text(error)
    name = _string(error.get("name"))
    data = error.get("data")
    message = _string(data.get("message")) if is_record(data) else None
    if name and message:
        return f"{name}: {message}"
    return name or message or to_json_text(error)


def _is_sent(message: dict[str, Any], parts: list[dict[str, Any]]) -> bool:
    """opencode leaves an assistant message that ended in an error out of the history it sends,
    unless it was aborted after producing something more than reasoning."""
    error = message.get("error")
    if not error:
        return True
    aborted = is_record(error) and error.get("name") == "MessageAbortedError"
    return aborted and any(part.get("type") not in ("step-start", "reasoning") for part in parts)


def _count_file(transcript: SessionTranscript, file: dict[str, Any]) -> None:
    mime = _string(file.get("mime")) or "unknown"
    transcript.attachments[mime] = transcript.attachments.get(mime, 0) + 1


def _user_messages(transcript: SessionTranscript, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    texts: list[str] = []
    sent = False
    for part in parts:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part.get("ignored") is not True:
            texts.append(part["text"])
        elif kind == "file" and part.get("mime") not in _FILES_SENT_AS_TEXT:
            _count_file(transcript, part)
        elif kind == "compaction":
            texts.append(COMPACTION_PROMPT)
        elif kind == "subtask":
            texts.append(SUBTASK_PROMPT)
        else:
            continue
        sent = True
    return [{"role": "user", "content": "\n".join(texts)}] if sent else []


def _assistant_messages(transcript: SessionTranscript, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cut an assistant message into steps at each `step-start`; one chat turn per non-empty step."""
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start":
            steps.append([])
        else:
            steps[-1].append(part)
    chat: list[dict[str, Any]] = []
    for step in steps:
        chat.extend(_step_messages(transcript, step))
    return chat


def _step_messages(transcript: SessionTranscript, step: list[dict[str, Any]]) -> list[dict[str, Any]]:
    texts: list[str] = []
    reasoning: list[str] = []
    tool_parts: list[dict[str, Any]] = []
    for part in step:
        kind = part.get("type")
        text = part.get("text")
        if kind == "text" and isinstance(text, str):
            texts.append(text)
        elif kind == "reasoning" and isinstance(text, str) and text:
            reasoning.append(text)
        elif kind == "tool" and isinstance(part.get("callID"), str):
            # A tool part without a call id cannot be answered by a tool message
            # (tool_call_id is required), so it is unreadable and skipped.
            tool_parts.append(part)
    # Text parts that join to "" count as no text: the step is not a turn on that alone, and a
    # tool-calling turn's content is null, not "" (as the seed's reader has it).
    content = "\n".join(texts) or None
    if content is None and not reasoning and not tool_parts:
        return []
    assistant: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        assistant["reasoning_content"] = "\n".join(reasoning)
    if tool_parts:
        assistant["tool_calls"] = [_tool_call(part) for part in tool_parts]
    return [assistant, *(_tool_result(transcript, part) for part in tool_parts)]


def _tool_name(part: dict[str, Any]) -> str:
    name = part.get("tool")
    return name if isinstance(name, str) else "unknown"


def _tool_state(part: dict[str, Any]) -> dict[str, Any]:
    state = part.get("state")
    return state if is_record(state) else {}


def _tool_call(part: dict[str, Any]) -> dict[str, Any]:
    arguments = _tool_state(part).get("input")
    return {
        "id": part["callID"],
        "type": "function",
        "function": {
            "name": _tool_name(part),
            "arguments": to_json_text({} if arguments is None else arguments),
        },
    }


def _tool_result(transcript: SessionTranscript, part: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": part["callID"],
        "name": _tool_name(part),
        "content": _tool_output(transcript, _tool_state(part)),
    }


def _tool_output(transcript: SessionTranscript, state: dict[str, Any]) -> str:
    """The result opencode hands the model for a tool call in this state."""
    status = state.get("status")
    if status in ("pending", "running"):
        return INTERRUPTED_OUTPUT
    time = state.get("time")
    if status == "completed" and is_record(time) and time.get("compacted"):
        return PRUNED_OUTPUT
    if status == "completed" and isinstance(state.get("attachments"), list):
        for attachment in state["attachments"]:
            if is_record(attachment):
                _count_file(transcript, attachment)
    if status == "error":
        metadata = state.get("metadata")
        if (
            is_record(metadata)
            and metadata.get("interrupted") is True
            and isinstance(metadata.get("output"), str)
        ):
            return metadata["output"]  # an interrupted call keeps what it printed so far
        if state.get("output") is None and isinstance(state.get("error"), str):
            # A failed call's message is its result; "" would train on a call that answered nothing.
            return state["error"]
    output = state.get("output")
    if output is None:
        return ""
    return output if isinstance(output, str) else to_json_text(output)
