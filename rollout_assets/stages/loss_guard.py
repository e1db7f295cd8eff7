"""The transcript-loss policy of the ledger stage: a rebuilt ledger may not replace the
round's current one when it would drop or shorten a transcript that one holds (the
comparison itself is backfill/losses.py). The current ledger then stays, and the error lists
every transcript it would lose; an operator who means to drop them moves the ledger aside."""

from __future__ import annotations

import itertools

from rollout_assets.backfill.losses import LostTranscript, TranscriptDigest, lost_transcripts
from rollout_assets.errors import RoundError
from rollout_assets.io import file_identity, read_json_file
from rollout_assets.ledger import iter_jsonl
from rollout_assets.stages.layout import RoundOutputs


class TranscriptLossError(RoundError, RuntimeError):
    """The rebuilt ledger would drop or shorten transcripts the current one holds (see
    backfill/losses.py); `lost` lists them all."""

    def __init__(self, message: str, lost: list[LostTranscript]):
        super().__init__(message)
        self.lost = lost


def refuse_to_lose_transcripts(outputs: RoundOutputs, transcripts: TranscriptDigest | None) -> None:
    """Raise TranscriptLossError when the ledger being written would drop or shorten a
    transcript the round's current ledger holds; the current ledger then stays.

    `transcripts` is the digest of the new ledger's transcripts (None when unknown). The
    current ledger is read only when its recorded digest differs from the new one's, or when
    it has none (a ledger the ledger stage did not write, or written by an older version).
    """
    if not outputs.ledger.exists():
        return
    try:
        recorded = read_json_file(outputs.ledger_stats)
    except (OSError, ValueError):
        recorded = None
    if (
        transcripts is not None
        and isinstance(recorded, dict)
        and recorded.get("ledger") == file_identity(outputs.ledger)
        and recorded.get("transcripts") == transcripts.to_json()
    ):
        return
    # Supervisor lines hold no transcript.
    new_lines = itertools.chain(iter_jsonl(outputs.worker_sessions), iter_jsonl(outputs.proposer_transcripts))
    lost = lost_transcripts(outputs.ledger, new_lines)
    if lost:
        examples = "; ".join(transcript.describe() for transcript in lost[:3])
        raise TranscriptLossError(
            f"{outputs.ledger}: the rebuilt ledger would drop or shorten {len(lost)} transcript(s) this ledger "
            "holds (gone from the stores or unreadable there, no longer reached from the round's inputs, or "
            f"converted differently by this version), among them {examples}. The ledger is kept as it is. "
            "To replace it anyway, move it aside (it keeps those transcripts) and materialize rollout_ledger again.",
            lost,
        )
