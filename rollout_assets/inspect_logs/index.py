"""The first pass over a ledger: which log each line goes to, and where it lies in the file.

One log per (role, candidate), named `<role>-<candidate>.eval` and listed in the order of
their first lines, so the list reads like the round (the baseline's supervisors, its workers,
the next candidate's, ..., the proposers and their sub-agents). Per line the index keeps four
integers (its number, offset, length and its parent's line), nothing of the transcript: a
round of 100,000 lines is about 3 MB of index.

A line's parent line is known when the parent is the latest line of its role before it, as
the ledger orders them: a worker after its supervisor, a sub-agent after its proposer.
"""

from __future__ import annotations

import hashlib
import os
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollout_assets.errors import RoundError
from rollout_assets.ledger.io import LedgerReadError, parse_valid_line

_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
NO_PARENT = 0  # line numbers start at 1


class InspectLogsInputError(RoundError, ValueError):
    """A ledger the logs cannot be written from; the message names `file:line`."""


@dataclass
class LogPlan:
    """The lines of one log, in ledger order."""

    role: str
    candidate_id: str | None
    file_name: str
    lines: array = field(default_factory=lambda: array("q"))
    offsets: array = field(default_factory=lambda: array("q"))
    lengths: array = field(default_factory=lambda: array("q"))
    parents: array = field(default_factory=lambda: array("q"))
    size: int = 0  # bytes of its lines in the ledger

    def add(self, line: int, offset: int, length: int, parent_line: int) -> None:
        self.lines.append(line)
        self.offsets.append(offset)
        self.lengths.append(length)
        self.parents.append(parent_line)
        self.size += length


def log_file_name(role: str, candidate_id: str | None) -> str:
    """`<role>-<candidate>.eval`; a candidate id that is not a plain file name is replaced by
    `_`s and tagged with a digest of itself, so two ids never share a file."""
    candidate = "none" if candidate_id is None else candidate_id
    if not _SAFE_NAME.fullmatch(candidate) or candidate.startswith("."):
        digest = hashlib.sha256(candidate.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        candidate = f"{re.sub(r'[^A-Za-z0-9._-]', '_', candidate).lstrip('.')[:60]}-{digest}"
    return f"{role}-{candidate}.eval"


# The head of a line as this project's writer writes it (docs/line-format.md, Top level), up to
# its role: the first pass reads the four values it needs from here without parsing the line.
_HEAD = re.compile(
    rb'\{"schema":"tangle\.rollout\.v1","rollout_id":"([^"\\]+)","parent_rollout_id":(?:null|"([^"\\]+)"),'
    rb'"run_id":"(?:[^"\\]|\\.)*","experiment_id":(?:null|"(?:[^"\\]|\\.)*"),"candidate_id":(?:(null)|"([^"\\]*)"),'
    rb'"generation":(?:-?\d+|null),"candidate_index":(?:-?\d+|null),"role":"([a-z]+)",'
)


@dataclass(frozen=True, slots=True)
class LineKeys:
    """What the first pass needs of a line: its log (role, candidate) and its place among its kin."""

    rollout_id: str
    parent_rollout_id: str | None
    role: str
    candidate_id: str | None


def _head_keys(raw: bytes) -> LineKeys | None:
    """The keys read from the line's head, when it is written as this project writes lines (the
    second pass validates the whole line and holds it to these)."""
    head = _HEAD.match(raw)
    if head is None or not raw.endswith(b"\n"):
        return None
    rollout_id, parent, null_candidate, candidate, role = head.groups()
    try:
        return LineKeys(
            rollout_id.decode("utf-8"),
            None if parent is None else parent.decode("utf-8"),
            role.decode("ascii"),
            None if null_candidate else candidate.decode("utf-8"),
        )
    except UnicodeDecodeError:
        return None


def line_keys(raw: bytes, path: Path, line: int) -> LineKeys:
    """The keys of one raw line: from its head, else from the line parsed; a line that is not a
    JSON object of the line's shape is read by the strict reader, which names what is wrong."""
    keys = _head_keys(raw)
    if keys is not None:
        return keys
    parsed: Any = None
    if raw.endswith(b"\n"):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
    if not (
        isinstance(parsed, dict)
        and isinstance(parsed.get("role"), str)
        and isinstance(parsed.get("rollout_id"), str)
        and isinstance(parsed.get("candidate_id"), str | None)
        and isinstance(parsed.get("parent_rollout_id"), str | None)
    ):
        try:
            parsed = parse_valid_line(raw, path, line)
        except LedgerReadError as error:
            raise InspectLogsInputError(str(error)) from None
    return LineKeys(parsed["rollout_id"], parsed["parent_rollout_id"], parsed["role"], parsed["candidate_id"])


def _lines(fd: int) -> Iterator[tuple[int, bytes]]:
    """(offset, raw line) of every line of the open file `fd`, from its start (read through a
    descriptor of its own, so as a LedgerSnapshot's `lines`, but in a forked process too)."""
    with os.fdopen(os.dup(fd), "rb") as file:
        file.seek(0)
        offset = 0
        for raw in file:
            yield offset, raw
            offset += len(raw)


def index_ledger(fd: int, path: Path) -> list[LogPlan]:
    """The logs of the ledger open as `fd` and their lines, in order of their first lines."""
    plans: dict[tuple[str, str | None], LogPlan] = {}
    taken: set[str] = set()
    latest_by_role: dict[str, tuple[str, int]] = {}
    for line, (offset, raw) in enumerate(_lines(fd), start=1):
        keys = line_keys(raw, path, line)
        role, candidate, parent = keys.role, keys.candidate_id, keys.parent_rollout_id
        key = (role, candidate)
        plan = plans.get(key)
        if plan is None:
            name = log_file_name(role, candidate)
            if name in taken:  # two candidate ids that read alike once cleaned
                name = log_file_name(role, f"{candidate}\x00{len(plans)}")
            taken.add(name)
            plan = plans[key] = LogPlan(role, candidate, name)
        parent_line = NO_PARENT
        if parent is not None:
            parent_line = next((at for rollout, at in latest_by_role.values() if rollout == parent), NO_PARENT)
        plan.add(line, offset, len(raw), parent_line)
        latest_by_role[role] = (keys.rollout_id, line)
    return list(plans.values())
