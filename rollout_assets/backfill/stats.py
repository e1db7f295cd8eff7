"""The backfill's counters, kept incrementally as lines stream past.

Every counter is derived from the lines themselves (plus whether the opencode store was
available), so the command line and the Dagster assets count the same way, and a stream
of any size is counted without being held. One counter per failure mode, so a join failure
(no session for a cwd) cannot hide a store failure (a session with no readable parts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, get_args

from rollout_assets.backfill import gaps
from rollout_assets.counters import KEEP, merge_counters
from rollout_assets.ledger.schema import Role

# Per-role counters are written in this order (the order the seed first meets the roles in a
# round: supervisors, their workers, then proposers), whatever order parts were counted in.
_ROLE_ORDER = {role: index for index, role in enumerate(get_args(Role))}


def _by_role_order(counts: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(counts.items(), key=lambda item: _ROLE_ORDER.get(item[0], len(_ROLE_ORDER))))


# Reward and cost sums are kept exact, as whole numbers of 2**-1074 (the smallest double):
# every double, and every integer a line holds, is one. Float addition is not associative, so
# summing a round's parts in another order (one process or several) could change a printed
# mean; integer sums cannot. They are rounded to a double once, when written.
_UNIT_BITS = 1074


def _exact_units(value: float) -> int:
    """`value` as a whole number of 2**-1074, exactly."""
    numerator, denominator = value.as_integer_ratio()  # denominator: a power of two, <= 2**1074
    return numerator << (_UNIT_BITS + 1 - denominator.bit_length())


# A stored sum that was no finite number: far beyond a double (2**2098 units), so it stays
# beyond one whatever a round adds to it.
_BEYOND_A_DOUBLE = 1 << 4096


def _double_or_none(units: int) -> float | None:
    """An exact sum rounded once to a double; None when a double cannot hold it (JSON has no
    Infinity; the seed's `JSON.stringify` writes null)."""
    try:
        return units / (1 << _UNIT_BITS)  # int / int is correctly rounded
    except OverflowError:
        return None


def _rounded(total: float | None, digits: int, count: int = 1) -> float | None:
    """`total / count` rounded to `digits` decimals; None for a sum beyond a double."""
    return None if total is None else round(total / count, digits)


@dataclass
class BackfillStats:
    lines: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    full_transcripts: int = 0
    gap_lines: int = 0
    reward_labeled: int = 0
    worker_sessions_joined: int = 0
    # Worker cwds with no opencode session row (store available or not): a join failure.
    worker_cwds_missed: int = 0
    # Sessions found but carrying no readable message parts: a store failure.
    worker_sessions_empty: int = 0
    proposer_shots_joined: int = 0
    proposer_shots_missed: int = 0
    # Whether the store could be read: the round's, the same in every part (not a count).
    opencode_db_available: bool = field(default=False, metadata=KEEP)
    # Shots joined to a transcript that holds no conversation (counted as joined too).
    proposer_transcripts_empty: int = 0
    # Cells whose result.json is missing or unreadable: their worker sessions cannot be listed.
    cells_without_worker_list: int = 0
    by_gap_kind: dict[str, int] = field(default_factory=dict)
    # Per role: rewards labeled and their sum (mean reward = sum / labeled), and Σ cost.usd
    # with how many lines recorded one (unrecorded cost is not 0). Sums are exact (`_exact_units`).
    reward_labeled_by_role: dict[str, int] = field(default_factory=dict)
    reward_sum_by_role: dict[str, int] = field(default_factory=dict)
    cost_usd_by_role: dict[str, int] = field(default_factory=dict)
    cost_recorded_by_role: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Counters stored by an earlier version hold the sums as doubles (NaN or infinite once
        # they were beyond a double).
        for sums in (self.reward_sum_by_role, self.cost_usd_by_role):
            for role, value in sums.items():
                if isinstance(value, float):
                    sums[role] = _exact_units(value) if math.isfinite(value) else _BEYOND_A_DOUBLE

    def observe(self, line: dict[str, Any]) -> None:
        """Count one line of the ledger."""
        role = line["role"]
        self.lines += 1
        self.by_role[role] = self.by_role.get(role, 0) + 1
        has_messages = len(line["messages"]) > 0
        if has_messages:
            self.full_transcripts += 1
        else:
            self.gap_lines += 1
        reward = line["outcome"]["reward"]
        if reward is not None:
            self.reward_labeled += 1
            self.reward_labeled_by_role[role] = self.reward_labeled_by_role.get(role, 0) + 1
            self.reward_sum_by_role[role] = self.reward_sum_by_role.get(role, 0) + _exact_units(reward)
        usd = line["cost"]["usd"]
        if usd is not None:
            self.cost_usd_by_role[role] = self.cost_usd_by_role.get(role, 0) + _exact_units(usd)
            self.cost_recorded_by_role[role] = self.cost_recorded_by_role.get(role, 0) + 1
        gap = line["provenance"].get("gap")
        kind = gaps.gap_kind(gap) if isinstance(gap, str) else None
        if kind is not None:
            self.by_gap_kind[kind] = self.by_gap_kind.get(kind, 0) + 1
        metrics = line["outcome"]["metrics"]
        if role == "supervisor" and metrics.get("worker_list_missing") is True:
            self.cells_without_worker_list += 1
        elif role == "worker":
            if metrics.get("has_session") is not True:
                self.worker_cwds_missed += 1
            elif has_messages:
                self.worker_sessions_joined += 1
            else:
                self.worker_sessions_empty += 1
        elif role == "proposer":
            if kind in (gaps.KIND_NO_CLAUDE_TRANSCRIPT, gaps.KIND_CLAUDE_TRANSCRIPTS_UNREADABLE):
                self.proposer_shots_missed += 1
            else:
                self.proposer_shots_joined += 1
                if kind == gaps.KIND_CLAUDE_TRANSCRIPT_EMPTY:
                    self.proposer_transcripts_empty += 1

    def merge(self, other: BackfillStats) -> None:
        """Add the counts of `other` (the counters of another part of the same round), each
        field by its type or its policy (`rollout_assets.counters`)."""
        # A subclass's fields are merged here too, unless it marks them KEEP and merges them
        # itself (WorkerLinesTally joins runs of lines).
        merge_counters(self, other)

    def to_json(self) -> dict[str, Any]:
        """The seed's key names and order, then this project's additional counters."""
        return {
            "lines": self.lines,
            "byRole": _by_role_order(self.by_role),
            "fullTranscripts": self.full_transcripts,
            "gapLines": self.gap_lines,
            "rewardLabeled": self.reward_labeled,
            "workerSessionsJoined": self.worker_sessions_joined,
            "workerCwdsMissed": self.worker_cwds_missed,
            "workerSessionsEmpty": self.worker_sessions_empty,
            "proposerShotsJoined": self.proposer_shots_joined,
            "proposerShotsMissed": self.proposer_shots_missed,
            "opencodeDbAvailable": self.opencode_db_available,
            "proposerTranscriptsEmpty": self.proposer_transcripts_empty,
            "cellsWithoutWorkerList": self.cells_without_worker_list,
            "byGapReason": dict(sorted(self.by_gap_kind.items())),
            "rewardByRole": {
                role: {
                    "labeled": labeled,
                    "mean": _rounded(_double_or_none(self.reward_sum_by_role[role]), 12, labeled),
                }
                for role, labeled in _by_role_order(self.reward_labeled_by_role).items()
            },
            "costUsdByRole": {
                role: {"usd": _rounded(_double_or_none(units), 6), "linesWithCost": self.cost_recorded_by_role[role]}
                for role, units in _by_role_order(self.cost_usd_by_role).items()
            },
        }

