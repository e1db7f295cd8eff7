"""Transcripts a rebuilt ledger would drop.

The stores a ledger is built from get garbage-collected, and a round's own files get cleaned
up or moved: by the time a round is built again (a late receipt, a cell added, a file touched),
a session or transcript its current ledger holds may be gone, shorter, or no longer reached
from the round's inputs. Rebuilding would then write a gap line (or a shorter transcript, or
another shot's transcript, or no line at all) where the ledger held the full one, and the
transcript would be lost for good, which is what the ledger is there to prevent. So before a
ledger is replaced, the transcripts it holds are compared with those of the new one, and none
may be dropped or shortened; an operator who means to drop them moves the ledger aside.

A line holds a transcript when it is a worker or proposer line with messages. The transcript
is named without rollout ids or paths of the round, which change when the round's run_id or
folder does: its line's role, candidate, instance and rep, and its source (the opencode
session, the Claude transcript file's name). Its size is its message count and the length of
its text (contents, reasoning, tool-call arguments). A transcript is dropped when the new
ledger holds none of that name, or one smaller by either measure.

Reading a whole ledger costs about as much as parsing it once, so each ledger carries a digest
of its transcripts (names and sizes; order-free: a sum of hashes). When the digests of the
current and the new ledger agree, both hold the same transcripts and nothing is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.ledger import decode_record

_DIGEST_MODULUS = 1 << 128

# (role, candidate_id, instance_id, rep, source): one transcript of a cell or a shot.
TranscriptName = tuple[str, str, str, int, str]


def _place(line: dict[str, Any]) -> tuple[str, str, int]:
    """The cell (supervisor and worker lines) or the shot (proposer lines) a line belongs to."""
    return line["candidate_id"], line["task"]["instance_id"], line["task"]["rep"]


def transcript_name(line: dict[str, Any]) -> TranscriptName | None:
    """The name of the transcript a line holds; None for a line holding none."""
    if line["role"] not in ("worker", "proposer") or not line["messages"]:
        return None
    source = line["artifacts"]["transcript_ref"] or ""
    if line["role"] == "proposer":
        # The file's name (Claude's session id): the same transcript read from a moved or
        # copied projects folder has another path.
        source = source.rsplit("/", 1)[-1]
    return (line["role"], *_place(line), source)


def transcript_size(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(message count, characters of text): a transcript that lost messages, or whose parts
    became unreadable (a message kept with empty text), is smaller by one or the other.

    Run on every worker line of the Dagster worker stage, about 10 us a line (2% of the stage
    at 12,012 cells). The lines are valid ledger lines, where these fields are text or null;
    a damaged line of an old ledger raises TypeError or KeyError, which the comparison passes
    over."""
    characters = 0
    for message in messages:
        content = message.get("content")
        if content is not None:
            characters += len(content)
        reasoning = message.get("reasoning_content")
        if reasoning is not None:
            characters += len(reasoning)
        calls = message.get("tool_calls")
        if calls:
            for call in calls:
                characters += len(call["function"]["arguments"])
    return len(messages), characters


def _hash(name: TranscriptName, size: tuple[int, int]) -> int:
    text = "\0".join(str(part) for part in (*name, *size))
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())


@dataclass
class TranscriptDigest:
    """The transcripts of a ledger (names and sizes), as a count and an order-free sum
    of their 128-bit hashes: equal digests mean equal transcripts, whatever order the lines
    came in."""

    count: int = 0
    total: int = 0

    def add(self, line: dict[str, Any]) -> None:
        name = transcript_name(line)
        if name is not None:
            self.count += 1
            self.total = (self.total + _hash(name, transcript_size(line["messages"]))) % _DIGEST_MODULUS

    def merge(self, other: TranscriptDigest) -> None:
        self.count += other.count
        self.total = (self.total + other.total) % _DIGEST_MODULUS

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "digest": f"{self.total:032x}"}

    @classmethod
    def from_json(cls, value: Any) -> TranscriptDigest | None:
        """The digest `to_json` wrote; None for anything else (a damaged or older file)."""
        try:
            return cls(count=int(value["count"]), total=int(value["digest"], 16))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class LostTranscript:
    role: str
    candidate_id: str
    instance_id: str
    rep: int
    source: str
    size: tuple[int, int]  # (messages, characters) in the current ledger
    kept: tuple[int, int] | None  # in the new ledger; None when it holds none of that name

    def describe(self) -> str:
        place = "rep" if self.role == "worker" else "shot"
        what = f"{self.role} {self.source} of {self.candidate_id} {self.instance_id} {place} {self.rep}"
        messages, characters = self.size
        if self.kept is None:
            return f"{what} ({messages} messages, dropped)"
        return f"{what} ({messages} messages of {characters} characters, shortened to {self.kept[0]} of {self.kept[1]})"


def lost_transcripts(current_ledger: Path, new_lines: Iterable[dict[str, Any]]) -> list[LostTranscript]:
    """The transcripts `current_ledger` holds that a ledger of `new_lines` (its lines in any
    order; supervisor lines, which hold none, may be left out) would drop or shorten, in the
    current ledger's order.

    Lines of the current ledger that cannot be parsed are passed over: what cannot be read
    cannot be kept either.
    """
    kept: dict[TranscriptName, tuple[int, int]] = {}
    for line in new_lines:
        name = transcript_name(line)
        if name is not None:
            size = transcript_size(line["messages"])
            kept[name] = max(kept.get(name, size), size)
    lost: list[LostTranscript] = []
    with open(current_ledger, "rb") as ledger:
        for raw in ledger:
            try:
                line = decode_record(raw)
                name = transcript_name(line)
                if name is None:
                    continue
                size = transcript_size(line["messages"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            now = kept.get(name)
            if now is None or now[0] < size[0] or now[1] < size[1]:
                lost.append(LostTranscript(*name, size=size, kept=now))
    return lost
