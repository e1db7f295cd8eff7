"""The rollout_stats stage: the counters the ledger stage counted, stored beside the ledger
once its checks passed, for exactly the ledger they judged."""

from __future__ import annotations

from rollout_assets.backfill import BackfillStats
from rollout_assets.io import file_identity, read_json_file, write_json_atomic
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT
from rollout_assets.stages.layout import RoundOutputs
from rollout_assets.stages.records import StageMismatchError


def write_rollout_stats(outputs: RoundOutputs) -> tuple[BackfillStats, str | None]:
    """Store the counters the ledger stage counted next to the ledger, refusing a ledger that
    is no longer the file the ledger stage wrote: the checks that let this stage run judged
    that file, not one changed or replaced after it. Returns the counters and the input
    fingerprint of the inputs the ledger was built from, as round_manifest took it (None when
    its run recorded none)."""
    try:
        counted = read_json_file(outputs.ledger_stats)
    except (OSError, ValueError) as error:
        raise StageMismatchError(
            f"{outputs.ledger_stats} cannot be read ({error}), so {outputs.ledger} cannot be told to be the "
            "ledger rollout_ledger wrote and its checks judged; re-materialize rollout_ledger"
        ) from error
    try:
        identity = file_identity(outputs.ledger)
    except FileNotFoundError as error:
        raise StageMismatchError(f"{outputs.ledger} does not exist; materialize rollout_ledger") from error
    if not isinstance(counted, dict) or counted.get("ledger") != identity:
        raise StageMismatchError(
            f"{outputs.ledger} changed after rollout_ledger wrote it and its checks judged it; "
            "re-materialize rollout_ledger"
        )
    try:
        stats = BackfillStats(**counted["counters"])
    except (KeyError, TypeError) as error:
        raise StageMismatchError(
            f"{outputs.ledger_stats} does not hold the ledger's counters ({error!r}); re-materialize rollout_ledger"
        ) from error
    write_json_atomic(outputs.stats, stats.to_json())
    fingerprint = counted.get(INPUT_FINGERPRINT)
    return stats, fingerprint if isinstance(fingerprint, str) else None
