"""The audit's own reading of a Claude Code transcript file (docs/input-formats.md §5): whether
it has a main chain, when that chain starts, and whether it holds a conversation message. Read
only for the shots whose proposer lines claim a join or a gap.

Main chain: the lines of `type` `user` or `assistant` with an object `message`, not marked
`isSidechain: true`. Its start is the `timestamp` of the first of them that has a string one.
A line Claude Code wrote twice (its `uuid` repeated) changes none of these, so none is skipped.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, NamedTuple

from rollout_assets.audit.strict_json import any_depth_json

# The file primitive, not the reader: opens without blocking on a FIFO, refuses what is no file.
from rollout_assets.io import NotARegularFile, open_regular_file


class TranscriptReading(NamedTuple):
    """What the audit reads of one transcript file."""

    main_chain: bool  # it has a main-chain line: a candidate of its worktree's shots
    start: str | None  # the main chain's first string time stamp
    conversation: bool | None  # it holds a conversation message; None when not read that far
    unreadable: str | None = None  # why a file that is there cannot be read


NOT_A_TRANSCRIPT = TranscriptReading(False, None, False)


def cannot_read(error: OSError) -> str | None:
    """Why a path that is there cannot be read, or None when nothing readable is there (no such
    entry, not a folder on the way, no regular file, or a name too long for any file)."""
    if isinstance(error, (FileNotFoundError, NotADirectoryError, NotARegularFile)):
        return None
    if error.errno == errno.ENAMETOOLONG:
        return None
    return error.strerror or str(error)


def read_transcript(path: str, *, to_the_end: bool) -> TranscriptReading:
    """The file's main chain and start, read up to its first main-chain time stamp; with
    `to_the_end`, every line, to tell whether any is a conversation message."""
    main_chain, start, conversation = False, None, False
    try:
        with open_regular_file(path) as handle:
            for raw in handle:
                entry = _main_chain_entry(raw)
                if entry is None:
                    continue
                main_chain = True
                if start is None and isinstance(entry.get("timestamp"), str):
                    start = entry["timestamp"]
                    if not to_the_end:
                        return TranscriptReading(True, start, None)
                conversation = conversation or is_conversation(entry)
    except OSError as error:
        why = None if _no_regular_file(path) else cannot_read(error)
        return NOT_A_TRANSCRIPT if why is None else TranscriptReading(False, None, None, why)
    return TranscriptReading(main_chain, start, conversation if to_the_end else None)


def _no_regular_file(path: str) -> bool:
    """A folder the process may not enter, or a socket, fails to open before its kind shows:
    it is still no transcript, not an unreadable one."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _main_chain_entry(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        entry = any_depth_json(raw)
    except ValueError:
        return None  # a malformed line is skipped
    if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
        return None
    if entry.get("isSidechain") is True or not isinstance(entry.get("message"), dict):
        return None
    return entry


def is_conversation(entry: dict[str, Any]) -> bool:
    """docs/input-formats.md §5: a user line is a message when its content is a string, holds a
    tool_result with a tool_use_id, or a non-empty text block; an assistant line when a block is
    non-empty thinking, non-empty text, or a tool_use with an id."""
    content = entry["message"].get("content")
    if entry["type"] == "user" and isinstance(content, str):
        return True
    if not isinstance(content, list):
        return False
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if entry["type"] == "user":
            if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
                return True
            if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
                return True
        elif (
            (kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"])
            or (kind == "text" and isinstance(block.get("text"), str) and block["text"])
            or (kind == "tool_use" and isinstance(block.get("id"), str))
        ):
            return True
    return False


def listing_problem(folder: str) -> str | None:
    """Why a project folder that is there cannot be listed, or None."""
    try:
        os.listdir(folder)
    except OSError as error:
        return cannot_read(error)
    return None
