"""The audit's structures on disk: tallies compared in SQL as Counters compare them, and the
worker cwds with their sessions (audit/spill.py, audit/worker_cwds.py)."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.audit import stores as audit_stores
from rollout_assets.audit.result import compare, compare_counts
from rollout_assets.audit.spill import SpilledRows, tally_key
from rollout_assets.audit.worker_cwds import WorkerCwds
from rollout_assets_tests.builders import session, write_opencode_db

# Values a ledger line or an input can give a tally, in groups a Counter counts as one key or apart.
_NUMBERS = [0, 1, 1.0, True, False, 0.0, 2, 2.5, -1, 10**20, float(10**20)]
_STRINGS = ["ses_a", "ses_b", "1", "ses_\udc80", "ses_\u00e9", "", "ses_a\x00"]
_TASKS = [("baseline", "x", 0), ("baseline", "x", 0.0), ("baseline", "x", 1), ("baseline", "x", True),
          ("gen1-cand0", "x", 0), ("baseline", "y", 0), ("baseline", "x", "0")]


def _spilled(values: list[Any], label: str) -> SpilledRows:
    rows = SpilledRows()
    for value in values:
        rows.append((value,), key=tally_key(value), label=label)
    rows.append(("other",), key=tally_key("other"), label="not compared")
    return rows


@pytest.mark.parametrize("pool", [_NUMBERS, _STRINGS, _TASKS], ids=["numbers", "strings", "tasks"])
@pytest.mark.parametrize("at_least_once", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_tallies_compared_on_disk_are_compared_as_counters_compare_them(
    pool: list[Any], at_least_once: bool, seed: int
) -> None:
    rng = random.Random(seed)
    expected = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
    seen = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
    on_disk = _spilled(expected, "inputs").tally_counts("inputs", _spilled(seen, "ledger"), "ledger")

    by_counters = compare(Counter(expected), Counter(seen), at_least_once=at_least_once)
    assert compare_counts(on_disk, at_least_once=at_least_once) == by_counters


def test_a_tally_key_is_one_for_values_a_counter_holds_as_one_and_apart_otherwise() -> None:
    for pool in (_NUMBERS, _STRINGS, _TASKS):
        for a in pool:
            for b in pool:
                assert (tally_key(a) == tally_key(b)) == (a == b), (a, b)
    with pytest.raises(TypeError):
        tally_key(["a list"])


def test_a_counting_difference_is_found_on_disk() -> None:
    on_disk = _spilled(["s1", "s1", "s2"], "inputs").tally_counts("inputs", _spilled(["s1", "s3"], "ledger"), "ledger")

    result = compare_counts(on_disk)

    assert result.passed is False
    assert (result.expected, result.seen, result.missing) == (3, 2, 2)
    assert result.sample == ["missing s1", "missing s2", "unexpected s3"]


def test_worker_cwds_give_each_listed_cwd_its_sessions_in_the_stores_order(tmp_path: Path) -> None:
    surrogate = "/wt/\udc80"
    db = write_opencode_db(
        tmp_path / "opencode.db",
        sessions=[
            session("s-late", "/wt/a", time_created=30),
            session("s-early", "/wt/a", time_created=10),
            session("s-b", "/wt/b", time_created=20),
            session("s-other", "/wt/not-listed", time_created=5),
        ],
    )
    cwds = WorkerCwds()
    # Three cells: the second lists a cwd without a session and one with a lone surrogate, the
    # third lists /wt/a again.
    for listed in (("/wt/a", "/wt/b"), ("/wt/none", surrogate), ("/wt/a",)):
        cwds.add(listed)

    reading = audit_stores.read_store(db, cwds)

    assert reading.readable and len(cwds) == 4
    assert sorted(cwds) == sorted(["/wt/a", "/wt/b", "/wt/none", surrogate])
    assert list(cwds.listed_sessions()) == [["s-early", "s-late"], ["s-b"], [], [], ["s-early", "s-late"]]
    assert reading.sessions_of("/wt/a") == ["s-early", "s-late"] and reading.sessions_of(surrogate) == []
    assert cwds.sessions() == {"/wt/a": ["s-early", "s-late"], "/wt/b": ["s-b"]}


def test_worker_cwds_are_read_again_in_a_forked_process(tmp_path: Path) -> None:
    db = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", "/wt/a")])
    cwds = WorkerCwds.of(["/wt/a"])
    audit_stores.read_store(db, cwds)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(read)
        os.write(write, repr(cwds.sessions_of("/wt/a")).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        assert (status, pipe.read()) == (0, "['s1']")
    assert cwds.sessions_of("/wt/a") == ["s1"]


def test_a_few_worker_cwds_are_counted_without_a_file() -> None:
    """A small round's cwds stay in memory until a query needs them: its checks run where the
    disk takes no file (a file-size limit, say) as long as the store is not read."""
    cwds = WorkerCwds.of(["/wt/a", "/wt/b", "/wt/a"])
    assert (len(cwds), sorted(cwds), cwds.path.exists()) == (2, ["/wt/a", "/wt/b"], False)
    assert list(cwds.listed_sessions()) == [[], [], []] and cwds.path.exists()
    assert (len(cwds), sorted(cwds)) == (2, ["/wt/a", "/wt/b"])


def test_worker_cwds_leave_no_folder_behind() -> None:
    cwds = WorkerCwds.of(["/wt/a"])
    folder = cwds.path.parent
    assert folder.is_dir()
    del cwds
    assert not folder.exists()
