"""A ledger written as Inspect eval logs: one `.eval` per (role, candidate), one sample per line.

Two passes over one open file (a LedgerSnapshot): the index (index.py) says which log each line
goes to; then each log is written by one process, its lines read again from the same file,
validated against the line schema and streamed into the log (samples.py, eval_zip.py). On a
large ledger the first pass runs in a forked process while this one imports inspect_ai, and the
logs are spread over every core (forked processes, the largest logs first); the logs are the same
bytes for any number of processes.

The folder is built beside its place and swapped in whole (rollout_assets/folder_swap.py): a
ledger that fails to read, or is replaced while it is read, leaves whatever was there as it
was. A ledger that fails to read is one sentence naming `file:line`, its first bad line.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.folder_swap import built_in_place
from rollout_assets.inspect_logs.eval_zip import EvalZipWriter, json_bytes
from rollout_assets.inspect_logs.folder import (
    LogsRecord,
    list_in_ledger_order,
    refuse_unless_replaceable,
    write_record,
)
from rollout_assets.inspect_logs.index import NO_PARENT, InspectLogsInputError, LogPlan, index_ledger
from rollout_assets.inspect_logs.samples import LinePlace, convert_line
from rollout_assets.inspect_logs.tally import LogTally
from rollout_assets.ledger.io import LedgerReadError, parse_valid_line
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.paths import real_path

# Below this size a second process costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20


@dataclass
class InspectLogsReport:
    """What was written: the folder, the ledger's line count and each log's counts."""

    folder: Path
    ledger: Path
    lines: int
    logs: list[LogTally]


def _read(fd: int, path: str, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise InspectLogsInputError(f"{path}: the ledger shrank while it was read; run again once it is written")
    return data


def _write_log(fd: int, ledger: str, plan: LogPlan, folder: Path) -> LogTally:
    """Write one log from its lines; InspectLogsInputError at the first line that fails to read."""
    from rollout_assets.inspect_logs.header import check_with_inspect, eval_header

    tally = LogTally(plan.file_name, plan.role, plan.candidate_id)
    checked: set[bool] = set()  # whether a sample with messages, and one without, was checked
    with EvalZipWriter(folder / plan.file_name) as log:
        for line_number, offset, length, parent in zip(plan.lines, plan.offsets, plan.lengths, plan.parents):
            try:
                line = parse_valid_line(_read(fd, ledger, offset, length), ledger, line_number)
            except LedgerReadError as error:
                raise InspectLogsInputError(str(error)) from None
            if (line["role"], line["candidate_id"]) != (plan.role, plan.candidate_id):
                raise InspectLogsInputError(
                    f"{ledger}:{line_number}: its role or candidate_id reads two ways (a key written twice?)"
                )
            converted = convert_line(line, LinePlace(line_number, None if parent == NO_PARENT else parent))
            # Inspect's models on one sample of each kind per log, not on each (too slow).
            if bool(line["messages"]) not in checked:
                check_with_inspect(converted.sample, converted.summary)
                checked.add(bool(line["messages"]))
            log.add(line_number, json_bytes(converted.sample), json_bytes(converted.summary))
            tally.count(line, converted)
        log.finish(eval_header(tally))
    return tally


def _write_logs(fd: int, ledger: str, plans: list[LogPlan], folder: Path) -> list[LogTally]:
    return [_write_log(fd, ledger, plan, folder) for plan in plans]


# What writing a line costs beyond its bytes, in bytes' worth: measured on the bench's x1 round,
# a line takes about 105 us and a byte 29 ns (a supervisor's gap line costs 3x its size's worth).
_LINE_COST_BYTES = 3_600


def _cost(plan: LogPlan) -> int:
    return plan.size + _LINE_COST_BYTES * len(plan.lines)


def _shares(plans: list[LogPlan], workers: int) -> list[list[LogPlan]]:
    """The logs spread over `workers` processes by their cost, the costliest first to the least
    loaded."""
    shares: list[list[LogPlan]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for plan in sorted(plans, key=lambda plan: -_cost(plan)):
        least = loads.index(min(loads))
        shares[least].append(plan)
        loads[least] += _cost(plan)
    return [share for share in shares if share]


def _write_all(snapshot: LedgerSnapshot, plans: list[LogPlan], folder: Path, workers: int) -> list[LogTally]:
    fd, ledger = snapshot.file.fileno(), str(snapshot.path)
    shares = _shares(plans, workers)
    if len(shares) <= 1:
        tallies = _write_logs(fd, ledger, plans, folder)
    else:
        first, *rest = shares
        # As the audit's recount does: the parent's objects frozen, so forked children share them.
        gc.freeze()
        try:
            with ProcessPoolExecutor(max_workers=len(rest), mp_context=multiprocessing.get_context("fork")) as pool:
                later = [pool.submit(_write_logs, fd, ledger, share, folder) for share in rest]
                tallies = _write_logs(fd, ledger, first, folder)
                for future in later:
                    tallies += future.result()
        finally:
            gc.unfreeze()
    order = {plan.file_name: index for index, plan in enumerate(plans)}
    return sorted(tallies, key=lambda tally: order[tally.file_name])


def _first_bad_line(snapshot: LedgerSnapshot) -> InspectLogsInputError | None:
    """The error of the ledger's first line that fails to read, if any."""
    for line, (_, raw) in enumerate(snapshot.lines(), start=1):
        try:
            parse_valid_line(raw, snapshot.path, line)
        except LedgerReadError as error:
            return InspectLogsInputError(str(error))
    return None


@contextlib.contextmanager
def _opened(ledger: Path | LedgerSnapshot) -> Iterator[LedgerSnapshot]:
    if isinstance(ledger, LedgerSnapshot):
        yield ledger
    else:
        with LedgerSnapshot(ledger) as snapshot:
            yield snapshot


def _index_while_importing_inspect(snapshot: LedgerSnapshot, parallel: bool) -> list[LogPlan]:
    """The first pass, and inspect_ai imported (about 2 s) for the second: on a large ledger the
    pass runs in a forked process meanwhile, so neither waits for the other."""
    fd, path = snapshot.file.fileno(), snapshot.path
    if not parallel:
        import rollout_assets.inspect_logs.header  # noqa: F401

        return index_ledger(fd, path)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        plans = pool.submit(index_ledger, fd, path)
        # Imported here, before the second pass forks: every process of it shares the import.
        import rollout_assets.inspect_logs.header  # noqa: F401

        return plans.result()


def _write_folder(snapshot: LedgerSnapshot, folder: Path, workers: int, parallel_from_bytes: int) -> list[LogTally]:
    parallel = workers > 1 and snapshot.size >= parallel_from_bytes
    plans = _index_while_importing_inspect(snapshot, parallel)
    # A symlink at the folder is followed: the folder it leads to is replaced, the link stays.
    target = real_path(folder) if os.path.islink(folder) else folder
    with built_in_place(target, lambda place: refuse_unless_replaceable(place, snapshot.path)) as build:
        tallies = _write_all(snapshot, plans, build, workers if parallel else 1)
        record = LogsRecord.of(snapshot, tallies)
        list_in_ledger_order(build, [tally.file_name for tally in tallies], record.ledger_mtime_ns)
        write_record(build, record)
        snapshot.check_unchanged()
    return tallies


def write_inspect_logs(
    ledger: Path | LedgerSnapshot,
    folder: Path,
    *,
    workers: int | None = None,
    parallel_from_bytes: int = PARALLEL_MIN_BYTES,
) -> InspectLogsReport:
    """Write the ledger's Inspect logs into `folder`, replacing it whole; the report of what was
    written. InspectLogsInputError (one sentence naming `file:line`) when a line fails to read."""
    workers = workers or len(os.sched_getaffinity(0))
    with _opened(ledger) as snapshot:
        try:
            tallies = _write_folder(snapshot, Path(folder), workers, parallel_from_bytes)
        except InspectLogsInputError as error:
            # The first pass reads fast and each process stops at the first bad line of its own
            # logs: the strict reader then names the ledger's first bad line.
            raise _first_bad_line(snapshot) or error from None
        lines = sum(tally.samples for tally in tallies)
        return InspectLogsReport(folder=Path(folder), ledger=snapshot.path, lines=lines, logs=tallies)
