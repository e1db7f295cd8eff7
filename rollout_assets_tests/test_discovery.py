"""The sensor's decision (`rollout_assets.discovery.plan_tick`) on its own: no Dagster instance,
no files; rounds are given by their fingerprints and the instance's answers as functions."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rollout_assets.discovery import (
    Cursor,
    CursorError,
    FoundRound,
    FoundRounds,
    TickPlan,
    plan_tick,
    read_cursor,
    request_counts,
)
from rollout_assets.sources.fingerprint import RoundFingerprint

NOW = 1_800_000_000.0
QUIET = 120
ROUND = "round-001"


def found(**digests_and_ages: tuple[str, float]) -> FoundRounds:
    """Rounds by key, each (digest, seconds since its newest input file was written)."""
    rounds = {}
    for name, (digest, age) in digests_and_ages.items():
        key = name.replace("_", "-")
        rounds[key] = FoundRound(Path("/rounds", key), RoundFingerprint(digest, 1, 1, 0, (NOW - age,)))
    return FoundRounds(rounds)


def unasked(*_: object) -> None:
    raise AssertionError("the instance was asked a question the decision does not need")


def plan(
    rounds: FoundRounds,
    cursor: Cursor = Cursor(),
    *,
    partitions: frozenset[str] = frozenset(),
    materialized=lambda key: None,
    run_keys=lambda: [],
) -> TickPlan:
    return plan_tick(
        rounds,
        cursor,
        partitions=partitions,
        now=NOW,
        quiet_period=QUIET,
        materialized=materialized,
        run_keys=run_keys,
    )


def test_a_new_round_is_requested_and_its_partition_added() -> None:
    ticked = plan(found(round_001=("d1", 600)))

    assert [(r.key, r.run_key, r.out_dir) for r in ticked.requests] == [
        (ROUND, f"{ROUND}:d1:1", Path("/rounds", ROUND))
    ]
    assert ticked.requests[0].last_written == NOW - 600
    assert ticked.new_partitions == [ROUND]
    assert ticked.skip_reason is None
    assert json.loads(ticked.cursor) == {"rounds": {ROUND: "d1"}, "requests": {ROUND: 1}, "missing": []}


def test_a_changed_round_gets_its_next_request_number_and_no_new_partition() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 1})

    ticked = plan(found(round_001=("d2", 600)), cursor, partitions=frozenset({ROUND}))

    assert [r.run_key for r in ticked.requests] == [f"{ROUND}:d2:2"]
    assert ticked.new_partitions == []
    assert json.loads(ticked.cursor)["rounds"] == {ROUND: "d2"}
    assert cursor == Cursor({ROUND: "d1"}, {ROUND: 1})  # the input is left as it was


def test_an_unchanged_round_is_skipped_without_asking_the_instance() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 1})

    ticked = plan(
        found(round_001=("d1", 600)),
        cursor,
        partitions=frozenset({ROUND}),
        materialized=unasked,
        run_keys=unasked,
    )

    assert (ticked.requests, ticked.new_partitions, ticked.log) == ([], [], [])
    assert ticked.skip_reason == "no new or changed rounds"
    assert ticked.cursor == cursor.to_json()


def test_a_round_inside_its_quiet_period_waits() -> None:
    ticked = plan(found(round_001=("d1", 10)), run_keys=unasked)

    assert ticked.requests == [] and ticked.new_partitions == []
    assert ticked.skip_reason == "no new or changed rounds; 1 still settling"
    assert ticked.log == [(logging.INFO, f"round {ROUND}: inputs changed less than {QUIET} s ago; waiting")]
    assert json.loads(ticked.cursor) == {"rounds": {}, "requests": {}, "missing": []}


def test_a_file_dated_far_ahead_is_left_out_of_the_quiet_period_with_a_warning() -> None:
    rounds = FoundRounds(
        {ROUND: FoundRound(Path("/r"), RoundFingerprint("d1", 2, 1, 0, (NOW - 600, NOW + 3600)))}
    )

    ticked = plan(rounds)

    assert [r.run_key for r in ticked.requests] == [f"{ROUND}:d1:1"]
    assert ticked.log == [
        (
            logging.WARNING,
            f"round {ROUND}: an input file or folder is dated 3600 s in the future; the quiet period leaves it out",
        )
    ]


def test_a_round_whose_ledger_holds_its_current_inputs_is_not_requested() -> None:
    """Materialized already (by `rollout-assets materialize`, say): remembered, not run again."""
    asked: list[str] = []

    def materialized(key: str) -> str:
        asked.append(key)
        return "d1"

    ticked = plan(
        found(round_001=("d1", 600)),
        partitions=frozenset({ROUND}),
        materialized=materialized,
        run_keys=unasked,
    )

    assert asked == [ROUND]
    assert ticked.requests == []
    assert ticked.skip_reason == "no new or changed rounds"
    assert json.loads(ticked.cursor) == {"rounds": {ROUND: "d1"}, "requests": {}, "missing": []}


def test_a_ledger_of_other_inputs_does_not_stop_the_request() -> None:
    ticked = plan(found(round_001=("d2", 600)), partitions=frozenset({ROUND}), materialized=lambda key: "d1")

    assert [r.run_key for r in ticked.requests] == [f"{ROUND}:d2:1"]


def test_the_request_number_exceeds_every_one_in_the_sensors_run_keys_and_bad_keys_are_left_out() -> None:
    run_keys = [
        f"{ROUND}:d1:3",
        f"{ROUND}:d0",
        f"{ROUND}:d1:x",
        f"{ROUND}:d1:²",
        "",
        "other:d9:7",
        f"{ROUND}:a:b:4",
    ]

    ticked = plan(found(round_001=("d1", 600)), Cursor({}, {ROUND: 1}), run_keys=lambda: run_keys)

    assert [r.run_key for r in ticked.requests] == [f"{ROUND}:d1:4"]
    assert request_counts(run_keys) == {ROUND: 3, "other": 7}


def test_the_sensors_run_keys_are_read_once_a_tick() -> None:
    reads: list[int] = []

    def run_keys() -> list[str]:
        reads.append(1)
        return []

    ticked = plan(found(round_001=("d1", 600), round_002=("d2", 600)), run_keys=run_keys)

    assert [r.run_key for r in ticked.requests] == ["round-001:d1:1", "round-002:d2:1"]
    assert reads == [1]


def test_a_deleted_partition_of_an_unchanged_round_is_added_again_without_a_run() -> None:
    ticked = plan(found(round_001=("d1", 600)), Cursor({ROUND: "d1"}, {ROUND: 1}), run_keys=unasked)

    assert ticked.requests == []
    assert ticked.new_partitions == [ROUND]
    assert ticked.skip_reason is None
    assert ticked.log == [
        (logging.INFO, f"round {ROUND}: its partition was deleted while its directory stays; adding it again")
    ]


def test_a_vanished_round_is_logged_once_and_kept_in_the_cursor() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 1})

    first = plan(FoundRounds({}), cursor)
    second = plan(FoundRounds({}), read_cursor(first.cursor))

    assert first.log == [
        (logging.WARNING, f"round {ROUND}: directory disappeared; its partition and ledger are left in place")
    ]
    assert json.loads(first.cursor) == {"rounds": {ROUND: "d1"}, "requests": {ROUND: 1}, "missing": [ROUND]}
    assert (second.log, second.cursor) == ([], first.cursor)


def test_a_round_not_looked_into_this_tick_is_not_taken_for_gone() -> None:
    ticked = plan(FoundRounds({}, unreadable=frozenset({ROUND})), Cursor({ROUND: "d1"}, {ROUND: 1}))

    assert ticked.log == []
    assert json.loads(ticked.cursor)["missing"] == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, Cursor()),
        ("", Cursor()),
        ('{"rounds": {"r": "d"}, "missing": []}', Cursor({"r": "d"}, {}, frozenset())),
        (
            '{"rounds": {"r": "d"}, "requests": {"r": 2}, "missing": ["g"]}',
            Cursor({"r": "d"}, {"r": 2}, frozenset({"g"})),
        ),
    ],
)
def test_a_cursor_it_wrote_is_read_back(text: str | None, expected: Cursor) -> None:
    assert read_cursor(text) == expected


def test_a_cursor_of_another_shape_is_refused() -> None:
    with pytest.raises(
        CursorError, match=r"^the cursor of round_dirs_sensor cannot be read \(it is not a JSON object\)"
    ):
        read_cursor("[]")
