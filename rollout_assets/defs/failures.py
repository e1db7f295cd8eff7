"""How a `RoundError` (this round cannot be materialized as it is) fails a step: a `Failure`
whose description is the error's one sentence and whose metadata names the round and the
error, and says when the failure may pass (`may_pass`). Anything else that escapes a step is
a bug and keeps its stack trace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import DagsterInstance, Failure, MetadataValue

from rollout_assets.defs.constants import MAY_PASS
from rollout_assets.defs.instance import ledger_checks
from rollout_assets.errors import RoundError
from rollout_assets.ledger import WriterBusyError
from rollout_assets.stages import TranscriptLossError

# A ledger that would lose transcripts names three in its sentence; its metadata lists more.
_LOST_TRANSCRIPTS_LISTED = 200


def may_pass(error: BaseException) -> bool:
    """Whether the error says nothing of the round itself, so that the same run started a
    little later may pass: another run or process is writing the round, a store is busy.
    An error class says so with a class attribute `may_pass = True`; another writer of the
    same file (WriterBusyError) is one too."""
    return getattr(error, "may_pass", False) is True or isinstance(error, WriterBusyError)


def _details(error: RoundError) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if isinstance(error, TranscriptLossError):
        details = {
            "transcripts_dropped": len(error.lost),
            "transcripts_dropped_list": MetadataValue.json(
                [transcript.describe() for transcript in error.lost[:_LOST_TRANSCRIPTS_LISTED]]
            ),
        }
    if may_pass(error):
        # Read by the sensor, which retries a run that failed only for such reasons.
        details[MAY_PASS] = True
    return details


def round_failure(error: RoundError, round_key: str | None = None) -> Failure:
    """The step failure for `error`, of round `round_key` (None for a step of no one round)."""
    metadata: dict[str, Any] = {} if round_key is None else {"round": round_key}
    return Failure(
        description=str(error), metadata={**metadata, "error": type(error).__name__, **_details(error)}
    )


@contextmanager
def round_errors_fail_the_step(round_key: str | None = None) -> Iterator[None]:
    """Turn a `RoundError` raised inside into the step's `Failure` (see `round_failure`)."""
    try:
        yield
    except RoundError as error:
        raise round_failure(error, round_key) from error


def refuse_unless_ledger_checks_passed(instance: DagsterInstance, key: str, doing: str) -> None:
    """Fail the step unless the round's latest ledger passed its blocking checks. In a run of
    the round those checks stop the downstream steps when they fail; a step selected alone (the
    UI's "Materialize" on that asset) is stopped by nothing else, so the recorded verdicts are asked."""
    checks = ledger_checks(instance, [key])[key]
    if not checks.passed:
        raise Failure(
            description=f"round {key}: not {doing}, {checks.problem()}; "
            "materialize rollout_ledger (with its checks) for this round first",
            metadata={
                "round": key,
                "failed_checks": list(checks.failed),
                "not_evaluated_checks": list(checks.not_evaluated),
            },
        )
