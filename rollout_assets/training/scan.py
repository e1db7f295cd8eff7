"""The first pass over a ledger: a few fixed-size keys per line, nothing of the transcript.

The keys are what every decision needs (role, instance, reward, the filter's reason, the
digests of the transcript and of its prompt) plus where the line lies in the file, so the
second pass can read exactly the lines it writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rollout_assets.errors import RoundError
from rollout_assets.training.filter import TrainingFilter, line_drop_reason
from rollout_assets.training.messages import messages_digest, prompt_length


class TrainingInputError(RoundError, ValueError):
    """A ledger the training rows cannot be built from (names the file and line)."""


@dataclass(frozen=True, slots=True)
class LineKey:
    index: int  # 0-based line number in the ledger
    offset: int
    length: int
    rollout_id: str
    role: str
    instance_id: str
    reward: float | None
    reason: str | None  # the filter's line reason, None when trainable
    digest: bytes  # of the whole normalized transcript
    prompt_digest: bytes  # of the messages before the first assistant turn
    has_completion: bool  # an assistant turn exists


def read_line_at(handle: Any, key: LineKey, path: Path) -> dict[str, Any]:
    """The line a key points at, parsed (the second pass)."""
    handle.seek(key.offset)
    return _parse(handle.read(key.length), path, key.index + 1)


def scan_ledger(path: Path, settings: TrainingFilter) -> list[LineKey]:
    """One key per line of the ledger at `path`, in ledger order."""
    return list(_keys(path, settings))


def _keys(path: Path, settings: TrainingFilter) -> Iterator[LineKey]:
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise TrainingInputError(f"{path}: cannot read the ledger ({error.strerror or error})") from error
    with handle:
        offset = 0
        for index, raw in enumerate(handle):
            line = _parse(raw, path, index + 1)
            messages = line["messages"]
            cut = prompt_length(messages)
            yield LineKey(
                index=index,
                offset=offset,
                length=len(raw),
                rollout_id=line["rollout_id"],
                role=line["role"],
                instance_id=line["task"]["instance_id"],
                reward=line["outcome"]["reward"],
                reason=line_drop_reason(line, settings),
                digest=messages_digest(messages),
                prompt_digest=messages_digest(messages[:cut]),
                has_completion=cut < len(messages),
            )
            offset += len(raw)


def _parse(raw: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise TrainingInputError(f"{path}:{lineno}: not a JSON line ({error})") from error
    if not isinstance(line, dict) or line.get("schema") != "tangle.rollout.v1":
        raise TrainingInputError(f"{path}:{lineno}: not a tangle.rollout.v1 line")
    return line
