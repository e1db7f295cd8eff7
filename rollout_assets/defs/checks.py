"""Asset checks, evaluated and recorded per round, that prove no invocation was dropped.

Each check is partitioned like its asset (so its result is stored per round) and recounts
from the inputs by its own path (`rollout_assets.audit`), never through the join it verifies.
The blocking ones stop a failing round before `rollout_stats` (and anything downstream)
is materialized.
"""


from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    asset_check,
)

from rollout_assets import audit
from rollout_assets.defs.assets import campaign_cells, rollout_ledger, rollout_stats
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import LedgerRoot, OpencodeDatabase, RoundsRoot


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


@asset_check(asset=rollout_ledger, partitions_def=ROUNDS, blocking=True)
def every_cell_has_one_supervisor_line(
    context: AssetCheckExecutionContext, rounds_root: RoundsRoot, ledger_root: LedgerRoot
) -> AssetCheckResult:
    """Every campaign cell of the round has exactly one supervisor line."""
    key = context.partition_key
    outcome = audit.audit_supervisors(rounds_root.round_dir(key), ledger_root.outputs(key).ledger)
    return _result(outcome, key)


@asset_check(asset=rollout_ledger, partitions_def=ROUNDS, blocking=True)
def every_worker_session_accounted_for(
    context: AssetCheckExecutionContext, rounds_root: RoundsRoot, opencode: OpencodeDatabase, ledger_root: LedgerRoot
) -> AssetCheckResult:
    """Every worker cwd of any result.json has a worker line; every opencode session of them appears once."""
    key = context.partition_key
    outcome = audit.audit_workers(rounds_root.round_dir(key), ledger_root.outputs(key).ledger, opencode.db_path)
    return _result(outcome, key)


@asset_check(asset=rollout_ledger, partitions_def=ROUNDS, blocking=True)
def every_shot_receipt_has_one_proposer_line(
    context: AssetCheckExecutionContext, rounds_root: RoundsRoot, ledger_root: LedgerRoot
) -> AssetCheckResult:
    """Every proposer shot receipt of the round has exactly one proposer line."""
    key = context.partition_key
    outcome = audit.audit_proposers(rounds_root.round_dir(key), ledger_root.outputs(key).ledger)
    return _result(outcome, key)


@asset_check(asset=rollout_ledger, partitions_def=ROUNDS, blocking=True)
def ledger_lines_valid_and_linked(context: AssetCheckExecutionContext, ledger_root: LedgerRoot) -> AssetCheckResult:
    """Every line validates, empty transcripts carry a gap reason, ids are unique, parents exist."""
    key = context.partition_key
    return _result(audit.audit_integrity(ledger_root.outputs(key).ledger), key)


@asset_check(asset=rollout_stats, partitions_def=ROUNDS, blocking=True)
def stats_reconcile_with_ledger(context: AssetCheckExecutionContext, ledger_root: LedgerRoot) -> AssetCheckResult:
    """lines = Σ per role = full transcripts + gap lines; reward-labeled = lines with a reward."""
    key = context.partition_key
    outputs = ledger_root.outputs(key)
    return _result(audit.audit_stats(outputs.ledger, outputs.stats), key)


@asset_check(asset=campaign_cells, partitions_def=ROUNDS, blocking=False)
def every_cell_lists_its_workers(context: AssetCheckExecutionContext, rounds_root: RoundsRoot) -> AssetCheckResult:
    """Warns about cells whose result.json is missing or unreadable: their worker sessions cannot be listed."""
    key = context.partition_key
    cells = audit.cells_without_worker_list(rounds_root.round_dir(key))
    return AssetCheckResult(
        passed=not cells,
        severity=AssetCheckSeverity.WARN,
        metadata={"round": key, "cells_without_worker_list": len(cells), "cells": MetadataValue.json(cells)},
    )


ROUND_CHECKS = [
    every_cell_has_one_supervisor_line,
    every_worker_session_accounted_for,
    every_shot_receipt_has_one_proposer_line,
    ledger_lines_valid_and_linked,
    stats_reconcile_with_ledger,
    every_cell_lists_its_workers,
]
