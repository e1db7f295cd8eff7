"""The export's per-line state on disk and in compact arrays (training/keys.py,
training/outcomes.py): the decisions made from it are those of the same rules over a list of
keys in memory."""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict

import pytest

from rollout_assets.training.filter import TrainingFilter
from rollout_assets.training.keys import LineKey, SpilledKeys
from rollout_assets.training.outcomes import Fates, RowIndexes
from rollout_assets.training.select import select_groups, select_pairs, select_sft


def _digest(value: object) -> bytes:
    return hashlib.sha256(repr(value).encode()).digest()


def _keys(seed: int, count: int) -> list[LineKey]:
    """Lines of a few (role, instance) pairs with shared prompts and transcripts and of many
    with a line or two, rewards as ints and floats with ties, some with a line reason or no
    completion."""
    draw = random.Random(seed)
    keys = []
    for index in range(count):
        reason = draw.choice([None] * 6 + ["gap", "error", "no_reward", "too_long"])
        reward = None if reason == "no_reward" else draw.choice([0, 1, 0.5, 0.25, 0.9, 0.88, 0.3, 1.0])
        keys.append(LineKey(
            index=index, offset=index * 100, length=99, rollout_id=f"r-{index}",
            role=draw.choice(["worker", "supervisor"]), instance_id=draw.choice(["a", "b", "c\ud800", f"d{draw.randrange(40)}"]),
            reward=reward, reason=reason, digest=_digest(draw.randrange(60)),
            prompt_digest=_digest(("prompt", draw.randrange(3))), has_completion=draw.random() < 0.85,
        ))  # fmt: skip
    return keys


def _sft_in_memory(keys: list[LineKey], settings: TrainingFilter) -> tuple[list[tuple[int, ...]], dict[int, str]]:
    outcome: dict[int, str] = {}
    candidates = []
    for key in keys:
        if key.reason is not None:
            outcome[key.index] = key.reason
        elif key.reward <= settings.min_reward:
            outcome[key.index] = "below_min_reward"
        else:
            candidates.append(key)
    kept: set[bytes] = set()
    per_group: dict[tuple[str, str], int] = defaultdict(int)
    for key in sorted(candidates, key=lambda key: (-key.reward, key.index)):
        if key.digest in kept:
            outcome[key.index] = "duplicate"
        elif per_group[(key.role, key.instance_id)] >= settings.per_instance_cap:
            outcome[key.index] = "per_instance_cap"
        else:
            kept.add(key.digest)
            per_group[(key.role, key.instance_id)] += 1
            outcome[key.index] = "row"
    return [(index,) for index in sorted(i for i, fate in outcome.items() if fate == "row")], outcome


def _buckets_in_memory(keys: list[LineKey], outcome: dict[int, str], by_prompt: bool) -> list[list[LineKey]]:
    buckets: dict[tuple[str, str, bytes], list[LineKey]] = {}
    per_instance: dict[tuple[str, str], int] = defaultdict(int)
    for key in keys:
        if key.reason is not None:
            outcome[key.index] = key.reason
        elif not key.has_completion:
            outcome[key.index] = "no_completion"
        else:
            buckets.setdefault((key.role, key.instance_id, key.prompt_digest if by_prompt else b""), []).append(key)
            per_instance[(key.role, key.instance_id)] += 1
    for (role, instance, _), bucket in buckets.items():
        if len(bucket) == 1 and per_instance[(role, instance)] > 1:
            outcome[bucket[0].index] = "prompt_mismatch"
    return list(buckets.values())


def _pairs_and_groups_in_memory(keys: list[LineKey], settings: TrainingFilter) -> tuple[tuple, tuple]:
    by_prompt = settings.group_by == "prompt"
    pairs: list[tuple[int, ...]] = []
    pair_fates: dict[int, str] = {}
    for bucket in _buckets_in_memory(keys, pair_fates, by_prompt):
        ranked = sorted(bucket, key=lambda key: (-key.reward, key.index))
        best, worst = 0, len(ranked) - 1
        while best < worst and ranked[best].reward - ranked[worst].reward >= settings.margin:
            pairs.append((ranked[best].index, ranked[worst].index))
            pair_fates[ranked[best].index] = pair_fates[ranked[worst].index] = "row"
            best, worst = best + 1, worst - 1
        for key in ranked:
            pair_fates.setdefault(key.index, "unpaired")
    groups: list[tuple[int, ...]] = []
    group_fates: dict[int, str] = {}
    for bucket in _buckets_in_memory(keys, group_fates, by_prompt):
        if len(bucket) < 2:
            group_fates.setdefault(bucket[0].index, "group_too_small")
            continue
        groups.append(tuple(key.index for key in bucket))
        group_fates.update((key.index, "row") for key in bucket)
    return (pairs, pair_fates), (groups, group_fates)


@pytest.mark.parametrize("group_by", ["prompt", "instance"])
@pytest.mark.parametrize("seed", range(6))
def test_the_decisions_over_spilled_keys_are_those_over_a_list(seed: int, group_by: str) -> None:
    keys = _keys(seed, 150)
    settings = TrainingFilter(min_reward=0.2, per_instance_cap=2, margin=0.05, group_by=group_by)
    sft_rows, sft_fates = _sft_in_memory(keys, settings)
    (pairs, pair_fates), (groups, group_fates) = _pairs_and_groups_in_memory(keys, settings)
    with SpilledKeys.of(keys) as spilled:
        for given in (keys, spilled):  # a list is walked through a store of its own
            sft, pair, group = select_sft(given, settings), select_pairs(given, settings), select_groups(given, settings)
            assert (list(sft.rows), dict(sft.outcome)) == (sft_rows, sft_fates)
            assert (list(pair.rows), dict(pair.outcome)) == (pairs, pair_fates)
            assert (list(group.rows), dict(group.outcome)) == (groups, group_fates)
    assert len(sft_fates) == len(pair_fates) == len(group_fates) == len(keys)


def test_spilled_keys_read_back_as_appended() -> None:
    keys = _keys(7, 30)
    with SpilledKeys.of(keys) as spilled:
        assert len(spilled) == 30 and list(spilled) == keys
        assert spilled[17] == keys[17] and spilled[17].instance_id == keys[17].instance_id
        assert list(spilled.rollout_ids()) == [(key.index, key.rollout_id) for key in keys]
        assert spilled.places([17, 3]) == {17: (1700, 99), 3: (300, 99)}
        assert [type(key.reward) for key in spilled] == [type(key.reward) for key in keys]  # 1 stays 1
        with pytest.raises(IndexError):
            spilled[30]
        with pytest.raises(IndexError):
            spilled.places([3, 30])
        path = spilled.path
    assert not path.exists()


def test_fates_answer_as_a_dict_of_them() -> None:
    fates = Fates()
    fates[5] = "row"
    fates[2] = "duplicate"
    assert fates.setdefault(5, "unpaired") == "row" and fates.setdefault(0, "unpaired") == "unpaired"
    assert dict(fates) == {0: "unpaired", 2: "duplicate", 5: "row"} and list(fates) == [0, 2, 5]
    assert 1 not in fates and fates.get(1) is None and len(fates) == 3
    with pytest.raises(KeyError):
        fates[9]
    with pytest.raises(ValueError, match="no fate of a line"):
        fates[1] = "lost"
    del fates[2]
    assert dict(fates) == {0: "unpaired", 5: "row"}


def test_row_indexes_hold_their_rows_in_order() -> None:
    rows = RowIndexes([(3,), (1, 2)])
    rows.append((7, 8, 9))
    assert len(rows) == 3 and list(rows) == [(3,), (1, 2), (7, 8, 9)] and rows == [(3,), (1, 2), (7, 8, 9)]
