"""The per-invocation identifiers of a ledger line, and the placeholder each becomes in training rows.

Every worker runs in a clone of its own, named for it, and every invocation has a session id
of its own, so two transcripts of one task differ in these strings alone. They are taken from
the line's own fields (docs/line-format.md), never guessed from the text:

| kind | from | placeholder |
|---|---|---|
| `working_folder` | a worker's `outcome.metrics.worker_cwd`; a proposer's or sub-agent's `artifacts.run_dir` (the shot's worktree) | `/workspace` |
| `worker_name` | the last part of a worker's cwd, where it appears alone | `<WORKER>` |
| `run_folder` | a supervisor's or worker's `artifacts.run_dir` (the arm's run folder) | `<RUN_DIR>` |
| `session` | the opencode session of `opencode:<id>`; the Claude session of the transcript file | `<SESSION>` |
| `parent_session` | a worker's `outcome.metrics.session_parent_id` | `<PARENT_SESSION>` |

A folder must be an absolute path other than `/`. A worker name and a session id must have at
least 8 characters, a digit or a `-` among them, so an ordinary word (`project`,
`workspace`, `function`) is never taken for one. A string holding a quote, a backslash or a
control character is no identifier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# In this order: the first kind that names a string keeps it (a proposer's run folder is its
# working folder).
KINDS = ("working_folder", "worker_name", "run_folder", "session", "parent_session")
PLACEHOLDERS = {
    "working_folder": "/workspace",
    "worker_name": "<WORKER>",
    "run_folder": "<RUN_DIR>",
    "session": "<SESSION>",
    "parent_session": "<PARENT_SESSION>",
}
_SHORTEST_NAME = 8


@dataclass(frozen=True, slots=True)
class Identifier:
    kind: str
    literal: str  # as the line has it

    @property
    def placeholder(self) -> str:
        return PLACEHOLDERS[self.kind]


def line_identifiers(line: dict[str, Any]) -> list[Identifier]:
    """The identifiers of one ledger line, at most one per kind, in KINDS order."""
    role = line["role"]
    metrics = line["outcome"].get("metrics") or {}
    artifacts = line.get("artifacts") or {}
    found: dict[str, str | None] = {}
    if role == "worker":
        cwd = _folder(metrics.get("worker_cwd"))
        found["working_folder"] = cwd
        found["worker_name"] = _worker_name(cwd)
        found["run_folder"] = _folder(artifacts.get("run_dir"))
        found["session"] = _opencode_session(artifacts.get("transcript_ref"))
        found["parent_session"] = _session(metrics.get("session_parent_id"))
    elif role in ("proposer", "agent"):
        found["working_folder"] = _folder(artifacts.get("run_dir"))
        found["session"] = _claude_session(artifacts.get("transcript_ref"))
    elif role == "supervisor":
        found["run_folder"] = _folder(artifacts.get("run_dir"))
    identifiers: list[Identifier] = []
    for kind in KINDS:
        literal = found.get(kind)
        if literal is not None and literal != PLACEHOLDERS[kind] and all(i.literal != literal for i in identifiers):
            identifiers.append(Identifier(kind, literal))
    return identifiers


_NOT_PLAIN = re.compile(r'["\\\x00-\x1f]')


def _plain(value: Any) -> bool:
    return isinstance(value, str) and _NOT_PLAIN.search(value) is None


def _folder(value: Any) -> str | None:
    if not _plain(value):
        return None
    folder = value.rstrip("/")
    return folder if folder.startswith("/") else None


def _distinctive(value: Any) -> str | None:
    """A name or id unlike any word: 8 characters or more, a digit or `-` among them."""
    if _plain(value) and len(value) >= _SHORTEST_NAME and any(c in "0123456789-" for c in value):
        return value
    return None


def _worker_name(cwd: str | None) -> str | None:
    return None if cwd is None else _distinctive(cwd.rsplit("/", 1)[-1])


def _session(value: Any) -> str | None:
    return _distinctive(value)


def _opencode_session(ref: Any) -> str | None:
    if isinstance(ref, str) and ref.startswith("opencode:"):
        return _session(ref.removeprefix("opencode:"))
    return None


def _claude_session(ref: Any) -> str | None:
    """The session of a Claude transcript file: `S.jsonl` or `S/subagents/agent-A.jsonl` are
    session S's; `agent-A.jsonl` beside the sessions names no session in its path."""
    if not isinstance(ref, str) or not ref.endswith(".jsonl"):
        return None
    parts = ref.split("/")
    name = parts[-1].removesuffix(".jsonl")
    if not name.startswith("agent-"):
        return _session(name)
    if len(parts) >= 3 and parts[-2] == "subagents":
        return _session(parts[-3])
    return None
