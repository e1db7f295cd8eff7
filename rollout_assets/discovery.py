"""What `round_dirs_sensor` decides on a tick: which rounds to request, which partitions to add,
what to log, and the cursor to keep. No Dagster here.

`plan_tick` decides from what the tick found under the rounds root (each round's fingerprint),
the cursor, the partitions the instance knows, the time, the quiet period, the retry policy,
and three questions of the instance, asked only when the decision needs them (queries cost):
the inputs a round's ledger was built from, the run keys of the sensor's runs, and how the
runs of its latest requests ended. The sensor
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
- A request stays pending until its run is seen to end. A run that failed for a reason that
  may pass (`RunOutcome.may_pass`: another run held the round, a store was busy, the run was
  interrupted) is retried with the same inputs, at most `RetryPolicy.max_retries` times per
  fingerprint: the tick that sees the failure schedules the retry, `RetryPolicy.delay` later
  (so never on that tick), and a round whose ledger meanwhile stands for its inputs is not
  retried. A run that failed for the round's own inputs (a corrupt file, a failed blocking
  check) or was terminated by hand is not: the round runs again once its inputs change.
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


@dataclass(frozen=True)
class RunOutcome:
    """How the run of one of the sensor's requests stands, as the instance knows it."""

    run_id: str
    finished: bool
    succeeded: bool = False
    may_pass: bool = False  # failed for a reason that says nothing of the round (see the policy)
    reason: str = ""  # why it failed: the failure's sentence, or a few words


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how long after the failure, a round whose run failed for a reason that
    may pass is run again with the same inputs."""

    max_retries: int = 3
    backoff_seconds: int = 60  # before the first retry; doubled for each retry made

    def delay(self, retries_made: int) -> float:
        return self.backoff_seconds * 2**retries_made


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
    requested}, "requests": {round: requests made}, "missing": [rounds already logged as gone],
    "pending": {round: run key of its latest request, until its run is seen to end},
    "retries": {round: retries made of the fingerprint last requested}, "retry_at": {round:
    when its retry is due}}`, so a restart neither re-runs unchanged rounds nor misses changed
    ones, nor forgets a retry. The last three are written only when not empty."""

    requested: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    missing: AbstractSet[str] = frozenset()
    pending: Mapping[str, str] = field(default_factory=dict)
    retries: Mapping[str, int] = field(default_factory=dict)
    retry_at: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        retrying = {"pending": self.pending, "retries": self.retries, "retry_at": self.retry_at}
        return json.dumps(
            {
                "rounds": dict(self.requested),
                "requests": dict(self.requests),
                "missing": sorted(self.missing),
                **{name: dict(value) for name, value in retrying.items() if value},
            },
            sort_keys=True,
        )


def _str_mapping(value: Any, what: str, *value_types: type) -> dict:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and type(item) in value_types for key, item in value.items()
    ):
        raise CursorError(f"its {what!r} is not an object of {value_types[0].__name__} values by round")
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
        pending = _str_mapping(cursor.get("pending", {}), "pending", str)
        retries = _str_mapping(cursor.get("retries", {}), "retries", int)
        retry_at = _str_mapping(cursor.get("retry_at", {}), "retry_at", float, int)
    except (ValueError, RecursionError) as error:  # CursorError and json's own errors
        raise CursorError(f"the cursor of {SENSOR_NAME} cannot be read ({error}): {_CURSOR_HELP}") from error
    return Cursor(requested, counts, frozenset(missing), pending, retries, retry_at)


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
    retry: int = 0  # 0 for a new or changed round; k for its k-th retry with the same inputs


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


@dataclass
class _Retries:
    """The cursor's record of requests whose run has not been seen to end, and of retries, as a
    tick updates it."""

    pending: dict[str, str]
    retries: dict[str, int]
    retry_at: dict[str, float]
    policy: RetryPolicy
    now: float

    def forget(self, key: str) -> None:
        """Nothing to follow up for the round: its ledger stands for its inputs, say."""
        for record in (self.pending, self.retries, self.retry_at):
            record.pop(key, None)

    def requested(self, key: str, run_key: str, retry: int) -> None:
        self.forget(key)
        self.pending[key] = run_key
        if retry:
            self.retries[key] = retry

    def follow_up(
        self,
        key: str,
        digest: str,
        outcome: RunOutcome | None,
        materialized: Callable[[str], str | None],
        log: list[tuple[int, str]],
    ) -> int | None:
        """For an unchanged round: take note of how its latest run ended (`outcome`, None when
        it has not); the number of the retry to request now, or None. A retry is never due on
        the tick that saw the failure, whatever the delay: the backoff is one tick at least."""
        if outcome is not None:
            line = self._run_ended(key, outcome)
            if line is not None:
                log.append(line)
            return None
        if key not in self.retry_at or self.now < self.retry_at[key]:
            return None
        if materialized(key) == digest:  # another run materialized these inputs meanwhile
            self.forget(key)
            return None
        return self.retries.get(key, 0) + 1

    def _run_ended(self, key: str, outcome: RunOutcome) -> tuple[int, str] | None:
        del self.pending[key]
        if outcome.succeeded:
            self.retries.pop(key, None)
            return None
        made = self.retries.get(key, 0)
        failed = f"round {key}: run {outcome.run_id} failed ({outcome.reason})"
        if not outcome.may_pass:
            return logging.INFO, f"{failed}; it runs again once its inputs change"
        if made >= self.policy.max_retries:
            return logging.WARNING, (
                f"{failed}, which may pass, but after {made} retries of the same inputs it runs again "
                "only once its inputs change"
            )
        delay = self.policy.delay(made)
        self.retry_at[key] = self.now + delay
        return logging.INFO, (
            f"{failed}, which may pass; retry {made + 1} of {self.policy.max_retries} in {delay:.0f} s"
        )


def _ended_runs(
    found: FoundRounds, cursor: Cursor, outcomes: Callable[[list[str]], Mapping[str, RunOutcome]]
) -> dict[str, RunOutcome]:
    """How the runs of the pending requests of unchanged rounds ended, by round; asked only when
    there are some. A run not yet created, or still queued or in progress, is left out."""
    keys = [
        key
        for key, round_found in found.rounds.items()
        if key in cursor.pending
        and key not in cursor.retry_at
        and cursor.requested.get(key) == round_found.fingerprint.digest
    ]
    if not keys:
        return {}
    by_run_key = outcomes([cursor.pending[key] for key in keys])
    ended = {key: by_run_key.get(cursor.pending[key]) for key in keys}
    return {key: outcome for key, outcome in ended.items() if outcome is not None and outcome.finished}


@dataclass
class _Requests:
    """A tick's requests, each numbered past every earlier request of its round."""

    counts: dict[str, int]  # requests made by round, this tick's included
    run_keys: Callable[[], Iterable[str]]
    made: list[RoundRequest] = field(default_factory=list)
    counts_in_runs: dict[str, int] | None = None  # read from the sensor's runs, once

    def add(self, key: str, round_found: FoundRound, last_written: float, retry: int) -> str:
        """Request a run of the round; its run key."""
        if self.counts_in_runs is None:
            self.counts_in_runs = request_counts(self.run_keys())
        self.counts[key] = max(self.counts.get(key, 0), self.counts_in_runs.get(key, 0)) + 1
        fingerprint = round_found.fingerprint
        run_key = f"{key}:{fingerprint.digest}:{self.counts[key]}"
        self.made.append(RoundRequest(key, run_key, round_found.out_dir, fingerprint, last_written, retry))
        return run_key


def plan_tick(
    found: FoundRounds,
    cursor: Cursor,
    *,
    partitions: AbstractSet[str],
    now: float,
    quiet_period: int,
    materialized: Callable[[str], str | None],
    run_keys: Callable[[], Iterable[str]],
    outcomes: Callable[[list[str]], Mapping[str, RunOutcome]],
    retry_policy: RetryPolicy = RetryPolicy(),
) -> TickPlan:
    """The tick's requests, partitions to add, log lines and new cursor (see the module's policy).

    `materialized(round)` is the fingerprint of the inputs the round's ledger, as it stands, was
    built from (None when unknown); `run_keys()` the run keys of the sensor's runs;
    `outcomes(run_keys)` how the runs of those keys stand, by run key. Each is asked only when
    the decision needs it: the first for a changed round with a partition or a retry that is
    due, the second once, for the first request, the third once, when a request is pending."""
    requested, requests = dict(cursor.requested), _Requests(dict(cursor.requests), run_keys)
    retries = _Retries(dict(cursor.pending), dict(cursor.retries), dict(cursor.retry_at), retry_policy, now)
    new_partitions, waiting, readded = [], [], []
    log: list[tuple[int, str]] = []
    ended = _ended_runs(found, cursor, outcomes)
    for key, round_found in found.rounds.items():
        fingerprint, retry = round_found.fingerprint, None
        has_partition = key in partitions
        unchanged = requested.get(key) == fingerprint.digest
        if not unchanged and has_partition and materialized(key) == fingerprint.digest:
            requested[key] = fingerprint.digest
            retries.forget(key)
            unchanged = True
        if unchanged:
            if not has_partition:  # deleted in the UI while its directory stays
                new_partitions.append(key)
                readded.append(key)
            retry = retries.follow_up(key, fingerprint.digest, ended.get(key), materialized, log)
            if retry is None:
                continue
        last_written = _last_written(key, fingerprint, now, quiet_period, log)
        if retry is None and now - last_written < quiet_period:  # a retry's inputs have not changed
            waiting.append(key)
            continue
        if not has_partition and retry is None:
            new_partitions.append(key)
        retries.requested(key, requests.add(key, round_found, last_written, retry or 0), retry or 0)
        requested[key] = fingerprint.digest
    # A round whose folder could not be looked into is still there: skipped with its warning.
    missing = {key for key in requested if key not in found.rounds and key not in found.unreadable}
    log += _closing_log(sorted(missing - cursor.missing), waiting, readded, quiet_period)
    skip_reason = None
    if not requests.made and not new_partitions:
        to_retry = sum(1 for key in retries.retry_at if key in found.rounds)
        skip_reason = "no new or changed rounds" + (f"; {len(waiting)} still settling" if waiting else "")
        skip_reason += f"; {to_retry} to retry later" if to_retry else ""
    after = Cursor(requested, requests.counts, missing, retries.pending, retries.retries, retries.retry_at)
    return TickPlan(requests.made, new_partitions, log, after.to_json(), skip_reason)
