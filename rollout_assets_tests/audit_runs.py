"""One audit from the files, for a single question: each recounts what it needs and returns
that check's verdict (the asset checks share one recount of each instead)."""

from __future__ import annotations

from pathlib import Path

from rollout_assets import audit
from rollout_assets.audit import AuditResult
from rollout_assets.audit.store_counts import ClaimedSessions
from rollout_assets.audit.stores import StoreReading


def audit_supervisors(out_dir: Path, ledger_path: Path) -> AuditResult:
    return audit.supervisors_verdict(audit.recount_inputs(out_dir, None), audit.recount_ledger(ledger_path))


def audit_workers(out_dir: Path, ledger_path: Path, opencode_db: Path) -> AuditResult:
    return audit.workers_verdict(audit.recount_inputs(out_dir, opencode_db), audit.recount_ledger(ledger_path))


def audit_proposers(out_dir: Path, ledger_path: Path) -> AuditResult:
    return audit.proposers_verdict(audit.recount_inputs(out_dir, None), audit.recount_ledger(ledger_path))


def audit_inputs_match(
    out_dir: Path, ledger_path: Path, opencode_db: Path, claude_projects: Path | None = None
) -> AuditResult:
    return audit.inputs_match_verdict(
        audit.recount_inputs(out_dir, opencode_db, claude_projects=claude_projects),
        audit.recount_ledger(ledger_path),
    )


def audit_integrity(ledger_path: Path) -> AuditResult:
    return audit.integrity_verdict(audit.recount_ledger(ledger_path))


def audit_stats(ledger_path: Path, stats_path: Path) -> AuditResult:
    return audit.stats_verdict(audit.recount_ledger(ledger_path), stats_path)


def cells_without_worker_list(out_dir: Path) -> list[str]:
    """Cells whose arm ran (runDir known) but whose result.json is missing or unreadable."""
    return audit.recount_inputs(out_dir, None).cells_without_worker_list


def count_sessions(reading: StoreReading, session_ids: set[str]) -> dict[str, tuple[int, int, int]]:
    """The gap proofs' grouped count of `session_ids` (each claimed by a line of its own) in the
    copy `reading` read: (message rows, part rows that make a message, chat messages) of each
    session with message rows."""
    claimed = ClaimedSessions()
    try:
        claimed.claim_lines(enumerate(sorted(session_ids), 1))
        why = claimed.count(reading)
        assert why is None, why
        return claimed.items()
    finally:
        claimed.close()
