"""The backfill on every core: units of work in worker processes, one ledger in order.

A round is cut into units (a run of cells of one campaign, or all proposer shots). Each unit
runs in a forked worker process, which writes its lines, encoded (and validated) exactly as
the ledger writer would, to a segment file beside the ledger. The parent appends the segments
to the ledger in unit order, so the file is byte-identical to a single-process backfill with
the same `captured_at`, and sums the units' counters.

Memory stays bounded: each worker streams its unit; the parent only copies bytes. Only the
fork start method is used: workers inherit the manifest instead of receiving it pickled.
"""

import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol, Self, TypeVar

from rollout_assets.backfill.join import cell_rows, episode_lines, line_context, proposer_lines
from rollout_assets.backfill.lines import LineContext
from rollout_assets.backfill.stats import BackfillStats
from rollout_assets.ledger import AtomicJsonlWriter, LedgerWriter
from rollout_assets.ledger.io import segment_prefix
from rollout_assets.sources.opencode import OpencodeStore, OpencodeStoreChanged
from rollout_assets.sources.opencode_store import release_snapshot
from rollout_assets.sources.round import CampaignEntry, CellRecord, RoundManifest, build_manifest

# Cells per unit: small enough to balance two cores, large enough that a unit's start-up
# (opening the store, one batched session query) is noise.
CELLS_PER_UNIT = 512

# A unit's lines. A producer may also have `close()`, for what it opened in the process that
# ran it; write_units calls it when the units ran in the calling process.
Produce = Callable[[Any], Iterator[dict[str, Any]]]


class Tally(Protocol):
    """Counters of the records a unit wrote, summed over units (BackfillStats for ledger lines)."""

    def observe(self, record: dict[str, Any]) -> None: ...

    def merge(self, other: Any) -> None: ...


TallyT = TypeVar("TallyT", bound=Tally)


@dataclass
class _Task:
    """What every forked worker needs, inherited through fork (never pickled)."""

    produce: Produce
    encode: Callable[[dict[str, Any]], bytes]
    segment_prefix: str
    new_tally: Callable[[], Tally]


_TASK: _Task | None = None


def _run_unit(index: int, unit: Any) -> tuple[str, int, Tally]:
    """In a worker: write one unit's lines to its segment; return (segment, line count, counters)."""
    assert _TASK is not None, "worker started without a task (only the fork start method is supported)"
    segment = _segment_path(_TASK.segment_prefix, index)
    stats = _TASK.new_tally()
    lines = 0
    with open(segment, "wb") as handle:
        for line in _TASK.produce(unit):
            handle.write(_TASK.encode(line))
            stats.observe(line)
            lines += 1
    return segment, lines, stats


class StorePerProcess:
    """One read-only connection to the opencode store per process, for every unit it runs.

    A worker process runs many units; opening the store once lets it index the sessions by
    directory once (`OpencodeStore.index_directories`) instead of scanning the session table
    for every unit. A forked child never uses its parent's connection (SQLite connections do
    not survive a fork): it opens its own on first use. Only the opening process closes one.

    Whether the store is available is decided once, by `probe`, for the whole round: every
    process then agrees with the stats and with each other. A store that was unavailable
    stays so (no process opens it); one that was available and can no longer be opened fails
    the round instead of mixing sessions and "store unavailable" gaps in one ledger.
    """

    def __init__(self, path: str | os.PathLike[str], available: bool):
        self.path, self.available = path, available
        self._owner: int | None = None
        self._store: OpencodeStore | None = None

    @classmethod
    def probe(cls, path: str | os.PathLike[str]) -> Self:
        store = OpencodeStore.open(path)
        if store is not None:
            store.close()
        return cls(path, available=store is not None)

    def get(self) -> OpencodeStore | None:
        if not self.available:
            return None
        if self._owner != os.getpid():
            store = OpencodeStore.open(self.path)
            if store is None:
                raise OpencodeStoreChanged(
                    f"{self.path}: the opencode store became unreadable during the backfill; run it again"
                )
            self._owner, self._store = os.getpid(), store
            store.index_directories()
        return self._store

    def close(self) -> None:
        if self._owner == os.getpid() and self._store is not None:
            self._store.close()
        self._owner = self._store = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        """The round is read: this process's connection closed and the snapshot `probe` took
        removed (sources/opencode_store.release_snapshot)."""
        self.close()
        release_snapshot(self.path)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _init_worker(parent: int) -> None:
    """Pool initializer. The kernel kills a worker when its parent dies: a SIGKILLed backfill
    would otherwise leave workers that go on writing segments, then wait forever on a queue.
    And a worker ignores Ctrl-C, which reaches every process of the group: the parent alone
    stops the run (it cancels the queued units and removes the segments)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while forking


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def write_units(
    writer: AtomicJsonlWriter,
    units: Sequence[Any],
    produce: Produce,
    *,
    workers: int,
    on_unit_done: Callable[[Any], None] | None = None,
    new_tally: Callable[[], TallyT] = BackfillStats,  # type: ignore[assignment]
) -> TallyT:
    """Write the lines of every unit to `writer`, in unit order; returns the summed counters."""
    stats = new_tally()
    if workers <= 1 or len(units) <= 1:
        _write_units_here(writer, units, produce, stats, on_unit_done)
    else:
        _write_units_forked(writer, units, produce, stats, on_unit_done, workers=workers, new_tally=new_tally)
    return stats


def _write_units_here(
    writer: AtomicJsonlWriter,
    units: Sequence[Any],
    produce: Produce,
    stats: Tally,
    on_unit_done: Callable[[Any], None] | None,
) -> None:
    """write_units in the calling process."""
    try:
        for unit in units:
            for line in produce(unit):
                writer.write(line)
                stats.observe(line)
            if on_unit_done is not None:
                on_unit_done(unit)
    finally:
        # What the producer opened in this process (forked workers' end with them).
        close = getattr(produce, "close", None)
        if close is not None:
            close()


def _write_units_forked(
    writer: AtomicJsonlWriter,
    units: Sequence[Any],
    produce: Produce,
    stats: Tally,
    on_unit_done: Callable[[Any], None] | None,
    *,
    workers: int,
    new_tally: Callable[[], Tally],
) -> None:
    """write_units on `workers` forked processes, each unit to a segment file the parent
    appends in unit order."""
    global _TASK
    # Segments sit beside the output, named like its temp files, so a killed run's leftovers
    # are removed by the next writer of that path.
    prefix = str(writer.path.parent / segment_prefix(writer.path))
    _TASK = _Task(produce, writer.encode, prefix, new_tally)
    try:
        # Objects that exist now are shared with the workers copy-on-write; freezing them keeps
        # the workers' garbage collector from touching (and so copying) every page of them.
        gc.freeze()
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        ) as pool:
            try:
                _append_segments(writer, units, _submit_all(pool, units), stats, on_unit_done)
            except BaseException:
                # Leaving the `with` block would first run every unit still queued: cancel them,
                # so a failure surfaces now. Units a worker already took still finish here,
                # before their segments are removed below.
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    except BaseException:
        # A finished run has removed every segment as it appended it; a failed one removes
        # those its workers wrote (this run's names only, never another writer's).
        for index in range(len(units)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_segment_path(prefix, index))
        raise
    finally:
        gc.unfreeze()
        _TASK = None


def _submit_all(pool: ProcessPoolExecutor, units: Sequence[Any]) -> deque[Future]:
    """Every unit queued on the pool, in order."""
    # The workers are forked by the first submit. Ctrl-C is held meanwhile: landing in a fork
    # hook, Python would print it as ignored and the run would go on. It is raised here, in the
    # parent, once they exist.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return deque(pool.submit(_run_unit, index, unit) for index, unit in enumerate(units))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _append_segments(
    writer: AtomicJsonlWriter,
    units: Sequence[Any],
    futures: deque[Future],
    stats: Tally,
    on_unit_done: Callable[[Any], None] | None,
) -> None:
    """Each unit's segment appended to `writer` as soon as it and those before it are done."""
    for unit in units:
        # Futures are dropped once their unit is appended: each holds its unit's counters.
        segment, lines, unit_stats = futures.popleft().result()
        writer.append_file(segment, lines)
        os.unlink(segment)
        stats.merge(unit_stats)
        if on_unit_done is not None:
            on_unit_done(unit)


def _segment_path(prefix: str, index: int) -> str:
    return f"{prefix}{index:06d}.tmp"


# ---------------------------------------------------------------------------
# The command line's backfill: a whole round into one ledger
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CellUnit:
    """A run of cells of one campaign: manifest entry index, first and past-last cell."""

    entry: int
    start: int
    stop: int


@dataclass(frozen=True)
class ProposerUnit:
    """Every proposer shot of the round (they are few; one unit)."""


def round_units(manifest: RoundManifest, cells_per_unit: int | None = None) -> list[CellUnit | ProposerUnit]:
    # CELLS_PER_UNIT read at call time, so a test can cut a small round into many units.
    cells_per_unit = cells_per_unit or CELLS_PER_UNIT
    units: list[CellUnit | ProposerUnit] = []
    for index, entry in enumerate(manifest.entries):
        for start in range(0, len(entry.cells), cells_per_unit):
            units.append(CellUnit(index, start, min(start + cells_per_unit, len(entry.cells))))
    units.append(ProposerUnit())
    return units


class _RoundProducer:
    """Lines of one unit of a round; each worker opens its own store connection."""

    def __init__(
        self, manifest: RoundManifest, context: LineContext, stores: StorePerProcess, claude_projects_dir: Any
    ):
        self.manifest, self.context = manifest, context
        self.stores, self.claude_projects_dir = stores, claude_projects_dir

    def __call__(self, unit: CellUnit | ProposerUnit) -> Iterator[dict[str, Any]]:
        if isinstance(unit, ProposerUnit):
            yield from proposer_lines(self.manifest, self.context, self.claude_projects_dir)
            return
        store = self.stores.get()
        yield from episode_lines(
            cell_rows(unit_manifest(self.manifest, unit), self.context), store, self.context
        )

    def close(self) -> None:
        self.stores.close()


def unit_manifest(manifest: RoundManifest, unit: CellUnit) -> RoundManifest:
    """The manifest narrowed to the cells of one unit (for the join functions that walk a manifest)."""
    entry = manifest.entries[unit.entry]
    return RoundManifest(
        out_dir=manifest.out_dir,
        provenance=manifest.provenance,
        instances=manifest.instances,
        entries=[_with_cells(entry, entry.cells[unit.start : unit.stop])],
    )


def _with_cells(entry: CampaignEntry, cells: Sequence[CellRecord]) -> CampaignEntry:
    return replace(entry, cells=cells)


def backfill_to_file(
    out_dir: str | os.PathLike[str],
    ledger_path: str | os.PathLike[str],
    *,
    opencode_db: str | os.PathLike[str],
    claude_projects_dir: str | os.PathLike[str],
    captured_at: str | None = None,
    workers: int | None = None,
    on_cells_done: Callable[[int, int], None] | None = None,
) -> tuple[RoundManifest, BackfillStats]:
    """Backfill one round into `ledger_path` on `workers` processes (default: every core).

    The manifest is built first, so corrupt evidence fails before anything is written; the
    ledger appears atomically and only when complete.
    """
    manifest = build_manifest(out_dir)
    context = line_context(manifest, captured_at)
    units = round_units(manifest)
    total_cells = sum(len(entry.cells) for entry in manifest.entries)
    done = 0

    def unit_done(unit: CellUnit | ProposerUnit) -> None:
        nonlocal done
        if isinstance(unit, CellUnit) and on_cells_done is not None:
            done += unit.stop - unit.start
            on_cells_done(done, total_cells)

    with StorePerProcess.probe(opencode_db) as stores, LedgerWriter(ledger_path) as writer:
        producer = _RoundProducer(manifest, context, stores, claude_projects_dir)
        stats = write_units(
            writer, units, producer, workers=workers or default_workers(), on_unit_done=unit_done
        )
    stats.opencode_db_available = stores.available
    return manifest, stats
