"""Asset checks, evaluated and recorded per round, that prove no invocation was dropped.

Each check is partitioned like its asset (so its result is stored per round) and recounts
from the inputs by its own path (`rollout_assets.audit`), never through the join it verifies.
The blocking ones stop a failing round before `rollout_stats` (and anything downstream)
is materialized.

The checks of one run share two recounts: the round's inputs, walked once, and the ledger,
read once; and the gap and usage checks one count of the worker lines' sessions' rows (see
`_RunRecounts`). The warning on `campaign_cells` walks only the cells; the rest of the inputs
recount, with the audit's own copy of the opencode store, is made by the first ledger check,
after the worker stage has read the store and removed its snapshot: two copies of the store
in the page cache at once made the second wait on the disk (docs/performance.md).
"""

from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from rollout_assets import audit
from rollout_assets.audit.cells import CellsRecount, recount_cells
from rollout_assets.defs.constants import CAMPAIGN_CELLS, ROLLOUT_LEDGER, ROLLOUT_STATS
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.stages import file_identity
from rollout_assets.stages.memory import objects_frozen, return_freed_memory


class _RunRecounts:
    """The recounts a run's checks compare, computed by the first check that needs one and
    reused by the others: without this, six checks would walk the round's cells three times
    and read a ledger of hundreds of MB four times.

    The steps of a run share this process under the project's in-process executor; under
    another executor each check simply recounts for itself. One entry of each kind, keyed by
    run and round, plus the ledger file's identity: nothing carries over to another run, and
    a ledger rewritten during the run is read again.
    """

    def __init__(self) -> None:
        # The walk of the cells made for the campaign_cells check, until the inputs recount
        # of the same run and round takes it.
        self._cells: tuple[Any, CellsRecount] | None = None
        self._inputs: tuple[Any, audit.InputsRecount] | None = None
        self._ledger: tuple[Any, audit.LedgerRecount] | None = None
        self._sessions: tuple[Any, audit.LineSessions] | None = None

    def inputs(
        self, context: AssetCheckExecutionContext, out_dir: Path, opencode_db: Path, claude_projects: Path
    ) -> audit.InputsRecount:
        key = (context.run.run_id, str(out_dir), str(opencode_db), str(claude_projects))
        if self._inputs is None or self._inputs[0] != key:
            self._inputs = self._sessions = None  # nothing previous kept alive while the next is built
            cells = self._cells[1] if self._cells is not None and self._cells[0] == key[:2] else None
            self._cells = None  # consumed by this recount, or of another run
            return_freed_memory()  # of the steps before
            self._inputs = (
                key,
                objects_frozen(
                    lambda: audit.recount_inputs(out_dir, opencode_db, claude_projects=claude_projects, cells=cells)
                ),
            )
        return self._inputs[1]

    def cells_without_worker_list(self, context: AssetCheckExecutionContext, out_dir: Path) -> list[str]:
        """The cells whose workers ran but cannot be listed: from this run's inputs recount when
        there is one, else from a walk of the cells that the inputs recount takes over later."""
        key = (context.run.run_id, str(out_dir))
        if self._inputs is not None and self._inputs[0][:2] == key:
            return self._inputs[1].cells_without_worker_list
        if self._cells is None or self._cells[0] != key:
            self._cells = None
            return_freed_memory()  # of the steps before
            self._cells = (key, objects_frozen(lambda: recount_cells(out_dir, None)))
        return self._cells[1].without_list

    def ledger(self, context: AssetCheckExecutionContext, ledger_path: Path) -> audit.LedgerRecount:
        key = (context.run.run_id, str(ledger_path), *file_identity(ledger_path))
        if self._ledger is None or self._ledger[0] != key:
            self._ledger = self._sessions = None
            return_freed_memory()
            self._ledger = (key, objects_frozen(lambda: audit.recount_ledger(ledger_path)))
        return self._ledger[1]

    def sessions(self, inputs: audit.InputsRecount, ledger: audit.LedgerRecount) -> audit.LineSessions:
        """The rows of the worker lines' sessions, counted for the recounts `inputs()` and
        `ledger()` last returned (the two the caller holds)."""
        assert self._inputs is not None and self._ledger is not None
        assert self._inputs[1] is inputs and self._ledger[1] is ledger
        key = (self._inputs[0], self._ledger[0])
        if self._sessions is None or self._sessions[0] != key:
            self._sessions = None
            return_freed_memory()
            self._sessions = (key, objects_frozen(lambda: audit.LineSessions(inputs, ledger)))
        return self._sessions[1]


_RECOUNTS = _RunRecounts()


def _inputs(context: AssetCheckExecutionContext, locations: RoundLocations) -> audit.InputsRecount:
    round_dir = locations.round_dir(context.partition_key)
    return _RECOUNTS.inputs(context, round_dir, locations.opencode.db_path, locations.claude.path)


def _ledger(context: AssetCheckExecutionContext, locations: RoundLocations) -> audit.LedgerRecount:
    return _RECOUNTS.ledger(context, locations.outputs(context.partition_key).ledger)


def _recounts_with_sessions(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> tuple[audit.InputsRecount, audit.LedgerRecount, audit.LineSessions]:
    inputs, ledger = _inputs(context, locations), _ledger(context, locations)
    return inputs, ledger, _RECOUNTS.sessions(inputs, ledger)


def _result(outcome: audit.AuditResult, round_key: str) -> AssetCheckResult:
    return AssetCheckResult(
        passed=outcome.passed,
        metadata={
            "round": round_key,
            "expected": outcome.expected,
            "seen": outcome.seen,
            "missing": outcome.missing,
            **outcome.details,
            "sample": MetadataValue.json(outcome.sample),
        },
    )


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_cell_has_one_supervisor_line(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every campaign cell of the round has exactly one supervisor line."""
    inputs, ledger = _inputs(context, locations), _ledger(context, locations)
    return _result(audit.supervisors_verdict(inputs, ledger), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_worker_session_accounted_for(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every worker cwd of any result.json has a worker line; every opencode session of them appears once per cell listing its cwd."""
    inputs, ledger = _inputs(context, locations), _ledger(context, locations)
    return _result(audit.workers_verdict(inputs, ledger), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_shot_receipt_has_one_proposer_line(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every proposer shot receipt of the round has exactly one proposer line."""
    inputs, ledger = _inputs(context, locations), _ledger(context, locations)
    return _result(audit.proposers_verdict(inputs, ledger), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_line_is_its_invocation_in_order(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """The lines are exactly the invocations the inputs name, in ledger order: ids follow from
    the inputs and from each line's fields, run_id is the round's, supervisor and worker
    rewards are the cell's verdict; each line's role, parent, reward_source and gap are the
    ones the inputs give it."""
    inputs, ledger = _inputs(context, locations), _ledger(context, locations)
    return _result(audit.inputs_match_verdict(inputs, ledger), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_gap_is_warranted(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every gap line's reason holds in the inputs, read by the audit's own path (no session of
    the cwd in the store, no message and part rows that make a message, no transcript starting
    inside the shot's window, a store or file the audit cannot read either, ...); every proposer
    line joined to a transcript names a file of its worktree's project folder that starts
    inside the shot's window."""
    inputs, ledger, sessions = _recounts_with_sessions(context, locations)
    return _result(audit.gaps_warranted_verdict(inputs, ledger, sessions), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def every_usage_is_its_transcripts(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every line's token counts are its transcript's, summed by the audit's own reading: a
    proposer's and each sub-agent's the final usage of each API message of its Claude
    transcript, a worker's (and its cost) its opencode session's row or assistant messages, a
    supervisor's none; a count no record holds is null, never 0."""
    inputs, ledger, sessions = _recounts_with_sessions(context, locations)
    return _result(audit.usage_verdict(inputs, ledger, sessions), context.partition_key)


@asset_check(asset=ROLLOUT_LEDGER, partitions_def=ROUNDS, blocking=True)
def ledger_lines_valid_and_linked(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Every line validates, empty transcripts carry a gap reason, ids are unique, parents exist."""
    return _result(audit.integrity_verdict(_ledger(context, locations)), context.partition_key)


@asset_check(asset=ROLLOUT_STATS, partitions_def=ROUNDS, blocking=True)
def stats_reconcile_with_ledger(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """lines = Σ per role = full transcripts + gap lines; reward-labeled = lines with a reward;
    gap lines by reason = the ledger's gaps by their wording; per role, rewards labeled and their
    mean, lines with a cost and their sum, as the ledger holds them; the join counters (sessions
    joined, empty or missed, shots joined or missed, cells without a worker list) as the lines
    are, and the store's availability as no worker line contradicts."""
    key = context.partition_key
    return _result(audit.stats_verdict(_ledger(context, locations), locations.outputs(key).stats), key)


@asset_check(asset=CAMPAIGN_CELLS, partitions_def=ROUNDS, blocking=False)
def every_cell_lists_its_workers(
    context: AssetCheckExecutionContext, locations: RoundLocations
) -> AssetCheckResult:
    """Warns about cells whose workers ran but cannot be listed: result.json missing or unreadable,
    or counting spawned workers without naming their cwds."""
    key = context.partition_key
    cells = _RECOUNTS.cells_without_worker_list(context, locations.round_dir(key))
    return AssetCheckResult(
        passed=not cells,
        severity=AssetCheckSeverity.WARN,
        metadata={"round": key, "cells_without_worker_list": len(cells), "cells": MetadataValue.json(cells)},
    )


ROUND_CHECKS = [
    every_cell_has_one_supervisor_line,
    every_worker_session_accounted_for,
    every_shot_receipt_has_one_proposer_line,
    every_line_is_its_invocation_in_order,
    every_gap_is_warranted,
    every_usage_is_its_transcripts,
    ledger_lines_valid_and_linked,
    stats_reconcile_with_ledger,
    every_cell_lists_its_workers,
]
