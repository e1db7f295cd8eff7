"""The one training filter: which ledger lines are trainable, and why the others are not.

A line is trainable when it has a transcript (no gap), a reward that is not null, is
completed, not truncated, has no error, is not realness-gated and, when a token limit is set,
is no longer than it. The SFT rows also ask for a reward above a minimum, at most K rows per
(role, instance) and no duplicate transcript. Every line ends in a row or in exactly one drop
reason, the first of DROP_REASONS that holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout_assets.errors import RoundError

ROLES = ("supervisor", "worker", "proposer")  # the default
# A proposer's sub-agent conversations (`agent` lines) inherit the proposer's reward: they may be
# asked for, and are not trained on by default.
ALLOWED_ROLES = (*ROLES, "agent")

# In the order they are tested: a line with a gap and no reward is dropped as `gap`. `too_long`
# is tested last, by the scan (it counts the normalized transcript's tokens).
LINE_REASONS = ("gap", "role_excluded", "gated", "error", "incomplete", "truncated", "no_reward", "too_long")
SFT_REASONS = ("below_min_reward", "duplicate", "per_instance_cap")
PAIR_REASONS = ("no_completion", "prompt_mismatch", "unpaired")
GROUP_REASONS = ("no_completion", "group_too_small")
DROP_REASONS = LINE_REASONS + SFT_REASONS + tuple(r for r in PAIR_REASONS + GROUP_REASONS if r not in SFT_REASONS)
# What a preference pair or a GRPO group joins: lines of one (role, instance) whose normalized
# prompts are identical, or every line of one (role, instance), each with its own prompt.
GROUP_BY = ("prompt", "instance")


class TrainingFilterError(RoundError, ValueError):
    """Settings of the training filter that cannot be used (the message says which)."""


@dataclass(frozen=True)
class TrainingFilter:
    """The settings of the filter; each training asset takes them as its Dagster config."""

    min_reward: float = 0.0  # SFT keeps rewards strictly above it
    roles: tuple[str, ...] = field(default=ROLES)
    per_instance_cap: int = 3  # SFT rows per (role, instance): best reward first, then ledger order
    margin: float = 0.05  # preference pairs: chosen reward - rejected reward >= margin
    normalize_identifiers: bool = True  # per-worker paths and session ids as placeholders (normalize.py)
    group_by: str = "prompt"  # pairs and groups: GROUP_BY
    max_tokens: int | None = None  # lines longer than this are dropped as too_long; None: no limit
    tokenizer: str | None = None  # a tokenizer.json that counts tokens; None: the estimate

    def __post_init__(self) -> None:
        unknown = sorted(set(self.roles) - set(ALLOWED_ROLES))
        if unknown:
            raise TrainingFilterError(f"training filter: unknown role(s) {', '.join(unknown)}; roles are {', '.join(ALLOWED_ROLES)}")
        if self.per_instance_cap < 1:
            raise TrainingFilterError(f"training filter: per_instance_cap must be at least 1, not {self.per_instance_cap}")
        if self.margin < 0:
            raise TrainingFilterError(f"training filter: margin must not be negative, not {self.margin}")
        if self.group_by not in GROUP_BY:
            raise TrainingFilterError(f"training filter: group_by must be {' or '.join(GROUP_BY)}, not {self.group_by!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise TrainingFilterError(f"training filter: max_tokens must be at least 1, not {self.max_tokens}")

    @property
    def token_counter(self) -> str:
        """What counts a row's tokens: `tokenizer` (the file of `tokenizer`) or `estimate`."""
        return "estimate" if self.tokenizer is None else "tokenizer"

    def to_json(self) -> dict[str, Any]:
        return {
            "min_reward": self.min_reward,
            "roles": list(self.roles),
            "per_instance_cap": self.per_instance_cap,
            "margin": self.margin,
            "normalize_identifiers": self.normalize_identifiers,
            "group_by": self.group_by,
            "max_tokens": self.max_tokens,
            "tokenizer": self.tokenizer,
            "token_counter": self.token_counter,
        }


def line_drop_reason(line: dict[str, Any], settings: TrainingFilter) -> str | None:
    """The first reason this line cannot train anything, or None when it is trainable."""
    outcome = line["outcome"]
    if not line["messages"] or line["provenance"].get("gap") is not None:
        return "gap"
    if line["role"] not in settings.roles:
        return "role_excluded"
    if outcome["realness_gated"]:
        return "gated"
    if outcome["error"] is not None:
        return "error"
    if not outcome["is_completed"]:
        return "incomplete"
    if outcome["is_truncated"]:
        return "truncated"
    if outcome["reward"] is None:
        return "no_reward"
    return None
