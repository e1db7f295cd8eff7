"""`round_dirs_sensor` on real round directories, plus one end-to-end run of `dagster dev`.

The sensor's policy (its docstring): a round is a folder under the rounds root holding
`improve-run/` or `proposer-shots/`; a new or changed round (by the fingerprint of the files
the backfill reads) gets one run keyed `<round>:<fingerprint>:<n>` (its n-th request) once its
newest input file or folder is older than the quiet period; the cursor remembers the
fingerprint last requested and the number of requests per round, and the rounds whose folder
vanished.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    SensorResult,
    SkipReason,
    build_sensor_context,
    instance_for_test,
)

from rollout_assets.definitions import defs
from rollout_assets.defs.assets import rollout_ledger
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.defs.resources import RoundDiscovery, RoundsRoot
from rollout_assets.defs.round_lock import acquire_round_lock, release_round_lock
from rollout_assets.defs.sensors import RETRY_TAG, round_dirs_sensor
from rollout_assets.demo import DemoLayout, edge_case_sites
from rollout_assets.discovery import SENSOR_NAME
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT_TAG, fingerprint_round, input_digest
from rollout_assets.sources.round import build_manifest
from rollout_assets_tests.dagster_dev import dagster_dev as running_dagster_dev
from rollout_assets_tests.unprivileged import DROP_TO_NOBODY, run_unprivileged
from rollout_assets_tests.dagster_rounds import (
    JOB_CHECK_NAMES,
    ROUND,
    ROUND_SPEC,
    SMALL_SPEC,
    materialize_round,
    round_resources,
    step_failures,
    write_rounds,
)

PROJECT_DIR = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
SMALL = SMALL_SPEC.name
INVALID_NAME = "must start with a letter or digit and hold at most 100 letters, digits, '.', '_' or '-'"


class Recorder(logging.Handler):
    """Keeps what the sensor logged, as (level, message)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelname, record.getMessage()))


@dataclass
class Tick:
    result: SensorResult | SkipReason
    cursor: str | None
    logged: list[tuple[str, str]]

    @property
    def requested(self) -> list[tuple[str | None, str | None]]:
        """(partition key, run key) of every run request."""
        if isinstance(self.result, SkipReason):
            return []
        return [(request.partition_key, request.run_key) for request in self.result.run_requests]

    def warnings(self) -> list[str]:
        return [message for level, message in self.logged if level == "WARNING"]


def tick(
    rounds_root: Path,
    *,
    cursor: str | None = None,
    instance: DagsterInstance | None = None,
    quiet: int = 0,
    discovery: RoundDiscovery | None = None,
) -> Tick:
    """One direct evaluation of the sensor. Its partition requests are applied to the instance,
    as the daemon does (run requests are only returned). Without an instance, a new one holding
    the partitions of the rounds the cursor names: the tick that wrote the cursor added them.
    `discovery` replaces the quiet period `quiet` and the default retries."""
    if instance is None:
        instance = DagsterInstance.ephemeral()
        if cursor:
            instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, list(json.loads(cursor).get("rounds", {})))
    resources = {
        "rounds_root": RoundsRoot(root_dir=str(rounds_root)),
        "round_discovery": discovery or RoundDiscovery(quiet_period_seconds=quiet),
    }
    with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
        recorder = Recorder()
        context.log.addHandler(recorder)
        result = round_dirs_sensor(context)
        new_cursor = result.cursor if isinstance(result, SensorResult) else context.cursor
    if isinstance(result, SensorResult):
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return Tick(result, new_cursor, recorder.messages)


def cursor_of(
    rounds: dict[str, str], missing: list[str] | None = None, requests: dict[str, int] | None = None
) -> str:
    """The cursor after `requests` requests per round (default: one request of each round), the
    runs of the last ones not yet seen to end."""
    requests = dict.fromkeys(rounds, 1) if requests is None else requests
    pending = {key: key_of(key, digest, requests[key]) for key, digest in rounds.items() if key in requests}
    cursor = {"rounds": rounds, "requests": requests, "missing": missing or []}
    return json.dumps({**cursor, **({"pending": pending} if pending else {})}, sort_keys=True)


def key_of(round_key: str, digest: str, request: int = 1) -> str:
    """The run key of a round's `request`-th request."""
    return f"{round_key}:{digest}:{request}"


def fingerprint(out_dir: Path) -> str:
    digest = fingerprint_round(out_dir).digest
    # A run takes the same value by a walk that keeps nothing (`input_digest`).
    assert input_digest(out_dir) == digest
    return digest


def age(folder: Path, seconds: float) -> None:
    """Set the modification time of every file and folder under `folder` `seconds` into the
    past (instead of sleeping)."""
    moment = time.time() - seconds
    for base, folders, names in os.walk(folder):
        for name in [*folders, *names]:
            os.utime(Path(base, name), (moment, moment), follow_symlinks=False)


def rewrite(path: Path) -> None:
    """Write the same bytes again, as a re-run would: only the modification time changes."""
    before = path.stat().st_mtime_ns
    path.write_bytes(path.read_bytes())
    assert path.stat().st_mtime_ns != before


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLayout:
    """round-001 and round-002, aged past any quiet period; tests only read it."""
    layout = write_rounds(tmp_path_factory.mktemp("demo"), (ROUND_SPEC, SMALL_SPEC))
    age(layout.root, 3600)
    return layout


@pytest.fixture
def fresh(tmp_path: Path) -> DemoLayout:
    """round-001 alone, written for one test that changes it."""
    return write_rounds(tmp_path / "demo")


# ---------------------------------------------------------------------------
# New, unchanged and changed rounds
# ---------------------------------------------------------------------------


def test_new_round_adds_its_partition_and_requests_a_keyed_run(fresh: DemoLayout) -> None:
    out_dir = fresh.rounds_root / ROUND
    digest = fingerprint(out_dir)

    first = tick(fresh.rounds_root)

    assert isinstance(first.result, SensorResult)
    assert first.result.run_requests == [
        RunRequest(partition_key=ROUND, run_key=key_of(ROUND, digest), tags={INPUT_FINGERPRINT_TAG: digest})
    ]
    assert first.result.dynamic_partitions_requests == [
        AddDynamicPartitionsRequest(ROUNDS_PARTITIONS_NAME, [ROUND])
    ]
    assert first.cursor == cursor_of({ROUND: digest})


def test_new_round_is_observed_as_a_round_outdir_partition(fresh: DemoLayout) -> None:
    out_dir = fresh.rounds_root / ROUND

    (observation,) = tick(fresh.rounds_root).result.asset_events

    assert isinstance(observation, AssetObservation)
    assert (observation.asset_key, observation.partition) == (AssetKey("round_outdir"), ROUND)
    metadata = {name: entry.value for name, entry in observation.metadata.items()}
    assert {name: metadata[name] for name in ("fingerprint", "cells", "shot_receipts", "out_dir")} == {
        "fingerprint": fingerprint(out_dir),
        "cells": 30,
        "shot_receipts": 4,
        "out_dir": str(out_dir),
    }
    # cost ledger + provenance + 30 caches + result/judge of the cells that ran + 4 receipts
    # + the patches of the cells (patches/) and of the candidates (candidates/)
    read = {"cached-result.json", "result.json", "judge.json"}
    assert (
        metadata["input_files"]
        == len([p for p in out_dir.rglob("*") if p.name in read or p.suffix == ".patch"]) + 2 + 4
    )


def test_fingerprint_is_sixteen_hex_digits_and_stable(demo: DemoLayout) -> None:
    out_dir = demo.rounds_root / ROUND
    digest = fingerprint(out_dir)

    assert len(digest) == 16 and int(digest, 16) >= 0
    assert fingerprint(out_dir) == digest
    assert fingerprint(demo.rounds_root / SMALL) != digest


def test_unchanged_rounds_are_skipped(demo: DemoLayout) -> None:
    first = tick(demo.rounds_root)

    second = tick(demo.rounds_root, cursor=first.cursor)

    assert second.result == SkipReason("no new or changed rounds")
    assert second.cursor == first.cursor


@pytest.mark.parametrize("changed", ["result.json", "receipt"])
def test_a_rewritten_input_file_requests_a_new_run_with_a_new_key(fresh: DemoLayout, changed: str) -> None:
    out_dir = fresh.rounds_root / ROUND
    site = edge_case_sites(fresh.root, ROUND_SPEC)
    path = (
        site["non_ascii_text"].run_dir / "result.json"
        if changed == "result.json"
        else site["flat_receipt"].receipt_path
    )
    age(fresh.root, 60)
    instance = DagsterInstance.ephemeral()
    first = tick(fresh.rounds_root, instance=instance)
    # As the daemon does with the add request of the first tick:
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND])
    folder_mtimes = (out_dir.stat().st_mtime_ns, path.parent.stat().st_mtime_ns)
    old = fingerprint(out_dir)

    rewrite(path)
    second = tick(fresh.rounds_root, cursor=first.cursor, instance=instance)

    new = fingerprint(out_dir)
    assert new != old
    assert (out_dir.stat().st_mtime_ns, path.parent.stat().st_mtime_ns) == folder_mtimes
    assert second.requested == [(ROUND, key_of(ROUND, new, 2))]
    assert second.result.dynamic_partitions_requests == []
    assert second.cursor == cursor_of({ROUND: new}, requests={ROUND: 2})


def test_a_round_changed_back_to_an_earlier_state_gets_a_run_key_not_used_before(fresh: DemoLayout) -> None:
    """A -> B -> A: Dagster skips a request whose run key an earlier run used, so the third
    request must not reuse the first one's key, or the ledger would stay at state B."""
    out_dir = fresh.rounds_root / ROUND
    cell = edge_case_sites(fresh.root, ROUND_SPEC)["non_ascii_text"].cell_dir
    aside = fresh.root / "aside"
    instance = DagsterInstance.ephemeral()
    state_a = fingerprint(out_dir)
    first = tick(fresh.rounds_root, instance=instance)
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND])

    shutil.move(cell, aside)  # a rename: every mtime is kept, so state A comes back exactly
    state_b = fingerprint(out_dir)
    second = tick(fresh.rounds_root, cursor=first.cursor, instance=instance)
    shutil.move(aside, cell)
    third = tick(fresh.rounds_root, cursor=second.cursor, instance=instance)
    fourth = tick(fresh.rounds_root, cursor=third.cursor, instance=instance)

    assert fingerprint(out_dir) == state_a != state_b
    run_keys = [key for ticked in (first, second, third) for _, key in ticked.requested]
    assert len(run_keys) == len(set(run_keys)) == 3, run_keys
    assert run_keys == [key_of(ROUND, state_a, 1), key_of(ROUND, state_b, 2), key_of(ROUND, state_a, 3)]
    assert third.cursor == cursor_of({ROUND: state_a}, requests={ROUND: 3})
    assert fourth.result == SkipReason("no new or changed rounds")


def test_a_cursor_without_request_counts_is_still_read(fresh: DemoLayout) -> None:
    """A cursor saved before request counts were kept: unchanged rounds stay skipped, and a
    changed round's key (counted from 1) cannot equal its earlier `<round>:<fingerprint>` ones."""
    out_dir = fresh.rounds_root / ROUND
    age(fresh.root, 60)
    saved = json.dumps({"rounds": {ROUND: fingerprint(out_dir)}, "missing": []}, sort_keys=True)

    unchanged = tick(fresh.rounds_root, cursor=saved)
    rewrite(edge_case_sites(fresh.root, ROUND_SPEC)["flat_receipt"].receipt_path)
    changed = tick(fresh.rounds_root, cursor=unchanged.cursor)

    assert unchanged.result == SkipReason("no new or changed rounds")
    new = fingerprint(out_dir)
    assert changed.requested == [(ROUND, key_of(ROUND, new, 1))]
    assert changed.cursor == cursor_of({ROUND: new}, requests={ROUND: 1})


def test_a_deleted_cursor_takes_the_request_counts_from_the_sensors_runs(fresh: DemoLayout) -> None:
    """Counted from 1 again, the round's next key could be one Dagster has seen (the round at
    state A, requested first, is at A again) and would be skipped without a word."""
    out_dir = fresh.rounds_root / ROUND
    instance = DagsterInstance.ephemeral()
    state_a = fingerprint(out_dir)
    for number, state in ((1, state_a), (2, "b0b0b0b0b0b0b0b0")):  # runs the sensor requested: A, then B
        tags = {"dagster/sensor_name": "round_dirs_sensor", "dagster/run_key": key_of(ROUND, state, number)}
        instance.add_run(DagsterRun(job_name="materialize_round", status=DagsterRunStatus.SUCCESS, tags=tags))
    # Another sensor's run, and one from before request counts, whose key ends in a fingerprint.
    instance.add_run(DagsterRun(job_name="x", tags={"dagster/sensor_name": "other", "dagster/run_key": f"{ROUND}:a:7"}))
    instance.add_run(
        DagsterRun(job_name="x", tags={"dagster/sensor_name": "round_dirs_sensor", "dagster/run_key": f"{ROUND}:99"})
    )
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND])

    after_delete = tick(fresh.rounds_root, instance=instance)

    assert after_delete.requested == [(ROUND, key_of(ROUND, state_a, 3))]
    assert after_delete.cursor == cursor_of({ROUND: state_a}, requests={ROUND: 3})


def test_a_cursor_set_back_to_an_earlier_tick_does_not_repeat_a_run_key(fresh: DemoLayout) -> None:
    """`dagster sensor cursor --set` with an old tick's cursor: its count (1) is behind the runs
    (3). Counting on from it would request `<round>:<fingerprint>:2`, a key Dagster has seen."""
    out_dir = fresh.rounds_root / ROUND
    instance = DagsterInstance.ephemeral()
    current = fingerprint(out_dir)
    for number, state in ((1, "a" * 16), (2, current), (3, "b" * 16)):
        tags = {"dagster/sensor_name": "round_dirs_sensor", "dagster/run_key": key_of(ROUND, state, number)}
        instance.add_run(DagsterRun(job_name="materialize_round", status=DagsterRunStatus.SUCCESS, tags=tags))
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND])

    set_back = tick(fresh.rounds_root, cursor=cursor_of({ROUND: "a" * 16}, requests={ROUND: 1}), instance=instance)

    assert set_back.requested == [(ROUND, key_of(ROUND, current, 4))]


@pytest.mark.parametrize(
    ("cursor", "why"),
    [
        ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ("null", "it is not a JSON object"),
        ('{"rounds": {"r": 1}}', "its 'rounds' is not an object of str values by round"),
        ('{"rounds": {}, "requests": {"r": "3"}}', "its 'requests' is not an object of int values by round"),
        ('{"rounds": {}, "requests": {"r": true}}', "its 'requests' is not an object of int values by round"),
        ('{"rounds": {}, "requests": {}, "missing": "r"}', "its 'missing' is not a list of rounds"),
    ],
    ids=["torn JSON", "null", "a number for a fingerprint", "a string for a count", "true for a count", "a string for missing"],
)
def test_a_cursor_it_did_not_write_stops_the_tick_with_one_sentence_naming_it(
    fresh: DemoLayout, cursor: str, why: str
) -> None:
    from rollout_assets.discovery import CursorError

    with pytest.raises(CursorError) as raised:
        tick(fresh.rounds_root, cursor=cursor, instance=DagsterInstance.ephemeral())

    assert str(raised.value) == (
        f"the cursor of round_dirs_sensor cannot be read ({why}): delete it (`dagster sensor cursor "
        "round_dirs_sensor --delete -w workspace.yaml`, or in the UI): the next tick rebuilds it, taking the "
        "request counts from this sensor's runs"
    )


@pytest.mark.parametrize("patch", ["candidate diff appears", "cell patch vanishes"])
def test_a_patch_file_the_manifest_lists_requests_a_new_run(fresh: DemoLayout, patch: str) -> None:
    """`candidates/<commit10>.patch` sets a candidate's diffPath (and its proposer lines'
    patch_path); a cell's artifact.patchPath file is listed in artifactPaths when it exists."""
    out_dir = fresh.rounds_root / ROUND
    site = edge_case_sites(fresh.root, ROUND_SPEC)
    age(fresh.root, 60)
    first = tick(fresh.rounds_root)
    manifest = build_manifest(out_dir).to_json()

    if patch == "candidate diff appears":
        diff = site["candidate_without_patch"].other_path
        assert not diff.exists()
        diff.write_text("diff --git a/x b/x\n", encoding="utf-8")
    else:
        record = json.loads((site["non_ascii_text"].cell_dir / "cached-result.json").read_text("utf-8"))
        Path(record["artifact"]["patchPath"]).unlink()
    second = tick(fresh.rounds_root, cursor=first.cursor)

    assert build_manifest(out_dir).to_json() != manifest
    assert second.requested == [(ROUND, key_of(ROUND, fingerprint(out_dir), 2))]


def test_a_file_the_backfill_does_not_read_changes_nothing(fresh: DemoLayout) -> None:
    first = tick(fresh.rounds_root)
    (fresh.rounds_root / ROUND / "notes.txt").write_text("not an input", encoding="utf-8")

    assert tick(fresh.rounds_root, cursor=first.cursor).result == SkipReason("no new or changed rounds")


# ---------------------------------------------------------------------------
# Quiet period
# ---------------------------------------------------------------------------


def test_round_inside_its_quiet_period_waits(fresh: DemoLayout) -> None:
    waiting = tick(fresh.rounds_root, quiet=120)

    assert waiting.result == SkipReason("no new or changed rounds; 1 still settling")
    assert waiting.cursor == cursor_of({})
    assert ("INFO", f"round {ROUND}: inputs changed less than 120 s ago; waiting") in waiting.logged


def test_round_is_requested_once_older_than_its_quiet_period(fresh: DemoLayout) -> None:
    waiting = tick(fresh.rounds_root, quiet=120)
    age(fresh.root, 121)

    settled = tick(fresh.rounds_root, cursor=waiting.cursor, quiet=120)

    digest = fingerprint(fresh.rounds_root / ROUND)
    assert settled.requested == [(ROUND, key_of(ROUND, digest))]


def test_a_file_dated_in_the_future_does_not_keep_the_round_waiting(fresh: DemoLayout) -> None:
    age(fresh.root, -3600)  # an hour ahead of this machine's clock

    ticked = tick(fresh.rounds_root, quiet=120)

    digest = fingerprint(fresh.rounds_root / ROUND)
    assert ticked.requested == [(ROUND, key_of(ROUND, digest))]
    assert any(
        level == "WARNING" and message.startswith(f"round {ROUND}: an input file or folder is dated ")
        for level, message in ticked.logged
    )


def _start_writing(layout: DemoLayout, what: str) -> Path:
    """Make the first trace a round leaves while `what` is being written; returns the folder
    whose mtime it sets."""
    site = edge_case_sites(layout.root, ROUND_SPEC)
    if what == "cell whose arm is running":  # a cell folder without cached-result.json yet
        folder = site["non_ascii_text"].campaign_dir / "astropy__astropy-99999__rep0"
        folder.mkdir()
        return folder
    if what == "new campaign":
        folder = layout.rounds_root / ROUND / "improve-run" / "gen-2" / "candidate-0"
        folder.mkdir(parents=True)
        return folder
    if what == "generation being copied":  # `cp -a`: finished folders keep their old dates
        folder = layout.rounds_root / ROUND / "improve-run" / "gen-2"
        folder.mkdir()
        return folder
    if what == "round folder being copied":  # its improve-run is done, its proposer-shots not yet
        (layout.rounds_root / ROUND / "proposer-shots.partial").mkdir()
        return layout.rounds_root / ROUND
    # `rsync -a` copies runs/ and patches/ after improve-run/: the round's own folder got its
    # last entry long ago, and only the folder being filled below it is dated now.
    runs = layout.rounds_root / ROUND / "runs"
    if what == "runs being copied":  # the next run folder arrives
        (runs / "gen-2-candidate-0").mkdir()
        return runs
    if what == "run folder being copied":  # a cell's run folder, its result.json not there yet
        run_folder = next(path for path in sorted(runs.iterdir()) if path.is_dir())
        (run_folder / "astropy__astropy-99999__rep0").mkdir()
        return run_folder
    if what == "cell's run folder being copied":  # its files arrive, result.json last
        run_folder = next(path for path in sorted(runs.iterdir()) if path.is_dir())
        cell_run = next(path for path in sorted(run_folder.iterdir()) if (path / "result.json").exists())
        (cell_run / "worker.log").write_text("started\n", encoding="utf-8")
        return cell_run
    if what == "patches being copied":
        patches = next(path for path in sorted((layout.rounds_root / ROUND / "patches").iterdir()) if path.is_dir())
        (patches / ".astropy__astropy-99999__rep0.patch.partial").write_text("diff", encoding="utf-8")
        return patches
    receipt = site["flat_receipt" if what == "receipt" else "per_author_receipt"].receipt_path
    # The writer's temporary file: not a receipt name, only its folder's mtime says so.
    (receipt.parent / "gen9-cand0-shot0.json.partial").write_text("{", encoding="utf-8")
    return receipt.parent


@pytest.mark.parametrize(
    "what",
    [
        "cell whose arm is running",
        "new campaign",
        "receipt",
        "author receipt",
        "generation being copied",
        "round folder being copied",
        "runs being copied",
        "run folder being copied",
        "cell's run folder being copied",
        "patches being copied",
    ],
)
def test_a_round_whose_folders_are_being_written_waits(fresh: DemoLayout, what: str) -> None:
    age(fresh.root, 3600)
    _start_writing(fresh, what)

    waiting = tick(fresh.rounds_root, quiet=120)
    age(fresh.root, 121)
    settled = tick(fresh.rounds_root, cursor=waiting.cursor, quiet=120)

    assert waiting.result == SkipReason("no new or changed rounds; 1 still settling")
    assert waiting.cursor == cursor_of({})
    assert settled.requested == [(ROUND, key_of(ROUND, fingerprint(fresh.rounds_root / ROUND)))]


def test_a_round_reached_through_a_symlink_waits_while_its_runs_are_copied(fresh: DemoLayout, tmp_path: Path) -> None:
    """Its run folders are written under the real path: they count all the same."""
    age(fresh.root, 3600)
    _start_writing(fresh, "run folder being copied")
    linked_root = tmp_path / "linked"
    linked_root.symlink_to(fresh.root)

    waiting = tick(linked_root / "rounds", quiet=120)

    assert waiting.result == SkipReason("no new or changed rounds; 1 still settling")


def test_a_new_folder_alone_does_not_request_an_unchanged_round(fresh: DemoLayout) -> None:
    """Folder mtimes only delay a request: they are not in the fingerprint."""
    age(fresh.root, 3600)
    first = tick(fresh.rounds_root, quiet=120)
    digest = fingerprint(fresh.rounds_root / ROUND)

    _start_writing(fresh, "cell whose arm is running")
    second = tick(fresh.rounds_root, cursor=first.cursor, quiet=120)

    assert first.requested == [(ROUND, key_of(ROUND, digest))]
    assert fingerprint(fresh.rounds_root / ROUND) == digest
    assert second.result == SkipReason("no new or changed rounds")
    assert second.cursor == first.cursor


def test_a_folder_dated_in_the_future_does_not_keep_the_round_waiting(fresh: DemoLayout) -> None:
    age(fresh.root, 3600)
    folder = _start_writing(fresh, "cell whose arm is running")
    ahead = time.time() + 3600  # an hour ahead of this machine's clock
    os.utime(folder, (ahead, ahead))
    past = time.time() - 3600  # its campaign folder, which its creation dated now, as it was
    os.utime(folder.parent, (past, past))

    ticked = tick(fresh.rounds_root, quiet=120)

    assert any(
        level == "WARNING" and message.startswith(f"round {ROUND}: an input file or folder is dated ")
        for level, message in ticked.logged
    ), ticked.logged
    assert ticked.requested == [(ROUND, key_of(ROUND, fingerprint(fresh.rounds_root / ROUND)))]


def test_a_file_dated_far_ahead_does_not_cancel_the_wait_for_a_folder_being_written(fresh: DemoLayout) -> None:
    age(fresh.root, 3600)
    provenance = fresh.rounds_root / ROUND / "improve-run" / "loop-provenance.json"
    ahead = time.time() + 86400  # a day ahead: left out of the quiet period
    os.utime(provenance, (ahead, ahead))
    _start_writing(fresh, "cell whose arm is running")

    waiting = tick(fresh.rounds_root, quiet=120)
    age(fresh.root, 121)
    settled = tick(fresh.rounds_root, cursor=waiting.cursor, quiet=120)

    assert waiting.result == SkipReason("no new or changed rounds; 1 still settling")
    assert any(
        message.startswith(f"round {ROUND}: an input file or folder is dated ")
        and message.endswith(" s in the future; the quiet period leaves it out")
        for message in waiting.warnings()
    ), waiting.logged
    assert settled.requested == [(ROUND, key_of(ROUND, fingerprint(fresh.rounds_root / ROUND)))]


def test_a_file_dated_a_little_ahead_holds_the_round_back_like_one_written_now(fresh: DemoLayout) -> None:
    """A writer whose clock runs a few seconds fast: its file was written just now."""
    age(fresh.root, 3600)
    ledger = fresh.rounds_root / ROUND / "improve-run" / "cost-ledger.jsonl"
    ahead = time.time() + 5
    os.utime(ledger, (ahead, ahead))

    waiting = tick(fresh.rounds_root, quiet=120)

    assert waiting.result == SkipReason("no new or changed rounds; 1 still settling")
    assert waiting.warnings() == []


def test_a_change_restarts_the_quiet_period(fresh: DemoLayout) -> None:
    age(fresh.root, 600)
    first = tick(fresh.rounds_root, quiet=120)
    assert first.requested == [(ROUND, key_of(ROUND, fingerprint(fresh.rounds_root / ROUND)))]
    receipt = edge_case_sites(fresh.root, ROUND_SPEC)["flat_receipt"].receipt_path
    receipt.write_bytes(receipt.read_bytes())  # modified now

    second = tick(fresh.rounds_root, cursor=first.cursor, quiet=120)

    assert second.result == SkipReason("no new or changed rounds; 1 still settling")
    assert second.cursor == first.cursor


# ---------------------------------------------------------------------------
# Odd directories
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bad name", ".hidden", "a..b", "x" * 101])
def test_invalid_directory_name_is_skipped_and_logged_while_others_run(fresh: DemoLayout, name: str) -> None:
    (fresh.rounds_root / name / "improve-run").mkdir(parents=True)

    result = tick(fresh.rounds_root)

    assert [key for key, _ in result.requested] == [ROUND]
    problem = "must not contain '..'" if ".." in name else INVALID_NAME
    assert result.warnings() == [
        f"skipping {fresh.rounds_root / name}: round name {name!r} is not a valid partition key: it {problem}"
    ]


def test_folders_that_are_not_rounds_are_ignored_silently(fresh: DemoLayout) -> None:
    (fresh.rounds_root / "scratch").mkdir()
    (fresh.rounds_root / "README.txt").write_text("not a round", encoding="utf-8")

    result = tick(fresh.rounds_root)

    assert [key for key, _ in result.requested] == [ROUND]
    assert result.warnings() == []


def test_vanished_round_stays_in_the_cursor_and_is_logged_once(fresh: DemoLayout) -> None:
    first = tick(fresh.rounds_root)
    digest = fingerprint(fresh.rounds_root / ROUND)
    shutil.rmtree(fresh.rounds_root / ROUND)

    second = tick(fresh.rounds_root, cursor=first.cursor)
    third = tick(fresh.rounds_root, cursor=second.cursor)

    assert second.result == SkipReason("no new or changed rounds")
    assert second.cursor == cursor_of({ROUND: digest}, missing=[ROUND])
    assert second.warnings() == [
        f"round {ROUND}: directory disappeared; its partition and ledger are left in place"
    ]
    assert third.warnings() == []
    assert third.cursor == second.cursor


@pytest.mark.parametrize("what", ["missing", "a file"])
def test_a_rounds_root_that_cannot_be_listed_says_so_and_forgets_no_round(fresh: DemoLayout, what: str) -> None:
    """Not one "directory disappeared" per known round: nothing is known of them until the
    root can be listed again, and the cursor stays as it was."""
    first = tick(fresh.rounds_root)
    shutil.rmtree(fresh.rounds_root)
    if what == "a file":
        fresh.rounds_root.write_text("not a folder", encoding="utf-8")

    second = tick(fresh.rounds_root, cursor=first.cursor)

    why = "No such file or directory" if what == "missing" else "Not a directory"
    problem = f"rounds root {fresh.rounds_root} cannot be listed ({why}): set ROLLOUT_ROUNDS_ROOT"
    assert second.result == SkipReason(problem)
    assert second.warnings() == [problem]
    assert second.cursor == first.cursor


def test_symlink_loops_and_dangling_links_in_the_root_do_not_stop_the_tick(fresh: DemoLayout) -> None:
    os.symlink("loop", fresh.rounds_root / "loop")
    os.symlink(fresh.root / "nowhere", fresh.rounds_root / "dangling")

    result = tick(fresh.rounds_root)

    assert [key for key, _ in result.requested] == [ROUND]


def test_symlink_loop_inside_a_round_does_not_hide_the_round(fresh: DemoLayout) -> None:
    """The join reads a looping entry as "not a cell"; the sensor must still request the round."""
    out_dir = fresh.rounds_root / ROUND
    os.symlink("loop", out_dir / "improve-run" / "gen-0" / "candidate-0" / "loop")
    os.symlink("loop", out_dir / "improve-run" / "gen-1" / "loop")

    result = tick(fresh.rounds_root)

    assert result.requested == [(ROUND, key_of(ROUND, fingerprint(out_dir)))]
    assert result.warnings() == []


# The sensor's tick as `nobody`, for whom a chmod'ed folder really is closed (root reads any
# folder): everything is imported as root first, then the process drops its privileges.
TICK_AS_NOBODY = (
    textwrap.dedent(
        """
    import json, logging, sys
    from dagster import DagsterInstance, SensorResult, build_sensor_context
    from rollout_assets.defs.resources import RoundDiscovery, RoundsRoot
    from rollout_assets.defs.sensors import round_dirs_sensor
    warnings = []
    class Warnings(logging.Handler):
        def emit(self, record):
            if record.levelno == logging.WARNING:
                warnings.append(record.getMessage())
    resources = {"rounds_root": RoundsRoot(root_dir=sys.argv[1]), "round_discovery": RoundDiscovery(quiet_period_seconds=0)}
    # Dagster imports some of its modules on first use: the instance and context are made as root.
    instance = DagsterInstance.ephemeral()
    cursor = sys.argv[2] if len(sys.argv) > 2 else None
    if cursor:
        instance.add_dynamic_partitions("rounds", list(json.loads(cursor)["rounds"]))
    context = build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    context.log.addHandler(Warnings())
    """
    )
    + DROP_TO_NOBODY
    + textwrap.dedent(
        """
    result = round_dirs_sensor(context)
    requested = [r.partition_key for r in result.run_requests] if isinstance(result, SensorResult) else []
    print(json.dumps({"requested": requested, "warnings": warnings}))
    """
    )
)


def test_unreadable_folders_do_not_stop_the_tick(world_readable_tmp: Path) -> None:
    """A rounds-root entry the sensor may not enter is skipped with a warning naming it; a round
    with a campaign folder it may not list is still requested (its run says what it cannot read)."""
    layout = write_rounds(world_readable_tmp / "demo")
    locked_root_entry = layout.rounds_root / "locked"
    (locked_root_entry / "improve-run").mkdir(parents=True)
    locked_campaign = layout.rounds_root / ROUND / "improve-run" / "gen-1" / "candidate-1"
    age(layout.root, 3600)
    locked_root_entry.chmod(0)
    locked_campaign.chmod(0)
    try:
        result = run_unprivileged(TICK_AS_NOBODY, str(layout.rounds_root))
    finally:
        locked_root_entry.chmod(0o755)
        locked_campaign.chmod(0o755)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "requested": [ROUND],
        "warnings": [f"skipping {locked_root_entry}: [Errno 13] Permission denied: '{locked_root_entry / 'improve-run'}'"],
    }


def test_a_round_folder_it_cannot_enter_is_skipped_not_taken_for_gone(world_readable_tmp: Path) -> None:
    layout = write_rounds(world_readable_tmp / "demo")
    first = tick(layout.rounds_root)
    out_dir = layout.rounds_root / ROUND
    out_dir.chmod(0)
    try:
        result = run_unprivileged(TICK_AS_NOBODY, str(layout.rounds_root), first.cursor)
    finally:
        out_dir.chmod(0o755)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "requested": [],
        "warnings": [f"skipping {out_dir}: [Errno 13] Permission denied: '{out_dir / 'improve-run'}'"],
    }


# ---------------------------------------------------------------------------
# The cursor across ticks and restarts
# ---------------------------------------------------------------------------


def test_a_round_the_round_reader_refuses_is_requested_once_so_its_run_says_why(fresh: DemoLayout) -> None:
    improve = fresh.rounds_root / ROUND / "improve-run"
    shutil.copytree(improve / "gen-0", improve / "gen-00")  # two folders of campaign gen 0
    age(fresh.root, 3600)
    instance = DagsterInstance.ephemeral()

    first = tick(fresh.rounds_root, instance=instance)
    second = tick(fresh.rounds_root, cursor=first.cursor, instance=instance)

    assert [partition for partition, _ in first.requested] == [ROUND]
    (warning,) = first.warnings()
    assert warning.startswith(f"round {ROUND} cannot be read as it is: ")
    assert f"{improve / 'gen-0'}" in warning and f"{improve / 'gen-00'}" in warning
    assert second.result == SkipReason("no new or changed rounds")


def test_a_fifo_in_place_of_a_cell_cache_neither_blocks_the_tick_nor_hides_the_round(fresh: DemoLayout) -> None:
    """Reading it would wait for a writer for ever, stalling every round's tick; the round is
    requested, and its run fails naming the file."""
    import threading

    age(fresh.root, 3600)
    cache = next((fresh.rounds_root / ROUND / "improve-run" / "baseline").glob("*/cached-result.json"))
    cache.unlink()
    os.mkfifo(cache)
    fingerprinted: list[str] = []  # what the tick computes first, in a thread that may block
    reading = threading.Thread(
        target=lambda: fingerprinted.append(fingerprint(fresh.rounds_root / ROUND)), daemon=True
    )

    reading.start()
    reading.join(timeout=60)
    assert fingerprinted, "fingerprinting the round blocked on the FIFO"
    ticked = tick(fresh.rounds_root)

    assert ticked.requested == [(ROUND, key_of(ROUND, fingerprinted[0]))]


def test_a_partition_deleted_while_its_directory_stays_is_added_again_without_a_run(demo: DemoLayout) -> None:
    instance = DagsterInstance.ephemeral()
    first = tick(demo.rounds_root, instance=instance)
    instance.delete_dynamic_partition(ROUNDS_PARTITIONS_NAME, SMALL)

    second = tick(demo.rounds_root, cursor=first.cursor, instance=instance)

    assert isinstance(second.result, SensorResult)
    assert second.result.run_requests == []
    assert second.result.dynamic_partitions_requests == [
        AddDynamicPartitionsRequest(ROUNDS_PARTITIONS_NAME, [SMALL])
    ]
    assert instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME) == [ROUND, SMALL]
    assert second.cursor == first.cursor


def persistent_instance_environment(tmp_path: Path, layout: DemoLayout) -> tuple[Path, dict[str, str]]:
    """(a DAGSTER_HOME with the shipped local dagster.yaml, the environment of a child process
    that runs on it against `layout`, writing ledgers under tmp_path/ledgers)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_DIR / "deploy" / "local" / "dagster.yaml", home / "dagster.yaml")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), **layout.environment(tmp_path / "ledgers"))
    return home, env


@pytest.mark.slow
def test_a_round_the_materialize_command_ran_is_not_run_again_until_it_changes(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    home, env = persistent_instance_environment(tmp_path, layout)

    # What demo.sh does before the UI starts.
    completed = subprocess.run(
        [str(VENV_BIN / "rollout-assets"), "materialize"], check=False, cwd=PROJECT_DIR, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]

    digest = fingerprint(layout.rounds_root / SMALL)
    with DagsterInstance.from_config(str(home)) as instance:
        first = tick(layout.rounds_root, instance=instance)
        rewrite(layout.rounds_root / SMALL / "improve-run" / "loop-provenance.json")
        changed = tick(layout.rounds_root, cursor=first.cursor, instance=instance)

    # The sensor's first tick knows the round's inputs were materialized: no second run of them.
    assert first.result == SkipReason("no new or changed rounds")
    assert json.loads(first.cursor)["rounds"] == {SMALL: digest}
    assert [partition for partition, _ in changed.requested] == [SMALL]


@pytest.mark.slow
def test_a_round_materialized_without_the_sensors_tag_is_not_run_again_until_it_changes(tmp_path: Path) -> None:
    """A run started from the UI or with `dagster asset materialize` carries no fingerprint tag:
    round_manifest takes the fingerprint itself, before reading, and rollout_stats records it."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    instance = DagsterInstance.ephemeral()
    resources = round_resources(layout, tmp_path / "ledgers")
    assert materialize_round(instance, resources, SMALL).success  # no tags

    first = tick(layout.rounds_root, instance=instance)
    rewrite(layout.rounds_root / SMALL / "improve-run" / "loop-provenance.json")
    age(layout.root, 3600)
    changed = tick(layout.rounds_root, cursor=first.cursor, instance=instance)

    assert first.result == SkipReason("no new or changed rounds")
    assert [partition for partition, _ in changed.requested] == [SMALL]


def test_a_round_changed_while_its_untagged_run_read_it_is_run_again(tmp_path: Path) -> None:
    """The fingerprint is taken before the manifest reads the round: a file rewritten after
    that makes the sensor run the round again, never skip it."""
    from rollout_assets.stages import write_manifest as real_write_manifest

    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    instance = DagsterInstance.ephemeral()
    resources = round_resources(layout, tmp_path / "ledgers")
    provenance = layout.rounds_root / SMALL / "improve-run" / "loop-provenance.json"

    def changed_while_read(*args: Any, **kwargs: Any) -> Any:
        manifest = real_write_manifest(*args, **kwargs)
        os.utime(provenance, (time.time() - 1800, time.time() - 1800))  # after the fingerprint
        return manifest

    with pytest.MonkeyPatch.context() as patch:
        from rollout_assets.defs.assets import manifest as assets

        patch.setattr(assets, "write_manifest", changed_while_read)
        materialize_round(instance, resources, SMALL)
    requested = tick(layout.rounds_root, instance=instance)

    assert [partition for partition, _ in requested.requested] == [SMALL]


def test_a_run_tagged_with_the_tags_earlier_name_records_the_fingerprint_it_was_requested_for(tmp_path: Path) -> None:
    """A run requested before the upgrade (queued, say) carries `rollout/fingerprint`: still read."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    instance = DagsterInstance.ephemeral()
    resources = round_resources(layout, tmp_path / "ledgers")

    assert materialize_round(instance, resources, SMALL, tags={"rollout/fingerprint": "0123456789abcdef"}).success

    recorded = instance.fetch_materializations(AssetKey("rollout_stats"), limit=1).records[0]
    assert recorded.asset_materialization.metadata["input_fingerprint"].value == "0123456789abcdef"


# A run, the round changed, then that run re-executed: in a process of its own, since the
# definitions read the variables naming the rounds and stores when they are imported.
RUN_THEN_REEXECUTE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from dagster import DagsterInstance, ReexecutionOptions, execute_job, reconstructable
    from rollout_assets.definitions import materialize_round_job
    from rollout_assets.sources.fingerprint import fingerprint_round

    round_key, out_dir, tag, tag_name = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    provenance = os.path.join(out_dir, "improve-run", "loop-provenance.json")
    tags = {"dagster/partition": round_key, tag_name: tag}
    job = reconstructable(materialize_round_job)
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("rounds", [round_key])
        with execute_job(job, instance, tags=tags) as parent:
            assert parent.success
        os.utime(provenance, (time.time() - 1800, time.time() - 1800))  # the round changes
        options = ReexecutionOptions(parent_run_id=parent.run_id)
        with execute_job(job, instance, tags=tags, reexecution_options=options) as again:
            assert again.success
            print(json.dumps({"read": fingerprint_round(Path(out_dir)).digest, "tag": again.dagster_run.tags[tag_name]}))
    """
)


@pytest.mark.slow
def test_a_reexecuted_run_records_the_inputs_it_read_not_its_parents_tag(tmp_path: Path) -> None:
    """A re-execution carries its parent's tags, the fingerprint among them. The round changed
    (A -> B) since the parent was requested: the re-execution reads B and must record B, or the
    sensor would take B's ledger for A's and skip the round once it is back at A."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    out_dir = layout.rounds_root / SMALL
    provenance = out_dir / "improve-run" / "loop-provenance.json"
    a_times = provenance.stat()
    state_a = fingerprint(out_dir)
    home, env = persistent_instance_environment(tmp_path, layout)

    completed = subprocess.run(
        [sys.executable, "-c", RUN_THEN_REEXECUTE, SMALL, str(out_dir), state_a, INPUT_FINGERPRINT_TAG],
        check=False, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    reexecuted = json.loads(completed.stdout.splitlines()[-1])
    with DagsterInstance.from_config(str(home)) as instance:
        recorded = instance.fetch_materializations(AssetKey("rollout_stats"), limit=1).records[0]
        os.utime(provenance, ns=(a_times.st_atime_ns, a_times.st_mtime_ns))  # back at state A
        back_at_a = tick(layout.rounds_root, instance=instance)

    assert reexecuted["tag"] == state_a != reexecuted["read"]
    assert recorded.asset_materialization.metadata["input_fingerprint"].value == reexecuted["read"]
    assert [partition for partition, _ in back_at_a.requested] == [SMALL]


def _materialized_then_changed(tmp_path: Path) -> tuple[DemoLayout, DagsterInstance, dict[str, Any], Tick]:
    """SMALL materialized on a fresh instance from its inputs as they are (state A), then
    changed (state B) and requested by a tick; returns the layout, instance, resources and that tick."""
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    instance = DagsterInstance.ephemeral()
    resources = round_resources(layout, tmp_path / "ledgers")
    state_a = fingerprint(layout.rounds_root / SMALL)
    assert materialize_round(instance, resources, SMALL, tags={INPUT_FINGERPRINT_TAG: state_a}).success
    first = tick(layout.rounds_root, instance=instance)
    assert first.result == SkipReason("no new or changed rounds")  # the ledger holds state A

    provenance = layout.rounds_root / SMALL / "improve-run" / "loop-provenance.json"
    state_a_times = provenance.stat()
    os.utime(provenance, (time.time() - 1800, time.time() - 1800))  # state B
    changed = tick(layout.rounds_root, cursor=first.cursor, instance=instance)
    assert changed.requested == [(SMALL, key_of(SMALL, fingerprint(layout.rounds_root / SMALL), 1))]
    os.utime(provenance, ns=(state_a_times.st_atime_ns, state_a_times.st_mtime_ns))  # back to state A
    assert fingerprint(layout.rounds_root / SMALL) == state_a
    return layout, instance, resources, changed


@pytest.mark.parametrize("status", [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTED])
def test_a_round_changed_back_while_the_run_of_its_change_is_unfinished_runs_again(
    tmp_path: Path, status: DagsterRunStatus
) -> None:
    """A -> B -> A while B's run is queued or executing: that run may write B's ledger, so the
    ledger A's run recorded no longer tells what the round's ledger will hold."""
    layout, instance, _, changed = _materialized_then_changed(tmp_path)
    instance.add_run(DagsterRun(job_name="materialize_round", status=status, tags={"dagster/partition": SMALL}))

    reverted = tick(layout.rounds_root, cursor=changed.cursor, instance=instance)

    assert reverted.requested == [(SMALL, key_of(SMALL, fingerprint(layout.rounds_root / SMALL), 2))]


def test_a_round_changed_back_after_a_later_run_replaced_its_ledger_and_failed_runs_again(tmp_path: Path) -> None:
    """The latest ledger is not the one whose stats recorded state A: a later run (B's) wrote
    it and stopped before its stats."""
    layout, instance, resources, changed = _materialized_then_changed(tmp_path)
    later = materialize_round(instance, resources, SMALL, selection=[rollout_ledger.key], tags={INPUT_FINGERPRINT_TAG: "b"})
    assert later.success

    reverted = tick(layout.rounds_root, cursor=changed.cursor, instance=instance)

    assert reverted.requested == [(SMALL, key_of(SMALL, fingerprint(layout.rounds_root / SMALL), 2))]


def test_cursor_carries_every_round_across_ticks(demo: DemoLayout) -> None:
    first = tick(demo.rounds_root)

    assert sorted(first.requested) == [
        (ROUND, key_of(ROUND, fingerprint(demo.rounds_root / ROUND))),
        (SMALL, key_of(SMALL, fingerprint(demo.rounds_root / SMALL))),
    ]
    assert first.cursor == cursor_of(
        {ROUND: fingerprint(demo.rounds_root / ROUND), SMALL: fingerprint(demo.rounds_root / SMALL)}
    )


def test_restart_with_the_saved_cursor_reruns_only_the_changed_round(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (ROUND_SPEC, SMALL_SPEC))
    age(layout.root, 3600)
    saved = tick(layout.rounds_root, instance=DagsterInstance.ephemeral()).cursor
    # A restarted daemon: a new process and instance object over the same partitions, the saved cursor.
    restarted = DagsterInstance.ephemeral()
    restarted.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND, SMALL])

    unchanged = tick(layout.rounds_root, cursor=saved, instance=restarted)
    rewrite(edge_case_sites(layout.root, SMALL_SPEC)["cost_ledger_garbage_line"].other_path)
    changed = tick(layout.rounds_root, cursor=unchanged.cursor, instance=restarted)

    assert unchanged.result == SkipReason("no new or changed rounds")
    assert changed.requested == [(SMALL, key_of(SMALL, fingerprint(layout.rounds_root / SMALL), 2))]
    assert changed.result.dynamic_partitions_requests == []


# ---------------------------------------------------------------------------
# After a run failed: retried when the failure may pass, not when the round's inputs caused it
# ---------------------------------------------------------------------------

RETRY_AT_ONCE = RoundDiscovery(quiet_period_seconds=0, max_retries=2, retry_backoff_seconds=0)


def launch(instance: DagsterInstance, resources: dict[str, Any], tick_: Tick, *, round_held: Path | None = None) -> Any:
    """Run the tick's one request as the daemon would (with the tags it adds); with `round_held`
    (a ledger root), while another run holds the round."""
    (request,) = tick_.result.run_requests
    tags = {**request.tags, "dagster/sensor_name": SENSOR_NAME, "dagster/run_key": request.run_key}
    lock = None
    if round_held is not None:
        (round_held / request.partition_key).mkdir(parents=True, exist_ok=True)
        lock = acquire_round_lock(round_held / request.partition_key, request.partition_key, "run other (process 1)")
    try:
        return materialize_round(instance, resources, request.partition_key, tags=tags)
    finally:
        if lock is not None:
            release_round_lock(lock)


def test_a_round_whose_run_another_run_held_back_is_retried_on_a_later_tick(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(layout, ledger_root)
    digest = fingerprint(layout.rounds_root / SMALL)
    with instance_for_test() as instance:
        first = tick(layout.rounds_root, instance=instance, discovery=RETRY_AT_ONCE)
        held_back = launch(instance, resources, first, round_held=ledger_root)
        saw = tick(layout.rounds_root, cursor=first.cursor, instance=instance, discovery=RETRY_AT_ONCE)
        retry = tick(layout.rounds_root, cursor=saw.cursor, instance=instance, discovery=RETRY_AT_ONCE)
        retried = launch(instance, resources, retry)
        after = tick(layout.rounds_root, cursor=retry.cursor, instance=instance, discovery=RETRY_AT_ONCE)

    assert not held_back.success and retried.success
    # The tick that saw the failure retries nothing itself: one tick of backoff at least.
    assert saw.result == SkipReason("no new or changed rounds; 1 to retry later")
    sentence = (
        f"round {SMALL} is being materialized by run other (process 1) right now "
        f"(lock {ledger_root / SMALL / '.run.lock'}); this run writes nothing to it"
    )
    assert ("INFO", f"round {SMALL}: run {held_back.run_id} failed ({sentence}), which may pass; retry 1 of 2 in 0 s") in saw.logged
    assert retry.requested == [(SMALL, key_of(SMALL, digest, 2))]
    assert retry.result.run_requests[0].tags[RETRY_TAG] == "1"
    # Succeeded: the round is at rest again.
    assert after.result == SkipReason("no new or changed rounds")
    assert after.cursor == json.dumps({"missing": [], "requests": {SMALL: 2}, "rounds": {SMALL: digest}}, sort_keys=True)


def test_a_round_whose_runs_are_held_back_every_time_is_retried_at_most_the_policys_number(tmp_path: Path) -> None:
    layout = write_rounds(tmp_path / "demo", (SMALL_SPEC,))
    age(layout.root, 3600)
    ledger_root = tmp_path / "ledgers"
    resources = round_resources(layout, ledger_root)
    runs, ticks = [], []
    with instance_for_test() as instance:
        ticks.append(tick(layout.rounds_root, instance=instance, discovery=RETRY_AT_ONCE))
        for _ in range(8):
            if ticks[-1].requested:
                runs.append(launch(instance, resources, ticks[-1], round_held=ledger_root))
            ticks.append(tick(layout.rounds_root, cursor=ticks[-1].cursor, instance=instance, discovery=RETRY_AT_ONCE))

    assert [len(t.requested) for t in ticks] == [1, 0, 1, 0, 1, 0, 0, 0, 0]  # the request, then 2 retries
    assert not any(run.success for run in runs)
    assert ticks[5].warnings() == [
        f"round {SMALL}: run {runs[2].run_id} failed ({step_failures(runs[2])['round_manifest']}), which may pass, "
        "but after 2 retries of the same inputs it runs again only once its inputs change"
    ]
    assert {t.result for t in ticks[6:]} == {SkipReason("no new or changed rounds")}


def test_a_round_whose_run_failed_for_its_own_files_is_not_retried(fresh: DemoLayout, tmp_path: Path) -> None:
    improve = fresh.rounds_root / ROUND / "improve-run"
    shutil.copytree(improve / "gen-0", improve / "gen-00")  # two folders of campaign gen 0
    age(fresh.root, 3600)
    with instance_for_test() as instance:
        first = tick(fresh.rounds_root, instance=instance, discovery=RETRY_AT_ONCE)
        failed = launch(instance, round_resources(fresh, tmp_path / "ledgers"), first)
        saw = tick(fresh.rounds_root, cursor=first.cursor, instance=instance, discovery=RETRY_AT_ONCE)
        later = tick(fresh.rounds_root, cursor=saw.cursor, instance=instance, discovery=RETRY_AT_ONCE)

    why = step_failures(failed)["round_manifest"]
    assert f"{improve / 'gen-00'}" in why
    assert saw.result == later.result == SkipReason("no new or changed rounds")
    assert (
        "INFO",
        f"round {ROUND}: run {failed.run_id} failed ({why}); it runs again once its inputs change",
    ) in saw.logged
    assert [message for _, message in later.logged if message.startswith(f"round {ROUND}: run")] == []


# ---------------------------------------------------------------------------
# evaluate_tick, as the daemon calls it, with the real Definitions
# ---------------------------------------------------------------------------


def test_evaluate_tick_resolves_job_tags_and_partition_requests(demo: DemoLayout) -> None:
    resources = {
        "rounds_root": RoundsRoot(root_dir=str(demo.rounds_root)),
        "round_discovery": RoundDiscovery(quiet_period_seconds=0),
    }
    with instance_for_test() as instance:
        with build_sensor_context(
            instance_ref=instance.get_ref(), definitions=defs, resources=resources
        ) as context:
            data = round_dirs_sensor.evaluate_tick(context)
        instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, [ROUND, SMALL])
        with build_sensor_context(
            instance_ref=instance.get_ref(), definitions=defs, resources=resources, cursor=data.cursor
        ) as context:
            again = round_dirs_sensor.evaluate_tick(context)

    assert data.dynamic_partitions_requests == [
        AddDynamicPartitionsRequest(ROUNDS_PARTITIONS_NAME, [ROUND, SMALL])
    ]
    digest = fingerprint(demo.rounds_root / ROUND)
    first = data.run_requests[0]
    assert (first.partition_key, first.run_key) == (ROUND, key_of(ROUND, digest))
    assert {
        key: first.tags[key] for key in ("dagster/partition", "dagster/sensor_name", INPUT_FINGERPRINT_TAG)
    } == {
        "dagster/partition": ROUND,
        "dagster/sensor_name": "round_dirs_sensor",
        INPUT_FINGERPRINT_TAG: digest,
    }
    assert [event.partition for event in data.asset_events] == [ROUND, SMALL]
    assert (again.run_requests, again.skip_message) == ([], "no new or changed rounds")


# ---------------------------------------------------------------------------
# End to end: `dagster dev` discovers a round, materializes and checks it, re-runs it once changed
# ---------------------------------------------------------------------------


def _wait_for(what: str, predicate: Any, timeout: float, log: Path, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; dagster dev log tail:\n{tail}")


@dataclass
class DagsterDev:
    home: Path
    log: Path


@pytest.fixture
def dagster_dev(tmp_path: Path) -> Iterator[tuple[DagsterDev, Path, Path]]:
    """`dagster dev` on an empty rounds root: (server, rounds root, ledger root)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    rounds_root = tmp_path / "rounds"
    rounds_root.mkdir()
    ledger_root = tmp_path / "ledgers"
    data = tmp_path / "data"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        ROLLOUT_ROUNDS_ROOT=str(rounds_root),
        OPENCODE_DB=str(data / "opencode.db"),
        CLAUDE_PROJECTS_DIR=str(data / "claude-projects"),
        ROLLOUT_LEDGER_ROOT=str(ledger_root),
        ROLLOUT_QUIET_PERIOD_SECONDS="0",
        ROLLOUT_SENSOR_INTERVAL_SECONDS="5",
    )
    log = tmp_path / "dagster-dev.log"
    with running_dagster_dev(env, log):
        yield DagsterDev(home, log), rounds_root, ledger_root


def _sensor_runs(instance: DagsterInstance) -> list[Any]:
    """Runs the round sensor launched, oldest first."""
    records = instance.get_run_records(filters=RunsFilter(tags={"dagster/sensor_name": "round_dirs_sensor"}))
    return [record.dagster_run for record in sorted(records, key=lambda record: record.create_timestamp)]


def _check_results(instance: DagsterInstance, run_id: str) -> dict[str, tuple[bool, str | None]]:
    evaluations = [
        entry.asset_check_evaluation
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is not None
        and entry.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    return {evaluation.check_name: (evaluation.passed, evaluation.partition) for evaluation in evaluations}


FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def _finished(instance: DagsterInstance, run_id: str) -> Any:
    """The run once it has finished, else None."""
    run = instance.get_run_by_id(run_id)
    return run if run is not None and run.status in FINISHED else None


@pytest.mark.e2e
@pytest.mark.slow
def test_dagster_dev_materializes_a_new_round_and_reruns_it_once_after_a_change(
    dagster_dev: tuple[DagsterDev, Path, Path], tmp_path: Path
) -> None:
    server, rounds_root, ledger_root = dagster_dev
    # The demo writes absolute paths, so it is generated in place under tmp/data, then shown to the
    # sensor in one step (a symlink), so no tick can catch a half-written round.
    layout = write_rounds(tmp_path / "data")
    os.symlink(layout.rounds_root / ROUND, rounds_root / ROUND)
    out_dir = rounds_root / ROUND
    first_key = key_of(ROUND, fingerprint(out_dir))

    with DagsterInstance.from_config(str(server.home)) as instance:
        (launched,) = _wait_for("the first run", lambda: _sensor_runs(instance), 60, server.log)
        first = _wait_for(
            "the first run to finish", lambda: _finished(instance, launched.run_id), 120, server.log
        )
        assert first.status == DagsterRunStatus.SUCCESS, server.log.read_text(errors="replace")[-4000:]
        assert (first.tags["dagster/partition"], first.tags["dagster/run_key"]) == (ROUND, first_key)
        assert _check_results(instance, first.run_id) == dict.fromkeys(JOB_CHECK_NAMES, (True, ROUND))
        assert (ledger_root / ROUND / "rollout-ledger.jsonl").is_file()
        assert instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME) == [ROUND]
        # The summary follows by itself: its automation sensor is on from the start.
        _wait_for(
            "the summary to be materialized",
            lambda: instance.get_latest_materialization_event(AssetKey("rounds_summary")),
            90,
            server.log,
        )
        assert (ledger_root / "rounds-summary.parquet").is_file()

        result_json = edge_case_sites(layout.root, ROUND_SPEC)["non_ascii_text"].run_dir / "result.json"
        temp = result_json.with_name("result.json.tmp")
        temp.write_bytes(result_json.read_bytes())
        os.replace(temp, result_json)  # one atomic rewrite: same bytes, newer mtime
        second_key = key_of(ROUND, fingerprint(out_dir), 2)
        assert second_key != first_key

        relaunched = _wait_for("a second run", lambda: _sensor_runs(instance)[1:], 30, server.log)[0]
        second = _wait_for(
            "the second run to finish", lambda: _finished(instance, relaunched.run_id), 120, server.log
        )
        time.sleep(6)  # at least one more tick after the re-run finished
        final = _sensor_runs(instance)
        second_checks = _check_results(instance, second.run_id)

    assert second.status == DagsterRunStatus.SUCCESS
    assert second.tags["dagster/run_key"] == second_key
    assert second_checks == dict.fromkeys(JOB_CHECK_NAMES, (True, ROUND))
    assert [run.run_id for run in final] == [first.run_id, second.run_id]


def test_a_path_holding_a_lone_surrogate_is_left_out_of_the_fingerprint_not_fatal(tmp_path: Path) -> None:
    # A torn escape in a cell's runDir or patchPath names no file: the backfill reads it as
    # absent, and the fingerprint leaves it out instead of failing the whole tick.
    out_dir = tmp_path / "rounds" / "round-x"
    cache = out_dir / "improve-run" / "baseline" / "c" / "cached-result.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(
        '{"scenarioId": "a__a-1", "rep": 0, "artifact": {"runDir": "/runs/\\udc00", "patchPath": "/p/\\ud83d.patch"}}'
    )

    found = fingerprint_round(out_dir)

    assert (found.cells, found.files) == (1, 1)  # the cell cache alone
    assert input_digest(out_dir) == found.digest
