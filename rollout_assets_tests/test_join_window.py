"""Joining a proposer shot to its Claude transcript by time window (docs/input-formats.md §6), on real files."""

from pathlib import Path
from typing import Any

import pytest

from rollout_assets.backfill.join import choose_transcript
from rollout_assets.sources.claude import ClaudeTranscript, read_transcript
from rollout_assets_tests.builders import assistant_line, user_line, write_transcript

STARTED = "2025-01-01T10:00:00.000Z"
COMPLETED = "2025-01-01T10:30:00.000Z"
RECEIPT = {"startedAt": STARTED, "completedAt": COMPLETED}


def transcript_at(tmp_path: Path, name: str, start: str | None) -> ClaudeTranscript:
    """A real transcript file whose first main-thread line is stamped `start` (None: no stamp)."""
    path = write_transcript(
        tmp_path / f"{name}.jsonl",
        [
            user_line("go", timestamp=start),
            assistant_line(f"msg_{name}", [{"type": "text", "text": "ok"}], timestamp=start),
        ],
    )
    return read_transcript(path)


def chosen(candidates: list[ClaudeTranscript], receipt: dict[str, Any] | None) -> str | None:
    match = choose_transcript(candidates, receipt)
    return None if match is None else match.path.stem


# ---------------------------------------------------------------------------
# The window: 120 s of slack before startedAt and after completedAt, both inclusive
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("2025-01-01T09:57:59.999Z", None),
        ("2025-01-01T09:58:00.000Z", "t"),
        ("2025-01-01T10:15:00.000Z", "t"),
        ("2025-01-01T10:32:00.000Z", "t"),
        ("2025-01-01T10:32:00.001Z", None),
    ],
    ids=["1ms-before-slack", "start-boundary", "inside", "end-boundary", "1ms-after-slack"],
)
def test_a_transcript_qualifies_only_inside_the_slackened_window(
    tmp_path: Path, start: str, expected: str | None
) -> None:
    assert chosen([transcript_at(tmp_path, "t", start)], RECEIPT) == expected


def test_window_boundaries_hold_for_offset_timestamps(tmp_path: Path) -> None:
    candidate = transcript_at(tmp_path, "t", "2025-01-01T11:58:00.000+02:00")

    assert chosen([candidate], RECEIPT) == "t"


def test_the_transcript_starting_closest_to_started_at_wins(tmp_path: Path) -> None:
    candidates = [
        transcript_at(tmp_path, "a", "2025-01-01T09:59:00.000Z"),
        transcript_at(tmp_path, "b", "2025-01-01T10:00:30.000Z"),
        transcript_at(tmp_path, "c", "2025-01-01T10:20:00.000Z"),
    ]

    assert chosen(candidates, RECEIPT) == "b"


def test_on_a_tie_the_first_candidate_in_order_wins(tmp_path: Path) -> None:
    candidates = [
        transcript_at(tmp_path, "late", "2025-01-01T10:01:00.000Z"),
        transcript_at(tmp_path, "early", "2025-01-01T09:59:00.000Z"),
    ]

    assert chosen(candidates, RECEIPT) == "late"


def test_candidates_outside_the_window_never_win_even_when_closer(tmp_path: Path) -> None:
    candidates = [
        transcript_at(tmp_path, "before", "2025-01-01T09:57:00.000Z"),
        transcript_at(tmp_path, "inside", "2025-01-01T10:29:00.000Z"),
    ]

    assert chosen(candidates, RECEIPT) == "inside"


def test_no_candidate_in_the_window_gives_none(tmp_path: Path) -> None:
    candidates = [transcript_at(tmp_path, "a", "2025-01-02T10:00:00.000Z")]

    assert chosen(candidates, RECEIPT) is None


def test_no_candidates_give_none() -> None:
    assert chosen([], RECEIPT) is None


def test_transcripts_without_a_start_are_skipped(tmp_path: Path) -> None:
    candidates = [transcript_at(tmp_path, "unstamped", None), transcript_at(tmp_path, "stamped", STARTED)]

    assert chosen(candidates, RECEIPT) == "stamped"


def test_a_transcript_with_an_unparseable_start_is_not_in_a_valid_window(tmp_path: Path) -> None:
    candidates = [transcript_at(tmp_path, "t", "yesterday")]

    assert chosen(candidates, RECEIPT) is None


# ---------------------------------------------------------------------------
# Without a valid window: only an only candidate qualifies
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "receipt",
    [
        None,
        {},
        {"startedAt": STARTED},
        {"completedAt": COMPLETED},
        {"startedAt": "not a time", "completedAt": COMPLETED},
        {"startedAt": STARTED, "completedAt": 1735725600000},
    ],
    ids=["no-receipt", "no-times", "no-completed", "no-started", "garbage-started", "numeric-completed"],
)
def test_without_valid_receipt_times_the_only_candidate_qualifies_whenever_it_started(
    tmp_path: Path, receipt: dict[str, Any] | None
) -> None:
    candidates = [transcript_at(tmp_path, "only", "2020-06-01T00:00:00.000Z")]

    assert chosen(candidates, receipt) == "only"


def test_without_valid_receipt_times_two_candidates_give_none(tmp_path: Path) -> None:
    candidates = [transcript_at(tmp_path, "a", STARTED), transcript_at(tmp_path, "b", COMPLETED)]

    assert chosen(candidates, {"startedAt": STARTED}) is None


def test_without_valid_receipt_times_an_unstamped_candidate_still_counts_against_the_only_one(
    tmp_path: Path,
) -> None:
    # As the seed: "only candidate" counts every candidate file, stamped or not.
    candidates = [transcript_at(tmp_path, "unstamped", None), transcript_at(tmp_path, "stamped", STARTED)]

    assert chosen(candidates, None) is None


def test_without_valid_receipt_times_an_only_unstamped_candidate_gives_none(tmp_path: Path) -> None:
    assert chosen([transcript_at(tmp_path, "unstamped", None)], None) is None


def test_without_valid_receipt_times_an_only_candidate_with_an_unparseable_start_qualifies(
    tmp_path: Path,
) -> None:
    assert chosen([transcript_at(tmp_path, "odd", "yesterday")], None) == "odd"


def test_receipt_times_are_read_as_date_parse_reads_them(tmp_path: Path) -> None:
    # `date -R` and toUTCString() write RFC 1123; fromisoformat refuses it, which made a shot
    # with two candidate transcripts a gap where the seed joined the one in the window.
    receipt = {"startedAt": "Wed, 01 Jan 2025 10:00:00 GMT", "completedAt": "Wed, 01 Jan 2025 10:30:00 +0000"}
    inside = transcript_at(tmp_path, "inside", "2025-01-01T10:00:05.000Z")
    outside = transcript_at(tmp_path, "outside", "2025-01-01T12:00:00.000Z")

    assert chosen([outside, inside], receipt) == "inside"


# ---------------------------------------------------------------------------
# One-to-one: a transcript joins at most one shot; the closest in time wins
# ---------------------------------------------------------------------------


def test_two_shots_whose_windows_cover_the_same_transcripts_take_one_each(tmp_path: Path) -> None:
    from rollout_assets.backfill.join import assign_transcripts

    # Shot 1 ran 10:00-10:30, shot 2 10:31-10:50: both windows (±120 s) cover both files.
    early = transcript_at(tmp_path, "a-early", "2025-01-01T10:30:30.000Z")
    late = transcript_at(tmp_path, "b-late", "2025-01-01T10:31:10.000Z")
    shot1 = {"startedAt": "2025-01-01T10:29:00.000Z", "completedAt": "2025-01-01T10:30:50.000Z"}
    shot2 = {"startedAt": "2025-01-01T10:31:00.000Z", "completedAt": "2025-01-01T10:50:00.000Z"}

    # Both files are in both windows: each shot takes one, its closest (90 s, 10 s).
    assert chosen([early, late], shot2) == "b-late"
    chosen_pair = assign_transcripts([early, late], [shot1, shot2])

    assert [t.path.stem if t else None for t in chosen_pair] == ["a-early", "b-late"]


def test_the_shot_that_loses_its_closest_transcript_takes_its_next_candidate(tmp_path: Path) -> None:
    from rollout_assets.backfill.join import assign_transcripts

    near = transcript_at(tmp_path, "a-near", "2025-01-01T10:00:05.000Z")
    far = transcript_at(tmp_path, "b-far", "2025-01-01T10:01:30.000Z")
    # Both shots' closest is a-near; shot 2 is closer to it (5 s vs 60 s) and wins it.
    shot1 = {"startedAt": "2025-01-01T09:59:05.000Z", "completedAt": "2025-01-01T10:05:00.000Z"}
    shot2 = {"startedAt": "2025-01-01T10:00:00.000Z", "completedAt": "2025-01-01T10:05:00.000Z"}
    assert chosen([near, far], shot1) == "a-near"

    pair = assign_transcripts([near, far], [shot1, shot2])

    assert [t.path.stem if t else None for t in pair] == ["b-far", "a-near"]


def test_a_shot_left_without_a_free_transcript_is_unjoined(tmp_path: Path) -> None:
    from rollout_assets.backfill.join import assign_transcripts

    only = transcript_at(tmp_path, "only", "2025-01-01T10:00:05.000Z")

    pair = assign_transcripts([only], [RECEIPT, RECEIPT])

    assert [t.path.stem if t else None for t in pair] == ["only", None]
