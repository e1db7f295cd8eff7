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
    RetryPolicy,
    RunOutcome,
    TickPlan,
    plan_tick,
    read_cursor,
    request_counts,
)
from rollout_assets.sources.fingerprint import RoundFingerprint

NOW = 1_800_000_000.0
QUIET = 120
RETRIES = RetryPolicy(max_retries=2, backoff_seconds=60)
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
    outcomes=lambda run_keys: {},
    now: float = NOW,
) -> TickPlan:
    return plan_tick(
        rounds,
        cursor,
        partitions=partitions,
        now=now,
        quiet_period=QUIET,
        materialized=materialized,
        run_keys=run_keys,
        outcomes=outcomes,
        retry_policy=RETRIES,
    )


def test_a_new_round_is_requested_and_its_partition_added() -> None:
    ticked = plan(found(round_001=("d1", 600)))

    assert [(r.key, r.run_key, r.out_dir) for r in ticked.requests] == [
        (ROUND, f"{ROUND}:d1:1", Path("/rounds", ROUND))
    ]
    assert ticked.requests[0].last_written == NOW - 600
    assert ticked.new_partitions == [ROUND]
    assert ticked.skip_reason is None
    assert json.loads(ticked.cursor) == {
        "rounds": {ROUND: "d1"},
        "requests": {ROUND: 1},
        "missing": [],
        "pending": {ROUND: f"{ROUND}:d1:1"},  # until its run is seen to end
    }


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


# ---------------------------------------------------------------------------
# Following a request's run: retries of a run that failed for a reason that may pass
# ---------------------------------------------------------------------------

RUN_KEY_1 = f"{ROUND}:d1:1"
BUSY = "round round-001 is being materialized by run other (process 7) right now (lock /l/.run.lock)"
REQUESTED = Cursor({ROUND: "d1"}, {ROUND: 1}, pending={ROUND: RUN_KEY_1})
AT_REST = found(round_001=("d1", 600))


def ended(run_id: str, *, may_pass: bool, reason: str = BUSY) -> RunOutcome:
    return RunOutcome(run_id, finished=True, may_pass=may_pass, reason=reason)


def outcomes_of(**outcomes: RunOutcome):
    """`outcomes` answering for run keys; the keys asked are recorded in `.asked`."""

    def answer(run_keys: list[str]) -> dict[str, RunOutcome]:
        answer.asked.append(list(run_keys))
        return {key: outcome for key, outcome in outcomes.items() if key in run_keys}

    answer.asked = []
    return answer


def at_rest(cursor: Cursor, *, now: float = NOW, **kwargs) -> TickPlan:
    return plan(AT_REST, cursor, partitions=frozenset({ROUND}), now=now, **kwargs)


def test_a_failure_that_may_pass_schedules_a_retry_and_the_tick_that_sees_it_requests_nothing() -> None:
    answer = outcomes_of(**{RUN_KEY_1: ended("run-1", may_pass=True)})

    seen = at_rest(REQUESTED, outcomes=answer, run_keys=unasked)

    assert answer.asked == [[RUN_KEY_1]]
    assert seen.requests == []
    assert seen.skip_reason == "no new or changed rounds; 1 to retry later"
    assert seen.log == [
        (logging.INFO, f"round {ROUND}: run run-1 failed ({BUSY}), which may pass; retry 1 of 2 in 60 s")
    ]
    assert json.loads(seen.cursor) == {
        "rounds": {ROUND: "d1"},
        "requests": {ROUND: 1},
        "missing": [],
        "retry_at": {ROUND: NOW + 60},
    }


def test_a_scheduled_retry_is_requested_once_due_with_a_new_run_key() -> None:
    scheduled = Cursor({ROUND: "d1"}, {ROUND: 1}, retry_at={ROUND: NOW + 60})

    early = at_rest(scheduled, now=NOW + 59, outcomes=unasked, run_keys=unasked, materialized=unasked)
    due = at_rest(scheduled, now=NOW + 60, outcomes=unasked)

    assert (early.requests, early.skip_reason) == ([], "no new or changed rounds; 1 to retry later")
    assert read_cursor(early.cursor) == scheduled
    assert [(r.run_key, r.retry) for r in due.requests] == [(f"{ROUND}:d1:2", 1)]
    assert due.new_partitions == []
    assert read_cursor(due.cursor) == Cursor(
        {ROUND: "d1"}, {ROUND: 2}, pending={ROUND: f"{ROUND}:d1:2"}, retries={ROUND: 1}
    )


def test_retries_stop_after_the_policys_number_with_a_warning() -> None:
    # Every run fails for a reason that may pass; a tick an hour, past any backoff.
    cursor, now, outcomes = REQUESTED, NOW, {}
    retried, log = [], []
    for _ in range(8):
        if cursor.pending:
            outcomes[cursor.pending[ROUND]] = ended(f"run-{len(outcomes) + 1}", may_pass=True)
        ticked = at_rest(cursor, now=now, outcomes=outcomes_of(**outcomes))
        retried += [request.retry for request in ticked.requests]
        log += ticked.log
        cursor, now = read_cursor(ticked.cursor), now + 3600

    assert retried == [1, 2]  # RETRIES.max_retries
    assert log[-1] == (
        logging.WARNING,
        f"round {ROUND}: run run-3 failed ({BUSY}), which may pass, but after 2 retries of the same inputs it "
        "runs again only once its inputs change",
    )
    assert cursor == Cursor({ROUND: "d1"}, {ROUND: 3}, retries={ROUND: 2})
    # From then on the round is at rest: nothing is asked of the instance.
    again = at_rest(cursor, now=now, outcomes=unasked, run_keys=unasked, materialized=unasked)
    assert (again.requests, again.skip_reason) == ([], "no new or changed rounds")


def test_the_backoff_doubles_with_each_retry() -> None:
    assert [RETRIES.delay(made) for made in range(3)] == [60, 120, 240]
    cursor = Cursor({ROUND: "d1"}, {ROUND: 2}, pending={ROUND: f"{ROUND}:d1:2"}, retries={ROUND: 1})

    seen = at_rest(cursor, outcomes=outcomes_of(**{f"{ROUND}:d1:2": ended("run-2", may_pass=True)}))

    assert json.loads(seen.cursor)["retry_at"] == {ROUND: NOW + 120}
    assert seen.log[0][1].endswith("retry 2 of 2 in 120 s")


def test_a_run_that_failed_for_its_inputs_is_not_retried_until_they_change() -> None:
    corrupt = "round round-001: improve-run/loop-provenance.json is not JSON"
    seen = at_rest(
        REQUESTED, outcomes=outcomes_of(**{RUN_KEY_1: ended("run-1", may_pass=False, reason=corrupt)})
    )
    later = at_rest(read_cursor(seen.cursor), now=NOW + 3600, outcomes=unasked, run_keys=unasked)
    changed = plan(found(round_001=("d2", 600)), read_cursor(later.cursor), partitions=frozenset({ROUND}))

    assert seen.requests == later.requests == []
    assert seen.log == [
        (logging.INFO, f"round {ROUND}: run run-1 failed ({corrupt}); it runs again once its inputs change")
    ]
    assert seen.skip_reason == later.skip_reason == "no new or changed rounds"
    assert read_cursor(seen.cursor) == Cursor({ROUND: "d1"}, {ROUND: 1})
    assert [(r.run_key, r.retry) for r in changed.requests] == [(f"{ROUND}:d2:2", 0)]


def test_a_run_that_succeeded_ends_the_follow_up_and_its_retry_count() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 2}, pending={ROUND: f"{ROUND}:d1:2"}, retries={ROUND: 1})
    done = RunOutcome("run-2", finished=True, succeeded=True)

    seen = at_rest(cursor, outcomes=outcomes_of(**{f"{ROUND}:d1:2": done}))

    assert (seen.requests, seen.log, seen.skip_reason) == ([], [], "no new or changed rounds")
    assert read_cursor(seen.cursor) == Cursor({ROUND: "d1"}, {ROUND: 2})


@pytest.mark.parametrize(
    "outcome", [None, RunOutcome("run-1", finished=False)], ids=["not created yet", "in progress"]
)
def test_a_request_whose_run_has_not_ended_stays_pending(outcome: RunOutcome | None) -> None:
    answer = outcomes_of(**({RUN_KEY_1: outcome} if outcome else {}))

    ticked = at_rest(REQUESTED, outcomes=answer)

    assert answer.asked == [[RUN_KEY_1]]
    assert (ticked.requests, ticked.log, ticked.skip_reason) == ([], [], "no new or changed rounds")
    assert read_cursor(ticked.cursor) == REQUESTED


def test_a_retry_is_dropped_when_another_run_materialized_the_inputs_meanwhile() -> None:
    scheduled = Cursor({ROUND: "d1"}, {ROUND: 1}, retry_at={ROUND: NOW}, retries={})

    ticked = at_rest(scheduled, materialized=lambda key: "d1", run_keys=unasked)

    assert (ticked.requests, ticked.skip_reason) == ([], "no new or changed rounds")
    assert read_cursor(ticked.cursor) == Cursor({ROUND: "d1"}, {ROUND: 1})


def test_a_changed_round_starts_again_with_no_retries_made() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 3}, retries={ROUND: 2}, retry_at={ROUND: NOW + 500})

    ticked = plan(found(round_001=("d2", 600)), cursor, partitions=frozenset({ROUND}))

    assert [(r.run_key, r.retry) for r in ticked.requests] == [(f"{ROUND}:d2:4", 0)]
    assert read_cursor(ticked.cursor) == Cursor({ROUND: "d2"}, {ROUND: 4}, pending={ROUND: f"{ROUND}:d2:4"})


def test_a_cursor_with_pending_requests_and_retries_is_read_back() -> None:
    cursor = Cursor({ROUND: "d1"}, {ROUND: 2}, frozenset(), {ROUND: "k"}, {ROUND: 1}, {"other": NOW + 0.5})

    assert read_cursor(cursor.to_json()) == cursor
    with pytest.raises(CursorError, match=r"its 'retry_at' is not an object of float values by round"):
        read_cursor('{"rounds": {}, "retry_at": {"r": "soon"}}')


def test_a_retry_without_delay_still_waits_for_the_next_tick() -> None:
    at_once = RetryPolicy(max_retries=2, backoff_seconds=0)
    seen = plan_tick(
        AT_REST,
        REQUESTED,
        partitions=frozenset({ROUND}),
        now=NOW,
        quiet_period=QUIET,
        materialized=lambda key: None,
        run_keys=lambda: [],
        outcomes=outcomes_of(**{RUN_KEY_1: ended("run-1", may_pass=True)}),
        retry_policy=at_once,
    )

    assert (seen.requests, json.loads(seen.cursor)["retry_at"]) == ([], {ROUND: NOW})
