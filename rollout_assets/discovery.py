"""What `round_dirs_sensor` decides on a tick: which rounds to request, which partitions to add,
what to log, and the cursor to keep. No Dagster here.

`plan_tick` decides from what the tick found under the rounds root (each round's fingerprint),
the cursor, the partitions the instance knows, the time, the quiet period, and two questions
of the instance, asked only when the decision needs them (queries cost): the inputs a round's
ledger was built from, and the run keys of the sensor's runs. The sensor
(`rollout_assets.defs.sensors`) lists the rounds root, fingerprints the rounds
(`fingerprint_rounds`), asks, and turns the plan into Dagster's requests.

Policy:
- A new round (no partition yet) or a changed one (its fingerprint differs from the one last
  requested) is requested once its newest input file or folder is older than the quiet period;
  a round still being written waits. A round whose ledger, as it stands, was built from its
  current inputs (by `rollout-assets materialize`, say) is not requested again.
- A round the round reader refuses is requested all the same, once per distinct error, so its
  run fails saying which files are wrong (`unreadable_round_fingerprint`).
- A round whose partition was deleted while its directory stays gets its partition back, without a run.
- A round whose directory disappeared keeps its partition and ledger; the log says so, once.
- Run keys are `<round>:<fingerprint>:<n>`, n one more than both the cursor's count of the
  round's requests and the highest n among the sensor's runs of the round: Dagster skips a
  request whose run key was used before, without a word, so neither a round changed back to
  an earlier state (A -> B -> A) nor a cursor deleted, older or set back may repeat a key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.sources.fingerprint import (
    RoundFingerprint,
    fingerprint_round,
    unreadable_round_fingerprint,
)
from rollout_assets.sources.round import RoundInputError

SENSOR_NAME = "round_dirs_sensor"


@dataclass(frozen=True)
class RoundDirs:
    """What listing the rounds root found."""

    rounds: dict[str, Path] = field(default_factory=dict)  # valid round directories by partition key
    unreadable: frozenset[str] = frozenset()  # entries that could not be looked into: not gone
    root_problem: str | None = None  # why the rounds root itself cannot be listed


@dataclass(frozen=True)
class FoundRound:
    """A round found under the rounds root."""

    out_dir: Path
    fingerprint: RoundFingerprint  # of its inputs, as the tick found them


@dataclass(frozen=True)
class FoundRounds:
    """The rounds a tick found under the rounds root."""

    rounds: Mapping[str, FoundRound]  # by partition key
    unreadable: AbstractSet[str] = frozenset()  # there, but not looked into this tick: not gone


def fingerprint_rounds(dirs: RoundDirs, warn: Callable[[str], Any]) -> FoundRounds:
    """Every round listed, with its fingerprint; a round that cannot be fingerprinted is skipped
    this tick with a warning (and is not taken for gone)."""
    found: dict[str, FoundRound] = {}
    skipped = set(dirs.unreadable)
    for key, out_dir in dirs.rounds.items():
        try:
            found[key] = FoundRound(out_dir, fingerprint_round(out_dir))
        except RoundInputError as error:
            # Evidence the round reader refuses: skipping would hide the round for ever, so
            # its run is requested and fails saying which files are wrong.
            warn(f"round {key} cannot be read as it is: {error}")
            found[key] = FoundRound(out_dir, unreadable_round_fingerprint(out_dir, error))
        except (OSError, ValueError) as error:  # unreadable, vanished mid-scan, or unnameable
            warn(f"skipping round {key}: {error}")
            skipped.add(key)
    return FoundRounds(found, frozenset(skipped))


# -- the cursor -------------------------------------------------------------------


class CursorError(ValueError):
    """The sensor's cursor is not the JSON it writes."""


_CURSOR_HELP = (
    f"delete it (`dagster sensor cursor {SENSOR_NAME} --delete -w workspace.yaml`, or in the UI): "
    "the next tick rebuilds it, taking the request counts from this sensor's runs"
)


@dataclass(frozen=True)
class Cursor:
    """What the sensor keeps between ticks, as JSON `{"rounds": {round: fingerprint last
    requested}, "requests": {round: requests made}, "missing": [rounds already logged as gone]}`,
    so a restart neither re-runs unchanged rounds nor misses changed ones."""

    requested: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    missing: AbstractSet[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps(
            {
                "rounds": dict(self.requested),
                "requests": dict(self.requests),
                "missing": sorted(self.missing),
            },
            sort_keys=True,
        )


def _str_mapping(value: Any, what: str, value_type: type) -> dict:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and type(item) is value_type for key, item in value.items()
    ):
        raise CursorError(f"its {what!r} is not an object of {value_type.__name__} values by round")
    return dict(value)


def read_cursor(text: str | None) -> Cursor:
    """The cursor (empty when there is none); CursorError naming the cursor and the way out when
    it is not what this sensor writes (edited by hand, say)."""
    if not text:
        return Cursor()
    try:
        cursor = json.loads(text)
        if not isinstance(cursor, dict):
            raise CursorError("it is not a JSON object")
        requested = _str_mapping(cursor.get("rounds", {}), "rounds", str)
        counts = _str_mapping(cursor.get("requests", {}), "requests", int)
        missing = cursor.get("missing", [])
        if not isinstance(missing, list) or not all(isinstance(key, str) for key in missing):
            raise CursorError("its 'missing' is not a list of rounds")
    except (ValueError, RecursionError) as error:  # CursorError and json's own errors
        raise CursorError(f"the cursor of {SENSOR_NAME} cannot be read ({error}): {_CURSOR_HELP}") from error
    return Cursor(requested, counts, frozenset(missing))


def request_counts(run_keys: Iterable[str]) -> dict[str, int]:
    """The highest request number n by round among run keys `<round>:<fingerprint>:<n>`. Other
    keys (`<round>:<fingerprint>`, from before requests were counted; none) are left out."""
    counts: dict[str, int] = {}
    for run_key in run_keys:
        parts = run_key.split(":")
        if len(parts) == 3 and parts[2].isascii() and parts[2].isdigit():
            counts[parts[0]] = max(counts.get(parts[0], 0), int(parts[2]))
    return counts


# -- the decision -----------------------------------------------------------------


@dataclass(frozen=True)
class RoundRequest:
    """A run of one round, and the observation of its outDir that goes with it."""

    key: str
    run_key: str  # `<round>:<fingerprint>:<n>`
    out_dir: Path
    fingerprint: RoundFingerprint
    last_written: float  # the newest input mtime the quiet period went by


@dataclass(frozen=True)
class TickPlan:
    """What a tick does."""

    requests: list[RoundRequest]
    new_partitions: list[str]  # new rounds, and rounds whose partition was deleted
    log: list[tuple[int, str]]  # (logging level, message), in order
    cursor: str  # the cursor's JSON after this tick
    skip_reason: str | None  # set when the tick neither requests a run nor adds a partition


def _last_written(key: str, fingerprint: RoundFingerprint, now: float, quiet_period: int, log: list) -> float:
    # An entry dated ahead of our clock by less than the quiet period may have been written
    # just now by a machine whose clock runs a little fast: it counts, and the round waits.
    # One dated further ahead would keep the round waiting for ever: it is left out (with a
    # warning), and the other entries still decide. The folders' mtimes are read here, only
    # for a round about to be requested.
    last_written, ahead = fingerprint.last_written(now + quiet_period)
    if ahead:
        log.append((
            logging.WARNING,
            f"round {key}: an input file or folder is dated {ahead + quiet_period:.0f} s in the future;"
            " the quiet period leaves it out",
        ))  # fmt: skip
    return last_written


def _closing_log(
    gone: list[str], waiting: list[str], readded: list[str], quiet_period: int
) -> list[tuple[int, str]]:
    """What a tick says, after its rounds, about rounds newly gone, waiting, and added again."""
    gone_line = "round {}: directory disappeared; its partition and ledger are left in place"
    waiting_line = "round {}: inputs changed less than " + f"{quiet_period} s ago; waiting"
    readded_line = "round {}: its partition was deleted while its directory stays; adding it again"
    log = [(logging.WARNING, gone_line.format(key)) for key in gone]
    log += [(logging.INFO, waiting_line.format(key)) for key in waiting]
    log += [(logging.INFO, readded_line.format(key)) for key in readded]
    return log


def plan_tick(
    found: FoundRounds,
    cursor: Cursor,
    *,
    partitions: AbstractSet[str],
    now: float,
    quiet_period: int,
    materialized: Callable[[str], str | None],
    run_keys: Callable[[], Iterable[str]],
) -> TickPlan:
    """The tick's requests, partitions to add, log lines and new cursor (see the module's policy).

    `materialized(round)` is the fingerprint of the inputs the round's ledger, as it stands, was
    built from (None when unknown); `run_keys()` the run keys of the sensor's runs. Each is asked
    only when the decision needs it: the first for a changed round with a partition, the second
    once, for the first request."""
    requested, counts = dict(cursor.requested), dict(cursor.requests)
    counts_in_runs: dict[str, int] | None = None
    requests: list[RoundRequest] = []
    new_partitions, waiting, readded = [], [], []
    log: list[tuple[int, str]] = []
    for key, round_found in found.rounds.items():
        fingerprint = round_found.fingerprint
        has_partition = key in partitions
        unchanged = requested.get(key) == fingerprint.digest
        if not unchanged and has_partition and materialized(key) == fingerprint.digest:
            requested[key] = fingerprint.digest
            unchanged = True
        if unchanged:
            if not has_partition:  # deleted in the UI while its directory stays
                new_partitions.append(key)
                readded.append(key)
            continue
        last_written = _last_written(key, fingerprint, now, quiet_period, log)
        if now - last_written < quiet_period:
            waiting.append(key)
            continue
        if not has_partition:
            new_partitions.append(key)
        if counts_in_runs is None:
            counts_in_runs = request_counts(run_keys())
        counts[key] = max(counts.get(key, 0), counts_in_runs.get(key, 0)) + 1
        run_key = f"{key}:{fingerprint.digest}:{counts[key]}"
        requests.append(RoundRequest(key, run_key, round_found.out_dir, fingerprint, last_written))
        requested[key] = fingerprint.digest
    # A round whose folder could not be looked into is still there: skipped with its warning.
    missing = {key for key in requested if key not in found.rounds and key not in found.unreadable}
    log += _closing_log(sorted(missing - cursor.missing), waiting, readded, quiet_period)
    skip_reason = None
    if not requests and not new_partitions:
        skip_reason = "no new or changed rounds" + (f"; {len(waiting)} still settling" if waiting else "")
    return TickPlan(requests, new_partitions, log, Cursor(requested, counts, missing).to_json(), skip_reason)
