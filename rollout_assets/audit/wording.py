"""What the line format fixes, written out for the audits: the gap wordings and their kinds,
the id rule, the reward sources by role and the baseline's coordinates.

Written out here rather than taken from the writer, so that a changed wording or rule fails
the checks instead of changing with them.
"""

from __future__ import annotations

import hashlib
import re
import uuid

OFFICIAL_JUDGE = "swe-arena-official-judge"

# docs/line-format.md, Ids: uuid5 of the invocation's name in this namespace.
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1")
_ID_PREFIX = _ID_NAMESPACE.bytes

# docs/line-format.md: a line's reward_source, by role, when its reward is not null (null otherwise).
REWARD_SOURCES = {
    "supervisor": OFFICIAL_JUDGE,
    "worker": f"{OFFICIAL_JUDGE}/inherited",
    "proposer": f"{OFFICIAL_JUDGE}/candidate-resolved-fraction",
}

# The gap wordings (docs/line-format.md, and the deliberate differences in docs/seed.md).
SUPERVISOR_GAP = "supervisor brain transcript not persisted (brain.jsonl carries per-request stats only)"
SUPERVISOR_GAP_LIST_MISSING = (
    SUPERVISOR_GAP + "; result.json missing: this cell's worker sessions cannot be listed"
)
SUPERVISOR_GAP_UNLISTED = (
    SUPERVISOR_GAP
    + "; result.json reports spawned workers but lists no worker cwds: this cell's worker sessions cannot be listed"
)


def store_unavailable_gap(cwd: str) -> str:
    """The wording without a cause; a gap may add ` (<path>: <why>)` when the store is there
    but could not be read (`store_unavailable_cause`)."""
    return f"opencode store unavailable; worker cwd {cwd} unrecoverable"


def store_unavailable_cause(gap: str | None, cwd: str) -> tuple[bool, str | None]:
    """(whether `gap` is the store-unavailable gap of `cwd`, the cause it gives if any)."""
    plain = store_unavailable_gap(cwd)
    if gap == plain:
        return True, None
    if gap is not None and gap.startswith(plain + " (") and gap.endswith(")") and len(gap) > len(plain) + 3:
        return True, gap[len(plain) + 2 : -1]
    return False, None


def no_session_gap(cwd: str) -> str:
    return f"no opencode session found for worker cwd {cwd}"


def empty_session_gap(session_id: str) -> str:
    return f"opencode session {session_id} has no readable message parts"


def no_transcript_gap(worktree: str) -> str:
    return f"no claude transcript matched worktree {worktree} in the shot's time window"


def unreadable_transcripts_gap(worktree: str, path: str, why: str) -> str:
    return f"claude transcripts of worktree {worktree} cannot be read ({path}: {why})"


UNREADABLE_TRANSCRIPTS_GAP = re.compile(
    r"claude transcripts of worktree (.*) cannot be read \((.*): ([^:]*)\)\Z", re.DOTALL
)
EMPTY_TRANSCRIPT_GAP = re.compile(
    r"claude transcript (.*) matched the shot's time window but holds no conversation messages\Z", re.DOTALL
)

# Gap kinds as the stats' `byGapReason` names them, each recognised by its whole wording.
_GAP_KINDS = (
    (
        "opencode_store_unavailable",
        re.compile(r"opencode store unavailable; worker cwd .* unrecoverable(?: \(.+\))?\Z", re.DOTALL),
    ),
    ("no_opencode_session", re.compile(r"no opencode session found for worker cwd ")),
    ("opencode_session_empty", re.compile(r"opencode session .* has no readable message parts\Z", re.DOTALL)),
    (
        "no_claude_transcript",
        re.compile(r"no claude transcript matched worktree .* in the shot's time window\Z", re.DOTALL),
    ),
    ("claude_transcript_empty", EMPTY_TRANSCRIPT_GAP),
    ("claude_transcripts_unreadable", UNREADABLE_TRANSCRIPTS_GAP),
)
_SUPERVISOR_GAP_KINDS = {
    SUPERVISOR_GAP: "supervisor_transcript_not_persisted",
    SUPERVISOR_GAP_LIST_MISSING: "supervisor_worker_list_missing",
    SUPERVISOR_GAP_UNLISTED: "supervisor_worker_list_missing",
}


def gap_kind(gap: str) -> str:
    """The kind of a gap, by its wording; `other` for a wording no line of a round carries."""
    kind = _SUPERVISOR_GAP_KINDS.get(gap)
    if kind is not None:
        return kind
    for kind, wording in _GAP_KINDS:
        if wording.match(gap):
            return kind
    return "other"


def rollout_id(name: str) -> str:
    """uuid5's algorithm, written out (the checks name every line twice; building a uuid.UUID
    for each cost a third of that); a lone surrogate is encoded as UTF-8 would encode it."""
    digest = bytearray(hashlib.sha1(_ID_PREFIX + name.encode("utf-8", "surrogatepass")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def generation_and_index(candidate_id: str) -> tuple[int, int]:
    """docs/line-format.md: the baseline is generation -1, candidate index -1."""
    if candidate_id == "baseline":
        return -1, -1
    generation, index = candidate_id.removeprefix("gen").split("-cand")
    return int(generation), int(index)
