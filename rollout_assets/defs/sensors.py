"""`round_dirs_sensor`: discovers new and changed rounds under the rounds root and materializes them."""

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    AssetSelection,
    AutomationConditionSensorDefinition,
    ConfigurableResource,
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from rollout_assets.defs.assets import FINGERPRINT_METADATA, FINGERPRINT_TAG, rollout_ledger, rollout_stats
from rollout_assets.defs.jobs import UNFINISHED_STATUSES, materialize_round, round_run
from rollout_assets.defs.partitions import ROUNDS, ROUNDS_PARTITIONS_NAME, round_key_problem
from rollout_assets.defs.resources import RoundsRoot, is_round_dir, seconds_from_environment
from rollout_assets.defs.summary import rounds_summary
from rollout_assets.sources.fingerprint import fingerprint_round, unreadable_round_fingerprint
from rollout_assets.sources.round import RoundInputError

SENSOR_INTERVAL_SECONDS = seconds_from_environment("ROLLOUT_SENSOR_INTERVAL_SECONDS", 60, minimum=1)


class RoundDiscovery(ConfigurableResource):
    """How the sensor waits for a round to settle before materializing it."""

    quiet_period_seconds: int = 120


def _latest_materialization(instance: DagsterInstance, asset: AssetKey, round_key: str) -> Any:
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset, asset_partitions=[round_key]), limit=1
    ).records
    return records[0] if records and records[0].asset_materialization is not None else None


def materialized_fingerprint(instance: DagsterInstance, round_key: str) -> str | None:
    """The input fingerprint of the round's ledger as it stands, when the instance knows it: the
    one recorded by the latest `rollout_stats` materialization (the run's tag, from the sensor or
    `rollout-assets materialize`; without one, what its round_manifest took), provided that

    - the latest `rollout_ledger` materialization is of the same run: a later run that
      replaced the ledger and then failed wrote the ledger of other inputs;
    - no run of the round is queued or in progress: it may be about to replace the ledger
      with the inputs of another moment (a round changed A -> B -> A while B's run executes).
    """
    stats = _latest_materialization(instance, rollout_stats.key, round_key)
    if stats is None:
        return None
    ledger = _latest_materialization(instance, rollout_ledger.key, round_key)
    if ledger is None or ledger.run_id != stats.run_id:
        return None
    if round_run(instance, round_key, UNFINISHED_STATUSES) is not None:
        return None
    entry = stats.asset_materialization.metadata.get(FINGERPRINT_METADATA)
    return entry.value if entry is not None and isinstance(entry.value, str) else None


@dataclass(frozen=True)
class RoundDirs:
    """What listing the rounds root found."""

    rounds: dict[str, Path] = field(default_factory=dict)  # valid round directories by partition key
    unreadable: frozenset[str] = frozenset()  # entries that could not be looked into: not gone
    root_problem: str | None = None  # why the rounds root itself cannot be listed


def list_round_dirs(root: Path, log) -> RoundDirs:
    """Valid round directories under the root by partition key; any other entry is logged and
    skipped. A rounds root that cannot be listed is not logged: the caller says so."""
    try:
        names = sorted(os.listdir(root))
    except OSError as error:
        return RoundDirs(root_problem=f"rounds root {root} cannot be listed ({error.strerror}): set ROLLOUT_ROUNDS_ROOT")
    rounds: dict[str, Path] = {}
    unreadable: set[str] = set()
    for name in names:
        path = root / name
        try:
            if not path.is_dir() or not is_round_dir(path):
                continue
        except OSError as error:  # unreadable entry, symlink loop, vanished mid-scan
            log.warning(f"skipping {path}: {error}")
            unreadable.add(name)
            continue
        problem = round_key_problem(name)
        if problem is not None:
            log.warning(f"skipping {path}: {problem}")
            continue
        rounds[name] = path
    return RoundDirs(rounds, frozenset(unreadable))


class CursorError(ValueError):
    """The sensor's cursor is not the JSON it writes."""


_CURSOR_HELP = (
    "delete it (`dagster sensor cursor round_dirs_sensor --delete -w workspace.yaml`, or in the UI): "
    "the next tick rebuilds it, taking the request counts from this sensor's runs"
)


def _str_mapping(value: Any, what: str, value_type: type) -> dict:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and type(item) is value_type for key, item in value.items()
    ):
        raise CursorError(f"its {what!r} is not an object of {value_type.__name__} values by round")
    return dict(value)


def read_cursor(text: str | None) -> tuple[dict[str, str], dict[str, int], set[str]]:
    """(fingerprint last requested by round, requests made by round, rounds already logged as
    gone) from the cursor, each empty when it has none; CursorError naming the cursor and the
    way out when it is not what this sensor writes (edited by hand, say)."""
    if not text:
        return {}, {}, set()
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
        raise CursorError(f"the cursor of round_dirs_sensor cannot be read ({error}): {_CURSOR_HELP}") from error
    return requested, counts, set(missing)


def request_counts_from_runs(instance: DagsterInstance) -> dict[str, int]:
    """The highest request number n by round among the run keys `<round>:<fingerprint>:<n>`
    of this sensor's runs (Dagster tags each run a sensor requests with its name and run key)."""
    counts: dict[str, int] = {}
    for run in instance.get_runs(RunsFilter(tags={"dagster/sensor_name": "round_dirs_sensor"})):
        parts = run.tags.get("dagster/run_key", "").split(":")
        if len(parts) == 3 and parts[2].isdigit():  # not `<round>:<fingerprint>`, from before counts
            counts[parts[0]] = max(counts.get(parts[0], 0), int(parts[2]))
    return counts


@sensor(
    job=materialize_round,
    minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description="Discovers new and changed round directories and materializes them.",
)
def round_dirs_sensor(
    context: SensorEvaluationContext, rounds_root: RoundsRoot, round_discovery: RoundDiscovery
) -> SensorResult | SkipReason:
    """Discovers rounds under the rounds root and requests `materialize_round` for each new or changed one.

    Policy, each tick:
    - A round is a directory under the rounds root holding `improve-run/` or `proposer-shots/`;
      its name is its `rounds` partition key. A name that cannot be a key is skipped with a
      log line saying why; one bad directory never fails the tick.
    - A round's fingerprint hashes the size and modification time of every file the backfill
      reads (cell caches, result.json, judge.json, the cells' patch files, the candidates'
      `candidates/*.patch`, shot receipts, loop-provenance.json, cost-ledger.jsonl).
    - A new round (partition added) or a changed one (fingerprint differs from the last
      request) gets a run with run key `<round>:<fingerprint>:<n>`, n counting the round's
      requests, and an observation of its `round_outdir` (file counts, fingerprint), once
      its newest input file, campaign folder, cell folder or proposer-shots folder is older
      than the quiet period; a round still being written waits. A round whose ledger, as it
      stands, was built from its current inputs (by `rollout-assets materialize`, say; see
      `materialized_fingerprint`) is not requested again.
    - A round the round reader refuses (e.g. two folders of one campaign) is requested all the
      same, once per distinct error, so its run fails saying which files are wrong.
    - A round whose partition was deleted while its directory stays gets its partition back.
    - A round whose directory disappeared keeps its partition and ledger; the log says so.
    - The cursor is JSON `{"rounds": {round: fingerprint last requested}, "requests": {round:
      n}, "missing": [...]}`, so a restart neither re-runs unchanged rounds nor misses changed ones.
      A request's n also exceeds every n in the run keys of the sensor's runs of the round, so a
      cursor deleted, older or set back never repeats a key; a cursor of another shape stops
      the tick (CursorError, saying to delete it).
    """
    requested, request_counts, previously_missing = read_cursor(context.cursor)
    # Dagster skips a request whose run key was used before, without a word, so the fingerprint
    # alone cannot be the key: a round changed back to an earlier state (A -> B -> A) would
    # never run again. A request's number n is one more than both the cursor's count and the
    # highest n among this sensor's runs of the round: a cursor deleted, older, or set back by
    # hand to an earlier tick's never leads to a key Dagster has seen. The runs are read once
    # a tick, and only when the tick requests a run.
    counts_in_runs: dict[str, int] | None = None
    listing = list_round_dirs(rounds_root.path, context.log)
    if listing.root_problem is not None:
        # Not "every round disappeared": nothing is known of them until the root can be listed.
        context.log.warning(listing.root_problem)
        return SkipReason(listing.root_problem)
    found = listing.rounds
    # One query for every partition, not one per round and tick.
    partitions = set(context.instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME))
    now = time.time()
    run_requests, observations, new_keys, waiting, readded = [], [], [], [], []
    for key, out_dir in found.items():
        try:
            fingerprint = fingerprint_round(out_dir)
        except RoundInputError as error:
            # Evidence the round reader refuses: skipping would hide the round for ever, so
            # its run is requested and fails saying which files are wrong.
            context.log.warning(f"round {key} cannot be read as it is: {error}")
            fingerprint = unreadable_round_fingerprint(out_dir, error)
        except (OSError, ValueError) as error:  # unreadable, vanished mid-scan, or unnameable
            context.log.warning(f"skipping round {key}: {error}")
            continue
        has_partition = key in partitions
        unchanged = requested.get(key) == fingerprint.digest
        # Another run (`rollout-assets materialize`, say) may have materialized these inputs already.
        if not unchanged and has_partition and materialized_fingerprint(context.instance, key) == fingerprint.digest:
            requested[key] = fingerprint.digest
            unchanged = True
        if unchanged:
            if not has_partition:
                # Deleted in the UI while its directory stays: the round comes back, without a run.
                new_keys.append(key)
                readded.append(key)
            continue
        # An entry dated ahead of our clock by less than the quiet period may have been written
        # just now by a machine whose clock runs a little fast: it counts, and the round waits.
        # One dated further ahead would keep the round waiting for ever: it is left out (with a
        # warning), and the other entries still decide.
        quiet = round_discovery.quiet_period_seconds
        last_written, ahead = fingerprint.last_written(now + quiet)
        if ahead:
            context.log.warning(
                f"round {key}: an input file or folder is dated {ahead + quiet:.0f} s in the future;"
                " the quiet period leaves it out"
            )
        if now - last_written < quiet:
            waiting.append(key)
            continue
        if not has_partition:
            new_keys.append(key)
        if counts_in_runs is None:
            counts_in_runs = request_counts_from_runs(context.instance)
        request_counts[key] = max(request_counts.get(key, 0), counts_in_runs.get(key, 0)) + 1
        run_requests.append(
            RunRequest(
                partition_key=key,
                run_key=f"{key}:{fingerprint.digest}:{request_counts[key]}",
                tags={FINGERPRINT_TAG: fingerprint.digest},
            )
        )
        observations.append(
            AssetObservation(
                asset_key=AssetKey("round_outdir"),
                partition=key,
                metadata={
                    "fingerprint": fingerprint.digest,
                    "input_files": fingerprint.files,
                    "cells": fingerprint.cells,
                    "shot_receipts": fingerprint.shot_receipts,
                    "newest_input_mtime": last_written,
                    "out_dir": str(out_dir),
                },
            )
        )
        requested[key] = fingerprint.digest
    # A round whose folder could not be looked into is still there: skipped with its warning.
    missing = sorted(key for key in requested if key not in found and key not in listing.unreadable)
    for key in sorted(set(missing) - previously_missing):
        context.log.warning(f"round {key}: directory disappeared; its partition and ledger are left in place")
    for key in waiting:
        context.log.info(f"round {key}: inputs changed less than {round_discovery.quiet_period_seconds} s ago; waiting")
    for key in readded:
        context.log.info(f"round {key}: its partition was deleted while its directory stays; adding it again")
    new_cursor = json.dumps(
        {"rounds": requested, "requests": request_counts, "missing": missing}, sort_keys=True
    )
    if not run_requests and not new_keys:
        context.update_cursor(new_cursor)
        reason = "no new or changed rounds" + (f"; {len(waiting)} still settling" if waiting else "")
        return SkipReason(reason)
    return SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=[ROUNDS.build_add_request(new_keys)] if new_keys else [],
        asset_events=observations,
        cursor=new_cursor,
    )


# Dagster's own automation sensor is stopped until someone turns it on in the UI, and the
# summary is the one asset with an automation condition: this one runs from the start.
rounds_summary_automation = AutomationConditionSensorDefinition(
    "rounds_summary_automation",
    target=AssetSelection.assets(rounds_summary),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
    description="Rebuilds rounds_summary after any round's rollout_stats is materialized.",
)
