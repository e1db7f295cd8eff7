"""Transcripts a rebuilt ledger would lose.

The stores a ledger is built from get garbage-collected: by the time a round is built again (a
late receipt, a cell added, a file touched), a session or transcript its current ledger holds
may be gone from them. Rebuilding would then write a gap line where the ledger held the full
transcript, and the transcript would be lost for good, which is what the ledger is there to
prevent. So before a ledger is replaced, the transcripts it holds are compared with those of
the new one.

A line holds a transcript when it is a worker or proposer line with messages. Its rollout_id
names the invocation and, for a worker, the session (ids.py), so "the same transcript" is "the
same id with messages". A transcript is lost when the new ledger still has its invocation (the
worker's supervisor and cwd; the proposer's shot) but not that id with messages: the line became
a gap, or the cwd's session is gone from the store. A transcript whose invocation left the round
(a cell removed) is not counted: the round no longer asks for it.

Reading a whole ledger costs about as much as parsing it once, so each ledger carries a digest
of the ids of its transcripts (order-free: a sum of hashes). When the digests of the current
and the new ledger agree, both hold the same transcripts and nothing is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.ledger import decode_record

_DIGEST_MODULUS = 1 << 128


def holds_transcript(line: dict[str, Any]) -> bool:
    return line["role"] in ("worker", "proposer") and len(line["messages"]) > 0


def _hash(rollout_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(rollout_id.encode("utf-8", "surrogatepass"), digest_size=16).digest())


@dataclass
class TranscriptDigest:
    """The ids of a ledger's lines that hold a transcript, as a count and an order-free sum of
    their 128-bit hashes: equal digests mean equal sets, whatever order the lines came in."""

    count: int = 0
    total: int = 0

    def add(self, line: dict[str, Any]) -> None:
        if holds_transcript(line):
            self.count += 1
            self.total = (self.total + _hash(line["rollout_id"])) % _DIGEST_MODULUS

    def merge(self, other: TranscriptDigest) -> None:
        self.count += other.count
        self.total = (self.total + other.total) % _DIGEST_MODULUS

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "digest": f"{self.total:032x}"}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TranscriptDigest:
        return cls(count=value["count"], total=int(value["digest"], 16))


@dataclass(frozen=True)
class LostTranscript:
    role: str
    rollout_id: str
    candidate_id: str
    instance_id: str
    transcript_ref: str | None

    def describe(self) -> str:
        return f"{self.role} {self.transcript_ref} ({self.candidate_id} {self.instance_id}, rollout {self.rollout_id})"


def lost_transcripts(current_ledger: Path, new_lines: Iterable[dict[str, Any]]) -> list[LostTranscript]:
    """The transcripts `current_ledger` holds that a ledger of `new_lines` (its worker and
    proposer lines; supervisor lines hold none) would lose, in the current ledger's order.

    Lines of the current ledger that cannot be parsed are passed over: what cannot be read
    cannot be kept either.
    """
    kept: set[str] = set()
    worker_invocations: set[tuple[str, str]] = set()
    proposer_invocations: set[str] = set()
    for line in new_lines:
        if holds_transcript(line):
            kept.add(line["rollout_id"])
        if line["role"] == "worker":
            worker_invocations.add((line["parent_rollout_id"], line["outcome"]["metrics"]["worker_cwd"]))
        elif line["role"] == "proposer":
            proposer_invocations.add(line["rollout_id"])
    lost: list[LostTranscript] = []
    with open(current_ledger, "rb") as ledger:
        for raw in ledger:
            try:
                line = decode_record(raw)
                if not holds_transcript(line) or line["rollout_id"] in kept:
                    continue
                if line["role"] == "worker":
                    still_asked = (line["parent_rollout_id"], line["outcome"]["metrics"]["worker_cwd"]) in worker_invocations
                else:
                    still_asked = line["rollout_id"] in proposer_invocations
                if still_asked:
                    lost.append(
                        LostTranscript(
                            line["role"],
                            line["rollout_id"],
                            line["candidate_id"],
                            line["task"]["instance_id"],
                            line["artifacts"]["transcript_ref"],
                        )
                    )
            except (ValueError, KeyError, TypeError):
                continue
    return lost
