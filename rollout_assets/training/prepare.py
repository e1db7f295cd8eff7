"""A ledger line's transcript as the training rows hold it: in the chat shape, its identifiers
replaced by placeholders (normalize.py, unless the settings turn that off), and what the scan
decides on: the digests of the transcript and of its prompt, and whether it is too long.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from rollout_assets.training.filter import TrainingFilter
from rollout_assets.training.identifiers import line_identifiers
from rollout_assets.training.messages import prompt_length, training_message
from rollout_assets.training.normalize import Normalizer, replacements
from rollout_assets.training.tokens import TokenCounter, TokenizerError, token_counter


def line_normalizer(line: dict[str, Any], settings: TrainingFilter) -> Normalizer:
    return Normalizer(line_identifiers(line) if settings.normalize_identifiers else [])


@dataclass(frozen=True, slots=True)
class ScannedTranscript:
    """What the scan keeps of a transcript: nothing of its text."""

    digest: bytes  # of the whole normalized transcript, keys sorted
    prompt_digest: bytes  # of the messages before the first assistant turn
    has_completion: bool  # an assistant turn exists
    too_long: bool  # more tokens than the settings' max_tokens


def scan_transcript(line: dict[str, Any], settings: TrainingFilter, trainable: bool) -> ScannedTranscript:
    """The scan's view of a line's transcript; its tokens are counted only when it is otherwise
    `trainable`. Raises TypeError (orjson's) on text UTF-8 cannot carry."""
    messages = [training_message(message) for message in line["messages"]]
    cut = prompt_length(messages)
    normalizer = line_normalizer(line, settings)
    # The prompt and the rest apart, joined as one list: each message is serialized once.
    prompt, _ = normalizer.serialized(messages[:cut], orjson.OPT_SORT_KEYS)
    rest, _ = normalizer.serialized(messages[cut:], orjson.OPT_SORT_KEYS)
    whole = prompt[:-1] + b"," + rest[1:] if cut and cut < len(messages) else (rest if not cut else prompt)
    too_long = False
    if settings.max_tokens is not None and trainable and messages:
        too_long = counter_of(settings).count(orjson.loads(whole)) > settings.max_tokens
    # Raw bytes, not hex: the scan keeps two digests per ledger line.
    return ScannedTranscript(
        hashlib.sha256(whole).digest(), hashlib.sha256(prompt).digest(), cut < len(messages), too_long
    )


@dataclass(frozen=True)
class RowTranscript:
    """One ledger line's part of a row: its normalized messages and what was replaced."""

    line: dict[str, Any]
    messages: list[dict[str, Any]]
    replaced: list[dict[str, Any]]  # kind, placeholder, count (normalize.replacements)


def row_transcript(line: dict[str, Any], settings: TrainingFilter) -> RowTranscript:
    messages = [training_message(message) for message in line["messages"]]
    normalized, counts = line_normalizer(line, settings).messages(messages)
    return RowTranscript(line, normalized, replacements(counts))


def counter_of(settings: TrainingFilter) -> TokenCounter:
    """The token counter of the settings, a tokenizer file loaded once per version of it."""
    if settings.tokenizer is None:
        return _counter(None, None)
    try:
        stat = os.stat(settings.tokenizer)
    except OSError as error:
        raise TokenizerError(f"tokenizer {settings.tokenizer}: {error.strerror or error}") from error
    return _counter(settings.tokenizer, (stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=4)
def _counter(tokenizer: str | None, version: tuple[int, int] | None) -> TokenCounter:
    return token_counter(tokenizer)
