"""The decisions: which lines become SFT rows, which pairs and GRPO groups are made, and the
drop reason of every other line. Pure functions over the scan's keys: SpilledKeys (keys.py),
or any list of LineKey, walked in ledger order, best reward first, or bucket after bucket, so
that a bucket's lines are the only keys in memory at a time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rollout_assets.training.filter import TrainingFilter
from rollout_assets.training.keys import LineKey, key_store
from rollout_assets.training.outcomes import Fates, RowIndexes


@dataclass
class Selection:
    """What one dataset takes from a ledger: its rows (as line indexes) and every line's fate."""

    rows: RowIndexes = field(default_factory=RowIndexes)
    outcome: Fates = field(default_factory=Fates)  # line index -> "row" or a drop reason


def _by_best_reward(keys: list[LineKey]) -> list[LineKey]:
    return sorted(keys, key=lambda key: (-key.reward, key.index))


def select_sft(keys: Iterable[LineKey], settings: TrainingFilter) -> Selection:
    """Trainable lines above the minimum reward, best first per (role, instance) up to the
    cap; a transcript already kept once is a duplicate. Rows in ledger order."""
    selection = Selection()
    with key_store(keys) as store:
        for index, reason, reward, _ in store.line_reasons():
            if reason is not None:
                selection.outcome[index] = reason
            elif reward <= settings.min_reward:
                selection.outcome[index] = "below_min_reward"
        _keep_best(selection, store.best_first(), settings)
    selection.rows = RowIndexes((index,) for index, fate in selection.outcome.items() if fate == "row")
    return selection


def _keep_best(selection: Selection, best_first: Iterable[LineKey], settings: TrainingFilter) -> None:
    """The SFT fates of the lines without one yet (the candidates), walked best reward first."""
    kept_digests: set[bytes] = set()
    per_group: dict[tuple[str, str], int] = defaultdict(int)
    for key in best_first:
        if key.index in selection.outcome:  # a line reason, or not above the minimum reward
            continue
        group = (key.role, key.instance_id)
        if key.digest in kept_digests:
            selection.outcome[key.index] = "duplicate"
        elif per_group[group] >= settings.per_instance_cap:
            selection.outcome[key.index] = "per_instance_cap"
        else:
            kept_digests.add(key.digest)
            per_group[group] += 1
            selection.outcome[key.index] = "row"


def _prompt_buckets(keys: Iterable[LineKey], selection: Selection, group_by: str) -> Iterator[list[LineKey]]:
    """Trainable lines with a completion, grouped by (role, instance, prompt), or by (role,
    instance) alone when `group_by` is `instance`, in the order of each bucket's first line,
    one bucket at a time. A line alone in its bucket while its (role, instance) has other
    trainable lines is a prompt mismatch; alone in its instance, the caller's reason."""
    with key_store(keys) as store:
        for index, reason, _, has_completion in store.line_reasons():
            if reason is not None:
                selection.outcome[index] = reason
            elif not has_completion:
                selection.outcome[index] = "no_completion"
        for bucket, instance_lines in store.buckets(by_prompt=group_by == "prompt"):
            if len(bucket) == 1 and instance_lines > 1:
                selection.outcome[bucket[0].index] = "prompt_mismatch"
            yield bucket


def select_pairs(keys: Iterable[LineKey], settings: TrainingFilter) -> Selection:
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


def select_groups(keys: Iterable[LineKey], settings: TrainingFilter) -> Selection:
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
