"""The rollout_ledger stage: the round's ledger assembled from the stage files, atomically,
and a record of its counters (and transcripts) for rollout_stats.

Every line was validated by the stage that wrote it; here they are merged in ledger order
(each supervisor, then its workers; then the proposers), worker and proposer lines copied as
stored, so the file is the same the one-process backfill writes. The worker lines are placed
by the order their stage recorded, not parsed again: each cell's run of them is found by
counting line ends, and the kernel copies it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollout_assets.backfill import BackfillStats
from rollout_assets.backfill.losses import TranscriptDigest
from rollout_assets.io import LineRuns, file_identity, read_json_file, write_json_atomic
from rollout_assets.ledger import AtomicJsonlWriter, decode_record
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT
from rollout_assets.stages.cells import read_cell_rows
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.loss_guard import refuse_to_lose_transcripts
from rollout_assets.stages.records import StageMismatchError, check_stages_agree


def write_rollout_ledger(
    outputs: RoundOutputs, opencode_db: str | os.PathLike[str], claude_projects_dir: str | os.PathLike[str]
) -> BackfillStats:
    """Assemble the round's ledger from the stage files, atomically; returns its counters.

    The stage files must agree with each other, with the round as it is and with the stores
    configured now (check_stages_agree), and the new ledger may not lose a transcript the
    current one holds (refuse_to_lose_transcripts).
    """
    manifest_record = check_stages_agree(outputs, opencode_db, claude_projects_dir)
    summary = _worker_sessions_summary(outputs)
    stats = BackfillStats(**summary["counters"])
    # None: a worker stage file of an older version (or damaged), whose transcripts are not known.
    transcripts = TranscriptDigest.from_json(summary.get("transcripts"))
    with LineRuns(outputs.worker_sessions) as worker_lines, AtomicJsonlWriter(outputs.ledger) as writer:
        _write_supervisors_and_workers(outputs, writer, worker_lines, summary["parents"], stats)
        _write_proposers(outputs, writer, stats, transcripts)
        # Before the ledger is renamed into place: the stage must not fail after it replaced it.
        counters = dataclasses.asdict(stats)
        refuse_to_lose_transcripts(outputs, transcripts)
        # The stats describe the ledger beside them. rollout_stats runs only once the new ledger
        # passes its blocking checks, so old stats left here would outlive a ledger that failed
        # them. Removed only now: a stage that fails before this keeps the ledger and its stats.
        outputs.stats.unlink(missing_ok=True)
    _write_ledger_record(outputs, counters, transcripts, manifest_record)
    return stats


def _worker_sessions_summary(outputs: RoundOutputs) -> dict[str, Any]:
    """The worker stage's summary, refused unless it describes the worker lines on disk."""
    summary = read_json_file(outputs.worker_sessions_summary)
    if outputs.worker_sessions.stat().st_size != summary["bytes"]:
        raise StageMismatchError(
            f"{outputs.worker_sessions} is not the file {outputs.worker_sessions_summary} describes; "
            "re-materialize worker_sessions"
        )
    return summary


def _write_supervisors_and_workers(
    outputs: RoundOutputs,
    writer: AtomicJsonlWriter,
    worker_lines: LineRuns,
    parents: list[list[Any]],
    stats: BackfillStats,
) -> None:
    """Each cell's supervisor line, then its run of worker lines (`parents`: [supervisor
    rollout_id, line count] per run, in order), copied as byte ranges of the worker stage file."""
    runs = iter(parents)
    pending = next(runs, None)
    for row in read_cell_rows(outputs):
        supervisor = row.supervisor
        writer.write(supervisor)
        stats.observe(supervisor)
        if pending is not None and pending[0] == supervisor["rollout_id"]:
            start, stop = worker_lines.next_lines(pending[1])
            if stop < 0:
                break  # fewer lines than recorded: reported below
            writer.append_range(worker_lines.file, start, stop - start, pending[1])
            pending = next(runs, None)
    if pending is not None or not worker_lines.at_end():
        raise StageMismatchError(
            f"{outputs.worker_sessions}: worker lines of {pending[0] if pending else 'some cell'} follow no "
            f"supervisor of {outputs.campaign_cells} in order; re-materialize worker_sessions"
        )


def _encoded_lines(path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """(the line as stored, the line parsed) of a stage file of ledger lines."""
    with open(path, "rb") as handle:
        for raw in handle:
            yield raw, decode_record(raw)


def _write_proposers(
    outputs: RoundOutputs,
    writer: AtomicJsonlWriter,
    stats: BackfillStats,
    transcripts: TranscriptDigest | None,
) -> None:
    """The proposer lines as stored, counted, their transcripts added to the digest."""
    for raw, line in _encoded_lines(outputs.proposer_transcripts):
        writer.write_encoded(raw)
        stats.observe(line)
        if transcripts is not None:
            transcripts.add(line)


def _write_ledger_record(
    outputs: RoundOutputs,
    counters: dict[str, Any],
    transcripts: TranscriptDigest | None,
    manifest_record: dict[str, Any],
) -> None:
    """The counters of exactly the ledger in place (its identity: inode, size, mtime), for
    rollout_stats, which runs only once the checks passed and refuses a ledger this record does
    not name. The new ledger is in place already: failing to write the record must not fail the
    stage (rollout_stats then asks for the ledger to be materialized again)."""
    record: dict[str, Any] = {"ledger": file_identity(outputs.ledger), "counters": counters}
    if transcripts is not None:
        record["transcripts"] = transcripts.to_json()
    if isinstance(manifest_record.get(INPUT_FINGERPRINT), str):
        record[INPUT_FINGERPRINT] = manifest_record[INPUT_FINGERPRINT]
    try:
        write_json_atomic(outputs.ledger_stats, record)
    except OSError:
        pass
