"""The decisions: which lines become SFT rows, which pairs and GRPO groups are made, and the
drop reason of every other line. Pure functions over the scan's keys."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rollout_assets.training.filter import TrainingFilter
from rollout_assets.training.scan import LineKey


@dataclass
class Selection:
    """What one dataset takes from a ledger: its rows (as line indexes) and every line's fate."""

    rows: list[tuple[int, ...]] = field(default_factory=list)
    outcome: dict[int, str] = field(default_factory=dict)  # line index -> "row" or a drop reason


def _by_best_reward(keys: list[LineKey]) -> list[LineKey]:
    return sorted(keys, key=lambda key: (-key.reward, key.index))


def select_sft(keys: list[LineKey], settings: TrainingFilter) -> Selection:
    """Trainable lines above the minimum reward, best first per (role, instance) up to the
    cap; a transcript already kept once is a duplicate. Rows in ledger order."""
    selection = Selection()
    candidates = []
    for key in keys:
        if key.reason is not None:
            selection.outcome[key.index] = key.reason
        elif key.reward <= settings.min_reward:
            selection.outcome[key.index] = "below_min_reward"
        else:
            candidates.append(key)
    kept_digests: set[bytes] = set()
    per_group: dict[tuple[str, str], int] = defaultdict(int)
    for key in _by_best_reward(candidates):
        group = (key.role, key.instance_id)
        if key.digest in kept_digests:
            selection.outcome[key.index] = "duplicate"
        elif per_group[group] >= settings.per_instance_cap:
            selection.outcome[key.index] = "per_instance_cap"
        else:
            kept_digests.add(key.digest)
            per_group[group] += 1
            selection.outcome[key.index] = "row"
    selection.rows = [(index,) for index in sorted(i for i, fate in selection.outcome.items() if fate == "row")]
    return selection


def _prompt_buckets(keys: list[LineKey], selection: Selection, group_by: str) -> list[list[LineKey]]:
    """Trainable lines with a completion, grouped by (role, instance, prompt), or by (role,
    instance) alone when `group_by` is `instance`, in the order of each bucket's first line. A
    line alone in its bucket while its (role, instance) has other trainable lines is a prompt
    mismatch; alone in its instance, the caller's reason."""
    by_prompt = group_by == "prompt"
    buckets: dict[tuple[str, str, bytes], list[LineKey]] = {}
    per_instance: dict[tuple[str, str], int] = defaultdict(int)
    for key in keys:
        if key.reason is not None:
            selection.outcome[key.index] = key.reason
        elif not key.has_completion:
            selection.outcome[key.index] = "no_completion"
        else:
            prompt = key.prompt_digest if by_prompt else b""
            buckets.setdefault((key.role, key.instance_id, prompt), []).append(key)
            per_instance[(key.role, key.instance_id)] += 1
    ordered = []
    for (role, instance, _), bucket in buckets.items():
        if len(bucket) == 1 and per_instance[(role, instance)] > 1:
            selection.outcome[bucket[0].index] = "prompt_mismatch"
        ordered.append(bucket)
    return ordered


def select_pairs(keys: list[LineKey], settings: TrainingFilter) -> Selection:
    """Per (role, instance, prompt), or (role, instance): best against worst, then second best
    against second worst, while chosen - rejected >= margin. Each line is in at most one pair."""
    selection = Selection()
    for bucket in _prompt_buckets(keys, selection, settings.group_by):
        ranked = _by_best_reward(bucket)
        best, worst = 0, len(ranked) - 1
        while best < worst and ranked[best].reward - ranked[worst].reward >= settings.margin:
            selection.rows.append((ranked[best].index, ranked[worst].index))
            selection.outcome[ranked[best].index] = selection.outcome[ranked[worst].index] = "row"
            best, worst = best + 1, worst - 1
        for key in ranked:
            selection.outcome.setdefault(key.index, "unpaired")
    return selection


def select_groups(keys: list[LineKey], settings: TrainingFilter) -> Selection:
    """Per (role, instance, prompt), or (role, instance), with at least two rewarded lines: one
    GRPO group."""
    selection = Selection()
    for bucket in _prompt_buckets(keys, selection, settings.group_by):
        if len(bucket) < 2:
            selection.outcome.setdefault(bucket[0].index, "group_too_small")
            continue
        selection.rows.append(tuple(key.index for key in bucket))
        for key in bucket:
            selection.outcome[key.index] = "row"
    return selection
