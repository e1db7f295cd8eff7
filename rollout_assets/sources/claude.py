"""The Claude Code transcript reader: proposer sessions (docs/input-formats.md §5).

Owns: locating a working directory's project folder, and parsing one transcript file into
chat messages, token usage, start/end times and the model. Does not own: which transcript a
shot joins to (the join's time window), nor any ledger line.

A transcript file is read once, as a stream of lines. Blank and malformed lines are skipped, and
so is a line whose `uuid` an earlier line of the file had (Claude Code wrote it twice);
sub-agent (`isSidechain: true`) lines are separate invocations: they are left out of the main
thread and parsed as sub-agent conversations of their own (`ClaudeTranscript.subagents`), one per
chain of `parentUuid` links. A sidechain line whose `parentUuid` names no sidechain line read
before it starts a conversation; the others continue their parent's. Claude Code 1.0.x writes
them inline in the session file; newer versions in `agent-*.jsonl` files, beside the session file
(the lines carry its `sessionId`) or in its `<session id>/subagents/` folder (`session_agent_files`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.io import (
    NotARegularFile,
    NotJson,
    is_number,
    is_record,
    open_regular_file,
    parse_json,
    to_json_text,
)

DEFAULT_CLAUDE_PROJECTS_DIR = os.path.join(os.path.expanduser("~"), ".claude", "projects")

# Claude Code writes this as the model of the error messages it makes up itself
# (API errors, interrupted turns); it never names a model that produced a turn.
SYNTHETIC_MODEL = "<synthetic>"

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def claude_project_slug(cwd: str) -> str:
    """Claude Code's project-folder name for a working directory."""
    # Claude Code (JavaScript) replaces UTF-16 code units: a character outside the Basic
    # Multilingual Plane is two units, so it becomes two dashes.
    return _SLUG_UNSAFE.sub(lambda match: "-" * (2 if ord(match[0]) > 0xFFFF else 1), cwd)


def cannot_read_reason(error: OSError) -> str | None:
    """Why an existing transcript file or folder cannot be read (permission denied, a symlink
    loop, an I/O error), or None when `error` says it is not there (or is no file: a FIFO or a
    folder named `*.jsonl` is no transcript). Only the first is evidence the join cannot judge.

    A name too long for the filesystem is not there: no folder can have it. The project folder
    of a worktree path over 255 bytes has such a name, and it must not hide the transcripts of
    the worktree's other spelling (its real path, or the path it was given)."""
    if (
        isinstance(error, (FileNotFoundError, NotADirectoryError, NotARegularFile))
        or error.errno == errno.ENAMETOOLONG
    ):
        return None
    return error.strerror or str(error)


def _no_file_there(path: str | os.PathLike[str]) -> bool:
    """True when `path` names something that is not a regular file: opening one can fail before
    its type is seen (a socket: "No such device or address"; a folder the process may not
    enter: "Permission denied"), yet it is no transcript, not an unreadable one."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@dataclass
class TranscriptFiles:
    """The candidate transcript files of a worktree, and the first of its project folders that
    is there but cannot be listed, as (folder, why)."""

    files: list[Path]
    unreadable_folder: tuple[str, str] | None = None


def transcript_files(cwd_variants: list[str], projects_dir: str | os.PathLike[str]) -> TranscriptFiles:
    """Every `.jsonl` file of the project folders of `cwd_variants`, each folder in sorted name order.

    Several spellings of one cwd (its absolute path and its real path) can map to
    different folders; a folder reached twice is listed once. A missing folder holds no
    transcript; one that is there but cannot be listed is reported, not taken for empty.
    """
    found = TranscriptFiles(files=[])
    seen_folders: set[str] = set()
    for cwd in cwd_variants:
        folder = Path(projects_dir) / claude_project_slug(cwd)
        if str(folder) in seen_folders:
            continue
        seen_folders.add(str(folder))
        try:
            names = sorted(name for name in os.listdir(folder) if name.endswith(".jsonl"))
        except OSError as error:
            why = cannot_read_reason(error)
            if why is not None and found.unreadable_folder is None:
                found.unreadable_folder = (str(folder), why)
            continue
        found.files.extend(folder / name for name in names)
    return found


@dataclass
class ClaudeUsage:
    """Token sums over the transcript's API messages. A count no message recorded stays None:
    not measured, which 0 would pass off as a measurement."""

    tokens_in: int | float | None = None
    tokens_out: int | float | None = None
    cache_read: int | float | None = None
    cache_write: int | float | None = None

    def add(self, usage: dict[str, Any]) -> None:
        self.tokens_in = _plus(self.tokens_in, usage.get("input_tokens"))
        self.tokens_out = _plus(self.tokens_out, usage.get("output_tokens"))
        self.cache_read = _plus(self.cache_read, usage.get("cache_read_input_tokens"))
        self.cache_write = _plus(self.cache_write, usage.get("cache_creation_input_tokens"))


def _plus(total: int | float | None, value: Any) -> int | float | None:
    if not is_number(value):
        return total
    return value if total is None else total + value


@dataclass
class ClaudeTranscript:
    """One parsed transcript file."""

    path: Path
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: ClaudeUsage = field(default_factory=ClaudeUsage)
    started_at: str | None = None
    ended_at: str | None = None
    model: str | None = None
    # Main-thread conversation lines read. A file with none (an `agent-*.jsonl` holding
    # only sub-agent lines) is not a proposer session at all.
    main_thread_lines: int = 0
    # Why the file, which is there, could not be read; None when it was (or is no file).
    unreadable: str | None = None
    # The sub-agent conversations of the file's sidechain lines, in the order they start; each
    # with its `agent_key`: the `uuid` of the line that starts it.
    subagents: list[ClaudeTranscript] = field(default_factory=list)
    agent_key: str | None = None
    # The first string `sessionId` of its lines: which session an `agent-*.jsonl` file belongs to.
    session_id: str | None = None


def unreadable_folder_reason(path: str | os.PathLike[str]) -> str | None:
    """Why a folder that is there cannot be listed (permission denied, say), or None. A Claude
    projects folder the process may not list reads as one without transcripts: every shot
    then becomes a gap line, so callers warn."""
    try:
        with os.scandir(path):
            pass
        # Listing needs read permission, entering a project folder in it search permission.
        os.stat(os.path.join(path, os.curdir))
    except (FileNotFoundError, NotADirectoryError):
        return None  # not there at all: the callers' other warning
    except OSError as error:
        return error.strerror or str(error)
    return None


def read_transcript(path: str | os.PathLike[str]) -> ClaudeTranscript:
    """Parse one transcript file. One that cannot be read is an empty transcript saying why
    (`unreadable`); one that is gone, or is no file, an empty transcript."""
    transcript = ClaudeTranscript(path=Path(path))
    parser = _TranscriptParser(transcript)
    try:
        with open_regular_file(path) as handle:  # a FIFO or a folder reads as empty, never blocks
            for raw_line in handle:
                parser.feed(raw_line)
    except OSError as error:
        why = None if _no_file_there(path) else cannot_read_reason(error)
        return ClaudeTranscript(path=Path(path), unreadable=why)
    parser.count_usage()
    return transcript


def session_agent_files(session: ClaudeTranscript, listed: list[ClaudeTranscript]) -> list[Path]:
    """The `agent-*.jsonl` files of a session file, in this order: those of its own folder among
    `listed` whose lines name its session (by file name order), then those of its
    `<session id>/subagents/` folder (sorted by name). A folder that is not there holds none."""
    session_id = session.path.stem
    beside = [
        t.path
        for t in listed
        if t.path.name.startswith("agent-") and t.main_thread_lines == 0 and t.session_id == session_id
    ]
    folder = session.path.parent / session_id / "subagents"
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("agent-") and n.endswith(".jsonl"))
    except OSError:
        names = []
    return beside + [folder / name for name in names]


def subagent_conversations(session: ClaudeTranscript, listed: list[ClaudeTranscript]) -> list[ClaudeTranscript]:
    """Every sub-agent conversation of a session: its inline sidechains, then those of its agent
    files (`session_agent_files`); only those holding a conversation message (one with none is
    no model call the ledger could show)."""
    found = list(session.subagents)
    by_path = {t.path: t for t in listed}
    for path in session_agent_files(session, listed):
        agent_file = by_path.get(path) or read_transcript(path)
        found.extend(agent_file.subagents)
    return [t for t in found if t.messages]


class _TranscriptParser:
    """Line-by-line state: merges the block lines of one API message into one assistant turn."""

    def __init__(self, transcript: ClaudeTranscript):
        self.transcript = transcript
        self.open_turn_id: str | None = None
        self.open_turn: dict[str, Any] | None = None
        # The usage of an API message is its final one, counted once per message id. Claude
        # Code writes a line per content block, each with the message's usage: 2.x repeats the
        # final usage on every line, 1.0.x wrote the lines as the response streamed, so only
        # the last line of an id carries the final `output_tokens` (earlier ones a partial
        # count). The last usage of each id is kept, in the order the ids first appear; a line
        # without an id is a message of its own.
        self.final_usage: dict[str | int, dict[str, Any]] = {}
        # Sidechain line uuid -> the parser of the sub-agent conversation it belongs to.
        self.sidechains: dict[str, _TranscriptParser] = {}
        self.conversations: list[_TranscriptParser] = []
        # The string uuids of the file's lines read so far (main thread and sidechains alike).
        self.seen_uuids: set[str] = set()

    def feed(self, raw_line: bytes) -> None:
        line = raw_line.decode("utf-8", errors="replace")
        if not line.strip():
            return
        try:
            entry = parse_json(line, max_nesting=None)  # its values reach a line as text only
        except NotJson:
            return
        if not is_record(entry):
            return
        # Claude Code sometimes appends a line it already wrote to the same file, same uuid and
        # time stamp: when an editor reopens the session (anthropics/claude-code#56196), or under
        # `--input-format stream-json` (#5034). Read again, a block line would add its text and
        # tool calls to its message a second time, and a replayed turn would repeat its messages.
        # A line without a string uuid cannot be told from a new one, and is read.
        own = entry.get("uuid")
        if isinstance(own, str):
            if own in self.seen_uuids:
                return
            self.seen_uuids.add(own)
        if self.transcript.session_id is None and isinstance(entry.get("sessionId"), str):
            self.transcript.session_id = entry["sessionId"]
        if entry.get("isSidechain") is True:
            self._sidechain(entry)
            return
        self.entry(entry)

    def _sidechain(self, entry: dict[str, Any]) -> None:
        """Route a sidechain line to its conversation: its parent's, or a new one it starts."""
        parent = entry.get("parentUuid")
        own = entry.get("uuid")
        conversation = self.sidechains.get(parent) if isinstance(parent, str) else None
        if conversation is None:
            key = own if isinstance(own, str) else f"line-{len(self.transcript.subagents) + 1}"
            sub = ClaudeTranscript(path=self.transcript.path, agent_key=key, session_id=self.transcript.session_id)
            self.transcript.subagents.append(sub)
            conversation = _TranscriptParser(sub)
            self.conversations.append(conversation)
        if isinstance(own, str):
            self.sidechains[own] = conversation
        conversation.entry(entry)

    def entry(self, entry: dict[str, Any]) -> None:
        """One conversation line of this thread."""
        if entry.get("type") not in ("user", "assistant"):
            return
        message = entry.get("message")
        if not is_record(message):
            return
        transcript = self.transcript
        transcript.main_thread_lines += 1
        timestamp = entry.get("timestamp")
        if isinstance(timestamp, str):
            if transcript.started_at is None:
                transcript.started_at = timestamp
            transcript.ended_at = timestamp
        if entry["type"] == "user":
            self._user(message)
        else:
            self._assistant(message)

    def count_usage(self) -> None:
        """Sum the final usage of every API message read (after the last line)."""
        for usage in self.final_usage.values():
            self.transcript.usage.add(usage)
        for conversation in self.conversations:
            conversation.count_usage()

    def _user(self, message: dict[str, Any]) -> None:
        self.open_turn_id = None
        self.open_turn = None
        content = message.get("content")
        if isinstance(content, str):
            self.transcript.messages.append({"role": "user", "content": content})
            return
        if not isinstance(content, list):
            return
        # Tool results answer the previous assistant turn; plain text follows them.
        user_text = ""
        for block in content:
            if not is_record(block):
                continue
            if block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                self.transcript.messages.append(
                    {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result_text(block)}
                )
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                user_text = _append_line(user_text, block["text"])
        if user_text:
            self.transcript.messages.append({"role": "user", "content": user_text})

    def _assistant(self, message: dict[str, Any]) -> None:
        model = message.get("model")
        if isinstance(model, str) and model != SYNTHETIC_MODEL:
            self.transcript.model = model
        api_id = message.get("id") if isinstance(message.get("id"), str) else None
        usage = message.get("usage")
        if is_record(usage):
            self.final_usage[api_id if api_id is not None else len(self.final_usage)] = usage
        content = message.get("content")
        if not isinstance(content, list):
            return
        reasoning, text, tool_calls = _assistant_blocks(content)
        if not reasoning and not text and not tool_calls:
            return  # a line with none of these adds nothing
        continues_turn = api_id is not None and api_id == self.open_turn_id and self.open_turn is not None
        if continues_turn:
            turn = self.open_turn
            assert turn is not None
            if text:
                turn["content"] = text if turn["content"] is None else f"{turn['content']}\n{text}"
            if reasoning:
                previous = turn.get("reasoning_content")
                turn["reasoning_content"] = reasoning if previous is None else f"{previous}\n{reasoning}"
            if tool_calls:
                turn["tool_calls"] = [*turn.get("tool_calls", []), *tool_calls]
            return
        turn = {"role": "assistant", "content": text if text else None}
        if reasoning:
            turn["reasoning_content"] = reasoning
        if tool_calls:
            turn["tool_calls"] = tool_calls
        self.transcript.messages.append(turn)
        self.open_turn_id = api_id
        self.open_turn = turn


def _append_line(accumulated: str, addition: str) -> str:
    """Join with a newline only after non-empty text, exactly as the reference reader does."""
    return accumulated + ("\n" if accumulated else "") + addition


def _assistant_blocks(content: list[Any]) -> tuple[str, str, list[dict[str, Any]]]:
    reasoning = ""
    text = ""
    tool_calls: list[dict[str, Any]] = []
    for block in content:
        if not is_record(block):
            continue
        kind = block.get("type")
        if kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
            reasoning = _append_line(reasoning, block["thinking"])
        elif kind == "text" and isinstance(block.get("text"), str):
            text = _append_line(text, block["text"])
        elif kind == "tool_use" and isinstance(block.get("id"), str):
            name = block.get("name")
            arguments = block.get("input")
            tool_calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {
                        "name": name if isinstance(name, str) else "unknown",
                        "arguments": to_json_text({} if arguments is None else arguments),
                    },
                }
            )
    return reasoning, text, tool_calls


def _result_text(block: dict[str, Any]) -> str:
    """A tool_result's text: its string content, or its text blocks joined by newlines."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        b["text"]
        for b in content
        if is_record(b) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )
