"""The audit's own one-to-one join of shots to transcripts, and its own count of the sub-agent
conversations of a joined transcript (docs/input-formats.md §5, §6), by its own reading.

One-to-one: within a worktree, every (shot, qualifying transcript) pair is taken closest in
time first (|transcript start - the receipt's startedAt|, 0 under the only-candidate rule; ties:
the earlier receipt by path, then the earlier file of the worktree's listing); a pair whose
shot or file is taken is passed over. A worktree where some shot's evidence is unsettled is
left unassigned: then no join of it is proven.

Sub-agent conversations of a session file S: its sidechain lines (`isSidechain: true`), one
conversation per `parentUuid` chain (a sidechain line whose parentUuid names no sidechain line
before it starts one, named by its `uuid`); then those of the `agent-*.jsonl` files beside S
whose lines have no main chain and name S's stem as `sessionId` (file name order); then those of
`S-stem/subagents/agent-*.jsonl` (name order). Only a conversation with a conversation message
counts. A line whose string `uuid` an earlier line of its file had is a repeat, and not read: it
would start a second conversation under the same key, or put an earlier partial usage last.

The same reading sums the token usage of each thread it reads (audit/usage.py, `ThreadUsage`):
the session file's main chain, for its proposer line, and each sub-agent conversation, for its
`agent` line. No file is read for the usage alone.
"""

from __future__ import annotations

import os
from itertools import groupby
from pathlib import Path
from typing import Any, NamedTuple

from rollout_assets.audit.shot_proofs import ShotProofs
from rollout_assets.audit.shots import ProposerWorktree
from rollout_assets.audit.strict_json import any_depth_json
from rollout_assets.audit.times import epoch_ms
from rollout_assets.audit.transcripts import is_conversation
from rollout_assets.audit.usage import ThreadUsage
from rollout_assets.io import open_regular_file


class SubagentConversation(NamedTuple):
    file: str  # the file its lines are in
    in_project: str  # that file's name beside its session: S.jsonl, agent-A.jsonl, S/subagents/agent-A.jsonl
    key: str  # the uuid of the line that starts it
    usage: tuple[Any, ...]  # its token sums (audit/usage.py: tokens_in, tokens_out, cache_read, cache_write)


class JoinedSession(NamedTuple):
    """What the audit reads of a session file joined to a shot: its main chain's token sums and
    its sub-agent conversations."""

    usage: tuple[Any, ...]
    conversations: list[SubagentConversation]


class _FileReading(NamedTuple):
    conversations: list[tuple[str, tuple[Any, ...]]]  # (key, token sums) of those holding a message
    session_ids: list[str]  # its first string sessionId, as a list of at most one
    main_chain: bool  # it has a main-chain conversation line
    usage: tuple[Any, ...]  # its main chain's token sums


def assign_joins(out_dir: Path, shots: list[ProposerWorktree]) -> list[ProposerWorktree]:
    """Every shot with the audit's own one-to-one join (`assigned`, `joined`), in the same order."""
    proofs = ShotProofs(out_dir)
    assigned: dict[str, ProposerWorktree] = {}
    for _, group_iter in groupby(shots, key=lambda shot: shot.worktree):
        group = list(group_iter)
        evidence = [proofs.evidence(shot) for shot in group]
        if any(found.unsettled is not None for found in evidence):
            continue
        pairs = []
        for index, (shot, found) in enumerate(zip(group, evidence, strict=True)):
            listing = list(shot.transcripts or ())
            for path, start in found.qualifying:
                ms = epoch_ms(start)
                started = found.window.started
                distance = abs(ms - started) if isinstance(ms, int) and isinstance(started, int) else 0
                pairs.append((distance, index, listing.index(path), path))
        joined: list[str | None] = [None] * len(group)
        taken: set[str] = set()
        for _, index, _, path in sorted(pairs):
            if joined[index] is None and path not in taken:
                joined[index] = path
                taken.add(path)
        for shot, path in zip(group, joined, strict=True):
            assigned[shot.receipt.relative_path] = shot._replace(assigned=True, joined=path)
    return [assigned.get(shot.receipt.relative_path, shot) for shot in shots]


def joined_session(session_file: str, listing: tuple[str, ...]) -> JoinedSession:
    """The main chain's usage and the sub-agent conversations of a session file, `listing` the
    worktree's `.jsonl` files."""
    session = Path(session_file)
    own = _read(session_file)
    found = [SubagentConversation(session_file, session.name, *c) for c in own.conversations]
    for path in listing:
        name = os.path.basename(path)
        if not name.startswith("agent-") or path == session_file:
            continue
        reading = _read(path)
        if not reading.main_chain and reading.session_ids[:1] == [session.stem]:
            found += [SubagentConversation(path, name, *c) for c in reading.conversations]
    folder = session.parent / session.stem / "subagents"
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("agent-") and n.endswith(".jsonl"))
    except OSError:
        names = []
    for name in names:
        path = str(folder / name)
        beside = f"{session.stem}/subagents/{name}"
        found += [SubagentConversation(path, beside, *c) for c in _read(path).conversations]
    return JoinedSession(own.usage, found)


def _read(path: str) -> _FileReading:
    """The file's sidechain conversations holding a message, in the order they start, each with
    its token sums; its first string sessionId; whether it has a main chain, and that chain's
    token sums. A file that cannot be read holds none of them."""
    roots: dict[str, int] = {}  # sidechain uuid -> the index of its conversation
    started: list[tuple[str, ThreadUsage]] = []  # (key, usage) of each conversation, in order
    with_message: set[int] = set()
    session_ids: list[str] = []
    main_chain = False
    main_usage = ThreadUsage()
    seen: set[str] = set()  # the string uuids of the lines read
    try:
        with open_regular_file(path) as handle:
            for raw in handle:
                entry = _entry(raw)
                if entry is None or _repeated(entry, seen):
                    continue
                if not session_ids and isinstance(entry.get("sessionId"), str):
                    session_ids.append(entry["sessionId"])
                conversational = entry.get("type") in ("user", "assistant") and isinstance(
                    entry.get("message"), dict
                )
                if entry.get("isSidechain") is not True:
                    main_chain = main_chain or conversational
                    if conversational:
                        main_usage.note(entry)
                    continue
                parent, own = entry.get("parentUuid"), entry.get("uuid")
                index = roots.get(parent) if isinstance(parent, str) else None
                if index is None:
                    index = len(started)
                    started.append((own if isinstance(own, str) else f"line-{index + 1}", ThreadUsage()))
                if isinstance(own, str):
                    roots[own] = index
                if conversational:
                    started[index][1].note(entry)
                    if is_conversation(entry):
                        with_message.add(index)
    except OSError:
        return _FileReading([], session_ids, main_chain, ThreadUsage().sums())
    conversations = [(key, usage.sums()) for n, (key, usage) in enumerate(started) if n in with_message]
    return _FileReading(conversations, session_ids, main_chain, main_usage.sums())


def _repeated(entry: dict[str, Any], seen: set[str]) -> bool:
    """Whether an earlier line of the file had this line's string `uuid`: Claude Code can append
    a line it already wrote (docs/input-formats.md §5), and it is read once. Notes the uuid."""
    own = entry.get("uuid")
    if not isinstance(own, str):
        return False
    if own in seen:
        return True
    seen.add(own)
    return False


def _entry(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        entry = any_depth_json(raw)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None
