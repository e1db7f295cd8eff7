"""The backfill on several processes writes the same ledger, byte for byte, as on one."""

import math
import random
import time
from pathlib import Path

import pytest

from rollout_assets.backfill import RoundBackfill
from rollout_assets.backfill.parallel import backfill_to_file, round_units
from rollout_assets.demo import DEFAULT_ROUNDS, write_demo
from rollout_assets.ledger import read_ledger_dicts, write_ledger
from rollout_assets_tests.builders import campaign_dir, cell, write_cell
from rollout_assets_tests.ledger_samples import sample_line

CAPTURED_AT = "2026-12-02T10:00:00.000Z"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return write_demo(tmp_path_factory.mktemp("parallel"), DEFAULT_ROUNDS)


@pytest.mark.parametrize("round_index", [0, 1, 2])
def test_two_workers_write_the_single_process_ledger_byte_for_byte(demo, tmp_path: Path, round_index: int) -> None:
    out_dir = demo.rounds[round_index]
    stores = {"opencode_db": demo.opencode_db, "claude_projects_dir": demo.claude_projects_dir}
    with RoundBackfill(out_dir, captured_at=CAPTURED_AT, **stores) as single:
        write_ledger(tmp_path / "single.jsonl", single.lines())
    # Small units, so even the small demo round is cut into many parts.
    from rollout_assets.backfill import parallel

    original = parallel.CELLS_PER_UNIT
    parallel.CELLS_PER_UNIT = 3
    try:
        _, stats = backfill_to_file(out_dir, tmp_path / "parallel.jsonl", captured_at=CAPTURED_AT, workers=2, **stores)
    finally:
        parallel.CELLS_PER_UNIT = original

    assert (tmp_path / "parallel.jsonl").read_bytes() == (tmp_path / "single.jsonl").read_bytes()
    assert stats.to_json() == single.stats.to_json()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["parallel.jsonl", "single.jsonl"]


def test_units_cover_every_cell_once_and_end_with_the_proposers(demo) -> None:
    from rollout_assets.backfill.parallel import CellUnit, ProposerUnit
    from rollout_assets.sources.round import build_manifest

    manifest = build_manifest(demo.rounds[1])
    units = round_units(manifest, cells_per_unit=7)
    covered = [(u.entry, cell) for u in units if isinstance(u, CellUnit) for cell in range(u.start, u.stop)]
    expected = [(index, cell) for index, entry in enumerate(manifest.entries) for cell in range(len(entry.cells))]
    assert covered == expected
    assert isinstance(units[-1], ProposerUnit)


def test_a_failing_unit_leaves_no_ledger_and_no_segments(demo, tmp_path: Path) -> None:
    from rollout_assets.backfill import parallel
    from rollout_assets.ledger import AtomicJsonlWriter

    def produce(unit: int):
        if unit == 3:
            raise RuntimeError("unit 3 broke")
        yield sample_line(rollout_id=f"line-{unit}")

    target = tmp_path / "out.jsonl"
    target.write_text("previous\n")
    with pytest.raises(RuntimeError, match="unit 3 broke"), AtomicJsonlWriter(target) as writer:
        parallel.write_units(writer, list(range(6)), produce, workers=2)
    assert target.read_text() == "previous\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_failing_first_unit_fails_at_once_without_running_the_queued_units(tmp_path: Path) -> None:
    from rollout_assets.backfill import parallel
    from rollout_assets.ledger import AtomicJsonlWriter

    ran = tmp_path / "ran"  # a file per unit that started
    ran.mkdir()
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    target = ledgers / "out.jsonl"
    target.write_text("previous\n")

    def produce(unit: int):
        if unit == 0:
            raise RuntimeError("unit 0 broke")
        (ran / str(unit)).touch()
        time.sleep(0.1)  # the queued units are still queued when the failure arrives
        yield sample_line(rollout_id=f"line-{unit}")

    units = list(range(40))
    with pytest.raises(RuntimeError, match="unit 0 broke"), AtomicJsonlWriter(target) as writer:
        parallel.write_units(writer, units, produce, workers=2)

    # Only units a worker process had already taken still ran (a few per worker), not all 39.
    assert 0 < len(list(ran.iterdir())) < len(units) // 2
    assert target.read_text() == "previous\n"
    assert sorted(path.name for path in ledgers.iterdir()) == ["out.jsonl"]


def _rewards_whose_float_mean_depends_on_the_parts(count: int, per_part: int) -> list[float]:
    """Rewards whose mean, rounded to 12 digits, differs when the floats are added one by one
    (one process) or first per part of `per_part` and then the parts' sums (several)."""
    for seed in range(100_000):
        rng = random.Random(seed)
        rewards = [rng.random() for _ in range(count)]
        one_by_one = 0.0
        for reward in rewards:
            one_by_one += reward
        by_parts = 0.0
        for start in range(0, count, per_part):
            part = 0.0
            for reward in rewards[start : start + per_part]:
                part += reward
            by_parts += part
        if round(one_by_one / count, 12) != round(by_parts / count, 12):
            return rewards
    raise AssertionError("no such rewards found")


def test_one_and_two_workers_print_the_same_mean_reward_where_float_sums_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollout_assets.backfill import parallel

    monkeypatch.setattr(parallel, "CELLS_PER_UNIT", 50)
    rewards = _rewards_whose_float_mean_depends_on_the_parts(200, 50)
    out_dir = tmp_path / "round"
    for index, reward in enumerate(rewards):
        judged = cell(f"inst-{index:04d}", 0, judgeScores={"swe-arena-official-judge": {"composite": reward}})
        write_cell(campaign_dir(out_dir), f"c{index:04d}", judged)
    stores = {"opencode_db": tmp_path / "no.db", "claude_projects_dir": tmp_path / "claude-projects"}

    with RoundBackfill(out_dir, captured_at=CAPTURED_AT, **stores) as single:
        write_ledger(tmp_path / "single.jsonl", single.lines())
    _, stats = backfill_to_file(out_dir, tmp_path / "parallel.jsonl", captured_at=CAPTURED_AT, workers=2, **stores)

    assert [line["outcome"]["reward"] for line in read_ledger_dicts(tmp_path / "single.jsonl")] == rewards
    assert (tmp_path / "parallel.jsonl").read_bytes() == (tmp_path / "single.jsonl").read_bytes()
    assert stats.to_json() == single.stats.to_json()
    # The mean of the exact sum, rounded once.
    assert stats.to_json()["rewardByRole"]["supervisor"] == {
        "labeled": 200,
        "mean": round(math.fsum(rewards) / 200, 12),
    }


_FORKED: dict = {}  # what a forked child inherits (a connection cannot be pickled to it)


def _child_store_is_its_own() -> tuple[bool, list[str]]:
    store = _FORKED["holder"].get()
    found = store.sessions_by_directory(["/w/a"])
    return store is not _FORKED["inherited"], [session.id for session in found["/w/a"]]


def test_each_process_opens_its_own_indexed_store_and_closes_only_its_own(tmp_path: Path) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from rollout_assets.backfill.parallel import StorePerProcess
    from rollout_assets_tests.builders import session, write_opencode_db

    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", "/w/a"), session("s2", "/w/b")])
    holder = StorePerProcess.probe(path)
    parent_store = holder.get()
    assert holder.get() is parent_store  # one connection for every unit of this process

    _FORKED.update(holder=holder, inherited=parent_store)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            own, found = pool.submit(_child_store_is_its_own).result()
    finally:
        _FORKED.clear()

    assert own and found == ["s1"]
    # The child's exit did not touch the parent's connection; close() closes it.
    assert [s.id for s in parent_store.sessions_by_directory(["/w/b"])["/w/b"]] == ["s2"]
    holder.close()
    with pytest.raises(Exception, match="closed"):
        parent_store.sessions_by_directory(["/w/a"])


def test_a_store_unavailable_when_the_round_started_is_never_opened(tmp_path: Path) -> None:
    from rollout_assets.backfill.parallel import StorePerProcess
    from rollout_assets_tests.builders import session, write_opencode_db

    holder = StorePerProcess.probe(tmp_path / "opencode.db")  # no store yet
    write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", "/w/a")])

    # Every process agrees with the round's stats: the store is unavailable for the whole round.
    assert (holder.available, holder.get()) == (False, None)


def test_a_store_that_becomes_unreadable_during_the_round_fails_it_naming_the_store(tmp_path: Path) -> None:
    from rollout_assets.backfill.parallel import StorePerProcess
    from rollout_assets.sources.opencode import OpencodeStoreChanged
    from rollout_assets_tests.builders import session, write_opencode_db

    path = write_opencode_db(tmp_path / "opencode.db", sessions=[session("s1", "/w/a")])
    holder = StorePerProcess.probe(path)
    path.write_bytes(b"not a database any more")

    with pytest.raises(OpencodeStoreChanged, match=f"{path}: the opencode store became unreadable"):
        holder.get()
