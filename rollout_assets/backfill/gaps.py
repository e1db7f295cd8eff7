"""Gap reasons: the exact `provenance.gap` strings, and their classification.

One place owns the wording, so the line builders, the stats counters and the per-reason
metadata in the Dagster layer cannot drift apart.
"""

from __future__ import annotations

SUPERVISOR_NOT_PERSISTED = (
    "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"
)
WORKER_LIST_MISSING_SUFFIX = "; result.json missing: this cell's worker sessions cannot be listed"
WORKERS_UNLISTED_SUFFIX = "; result.json reports spawned workers but lists no worker cwds: this cell's worker sessions cannot be listed"

# Gap reason kinds, as stable identifiers (metadata keys, stats tables).
KIND_SUPERVISOR_NOT_PERSISTED = "supervisor_transcript_not_persisted"
KIND_WORKER_LIST_MISSING = "supervisor_worker_list_missing"
KIND_OPENCODE_UNAVAILABLE = "opencode_store_unavailable"
KIND_NO_OPENCODE_SESSION = "no_opencode_session"
KIND_OPENCODE_SESSION_EMPTY = "opencode_session_empty"
KIND_NO_CLAUDE_TRANSCRIPT = "no_claude_transcript"
KIND_CLAUDE_TRANSCRIPT_EMPTY = "claude_transcript_empty"
KIND_CLAUDE_TRANSCRIPTS_UNREADABLE = "claude_transcripts_unreadable"
KIND_OTHER = "other"

GAP_KINDS = (
    KIND_SUPERVISOR_NOT_PERSISTED,
    KIND_WORKER_LIST_MISSING,
    KIND_OPENCODE_UNAVAILABLE,
    KIND_NO_OPENCODE_SESSION,
    KIND_OPENCODE_SESSION_EMPTY,
    KIND_NO_CLAUDE_TRANSCRIPT,
    KIND_CLAUDE_TRANSCRIPT_EMPTY,
    KIND_CLAUDE_TRANSCRIPTS_UNREADABLE,
    KIND_OTHER,
)


def supervisor_gap(worker_list_missing: bool, *, workers_unlisted: bool = False) -> str:
    """The supervisor's gap; its suffix says why the cell's workers cannot be listed, if so:
    no readable result.json, or one that reports workers without listing their cwds."""
    if worker_list_missing:
        return SUPERVISOR_NOT_PERSISTED + WORKER_LIST_MISSING_SUFFIX
    if workers_unlisted:
        return SUPERVISOR_NOT_PERSISTED + WORKERS_UNLISTED_SUFFIX
    return SUPERVISOR_NOT_PERSISTED


def opencode_unavailable(worker_cwd: str, problem: str | None = None) -> str:
    """A worker of a round whose store cannot be read; `problem` says why (the store path and
    the reason), when the reader knows it."""
    gap = f"opencode store unavailable; worker cwd {worker_cwd} unrecoverable"
    return gap if problem is None else f"{gap} ({problem})"


def no_opencode_session(worker_cwd: str) -> str:
    return f"no opencode session found for worker cwd {worker_cwd}"


def opencode_session_empty(session_id: str) -> str:
    return f"opencode session {session_id} has no readable message parts"


def no_claude_transcript(worktree_cwd: str) -> str:
    return f"no claude transcript matched worktree {worktree_cwd} in the shot's time window"


def claude_transcript_empty(transcript_path: str) -> str:
    return f"claude transcript {transcript_path} matched the shot's time window but holds no conversation messages"


def claude_transcripts_unreadable(worktree_cwd: str, path: str, why: str) -> str:
    # Not "no transcript matched": the one that would have may be the file or folder that
    # could not be read, so the shot is left unjoined rather than joined to another.
    return f"claude transcripts of worktree {worktree_cwd} cannot be read ({path}: {why})"


# The supervisor gaps of a cell whose workers cannot be listed, built once (gap_kind runs per line).
_WORKER_LIST_GAPS = frozenset(
    SUPERVISOR_NOT_PERSISTED + suffix for suffix in (WORKER_LIST_MISSING_SUFFIX, WORKERS_UNLISTED_SUFFIX)
)


def gap_kind(gap: str) -> str:
    """The kind of a gap string, by the wording above."""
    if gap == SUPERVISOR_NOT_PERSISTED:
        return KIND_SUPERVISOR_NOT_PERSISTED
    if gap in _WORKER_LIST_GAPS:
        return KIND_WORKER_LIST_MISSING
    if gap.startswith("opencode store unavailable; worker cwd "):
        return KIND_OPENCODE_UNAVAILABLE
    if gap.startswith("no opencode session found for worker cwd "):
        return KIND_NO_OPENCODE_SESSION
    if gap.startswith("opencode session ") and gap.endswith(" has no readable message parts"):
        return KIND_OPENCODE_SESSION_EMPTY
    if gap.startswith("no claude transcript matched worktree "):
        return KIND_NO_CLAUDE_TRANSCRIPT
    if gap.startswith("claude transcript ") and gap.endswith(" but holds no conversation messages"):
        return KIND_CLAUDE_TRANSCRIPT_EMPTY
    if gap.startswith("claude transcripts of worktree ") and gap.endswith(")") and " cannot be read (" in gap:
        return KIND_CLAUDE_TRANSCRIPTS_UNREADABLE
    return KIND_OTHER
