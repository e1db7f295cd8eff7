"""The first pass over a ledger: a few fixed-size keys per line, nothing of the transcript.

The keys are what every decision needs (role, instance, reward, the filter's reason, the
digests of the transcript and of its prompt) plus where the line lies in the file, so the
second pass can read exactly the lines it writes. Every line is read strictly and validated
against the line schema here, once: the second pass reads the same bytes of the same open file
(a LedgerSnapshot), so a line it reads is one this pass accepted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.errors import RoundError
from rollout_assets.ledger.io import LedgerReadError, decode_record, parse_valid_line
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.training.filter import TrainingFilter, line_drop_reason
from rollout_assets.training.keys import LineKey, SpilledKeys
from rollout_assets.training.prepare import scan_transcript


class TrainingInputError(RoundError, ValueError):
    """A ledger the training rows cannot be built from (names the file and line)."""


@dataclass
class LedgerScan:
    """The first pass: one key per line, in ledger order (on disk: keys.py), and the SHA-256 of
    the bytes read."""

    keys: SpilledKeys = field(default_factory=SpilledKeys)
    sha256: str = ""


def read_line_at(snapshot: LedgerSnapshot, offset: int, length: int) -> dict[str, Any]:
    """The line a key points at (its offset and length), parsed: the second pass, on the bytes
    the first pass validated."""
    return decode_record(snapshot.read(offset, length))


def scan_ledger(snapshot: LedgerSnapshot, settings: TrainingFilter) -> LedgerScan:
    """One key per line of the ledger, every line read strictly and validated against the
    line schema: a line that is not a valid tangle.rollout.v1 line is TrainingInputError
    naming `file:line`."""
    scan, digest = LedgerScan(), hashlib.sha256()
    try:
        for index, (offset, raw) in enumerate(snapshot.lines()):
            digest.update(raw)
            scan.keys.append(_key(index, offset, raw, snapshot.path, settings))
    except BaseException:
        scan.keys.close()
        raise
    scan.sha256 = digest.hexdigest()
    return scan


def _key(index: int, offset: int, raw: bytes, path: Path, settings: TrainingFilter) -> LineKey:
    try:
        line = parse_valid_line(raw, path, index + 1)
    except LedgerReadError as error:
        raise TrainingInputError(str(error)) from None
    reason = line_drop_reason(line, settings)
    try:
        # Digests and length of the transcript as the rows hold it (identifiers normalized).
        transcript = scan_transcript(line, settings, trainable=reason is None)
    except TypeError:  # orjson.JSONEncodeError: a lone UTF-16 surrogate, which UTF-8 cannot carry
        raise TrainingInputError(
            f"{path}:{index + 1}: its transcript holds a lone UTF-16 surrogate, which training files "
            "(UTF-8) cannot carry"
        ) from None
    return LineKey(
        index=index,
        offset=offset,
        length=len(raw),
        rollout_id=line["rollout_id"],
        role=line["role"],
        instance_id=line["task"]["instance_id"],
        reward=line["outcome"]["reward"],
        reason="too_long" if reason is None and transcript.too_long else reason,
        digest=transcript.digest,
        prompt_digest=transcript.prompt_digest,
        has_completion=transcript.has_completion,
    )
