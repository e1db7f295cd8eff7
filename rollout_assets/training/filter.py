"""The one training filter: which ledger lines are trainable, and why the others are not.

A line is trainable when it has a transcript (no gap), a reward that is not null, is
completed, not truncated, has no error and is not realness-gated. The SFT rows also ask for a
reward above a minimum, at most K rows per (role, instance) and no duplicate transcript.
Every line ends in a row or in exactly one drop reason, the first of DROP_REASONS that holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout_assets.errors import RoundError

ROLES = ("supervisor", "worker", "proposer")

# In the order they are tested: a line with a gap and no reward is dropped as `gap`.
LINE_REASONS = ("gap", "role_excluded", "gated", "error", "incomplete", "truncated", "no_reward")
SFT_REASONS = ("below_min_reward", "duplicate", "per_instance_cap")
PAIR_REASONS = ("no_completion", "prompt_mismatch", "unpaired")
GROUP_REASONS = ("no_completion", "group_too_small")
DROP_REASONS = LINE_REASONS + SFT_REASONS + tuple(r for r in PAIR_REASONS + GROUP_REASONS if r not in SFT_REASONS)


class TrainingFilterError(RoundError, ValueError):
    """Settings of the training filter that cannot be used (the message says which)."""


@dataclass(frozen=True)
class TrainingFilter:
    """The settings of the filter; each training asset takes them as its Dagster config."""

    min_reward: float = 0.0  # SFT keeps rewards strictly above it
    roles: tuple[str, ...] = field(default=ROLES)
    per_instance_cap: int = 3  # SFT rows per (role, instance): best reward first, then ledger order
    margin: float = 0.05  # preference pairs: chosen reward - rejected reward >= margin

    def __post_init__(self) -> None:
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown:
            raise TrainingFilterError(f"training filter: unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
        if self.per_instance_cap < 1:
            raise TrainingFilterError(f"training filter: per_instance_cap must be at least 1, not {self.per_instance_cap}")
        if self.margin < 0:
            raise TrainingFilterError(f"training filter: margin must not be negative, not {self.margin}")

    def to_json(self) -> dict[str, Any]:
        return {
            "min_reward": self.min_reward,
            "roles": list(self.roles),
            "per_instance_cap": self.per_instance_cap,
            "margin": self.margin,
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
