"""Counting a transcript's tokens: with a Hugging Face `tokenizer.json` when one is given, with the
estimate of training/messages.py otherwise. Each row records which counter it was counted by.

The texts counted are those the estimate counts (every content, reasoning, tool name and tool
arguments), each encoded on its own without special tokens: the chat template's own tokens
are not counted, since they depend on the template a trainer applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rollout_assets.errors import RoundError
from rollout_assets.training.messages import estimated_tokens, token_texts

ESTIMATE, TOKENIZER = "estimate", "tokenizer"


class TokenizerError(RoundError, ValueError):
    """A tokenizer file that cannot be used (the message names it and why)."""


class TokenCounter(Protocol):
    name: str  # ESTIMATE or TOKENIZER, what each row records

    def count(self, messages: list[dict[str, Any]]) -> int: ...


class EstimateCounter:
    name = ESTIMATE

    def count(self, messages: list[dict[str, Any]]) -> int:
        return estimated_tokens(messages)


class TokenizerCounter:
    """Counts with the `tokenizers` library (the fast tokenizers of `transformers`), from a
    `tokenizer.json` file; nothing is downloaded."""

    name = TOKENIZER

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as error:  # a dependency of the project; missing only in a broken install
            raise TokenizerError(f"tokenizer {path}: the tokenizers library is not installed ({error})") from error
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises its own Exception for a bad file
            raise TokenizerError(f"tokenizer {path}: not a readable tokenizer.json ({error})") from error

    def count(self, messages: list[dict[str, Any]]) -> int:
        texts = token_texts(messages)
        if not texts:
            return 0
        return sum(len(encoding.ids) for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=False))


def token_counter(tokenizer: str | None) -> TokenCounter:
    return EstimateCounter() if tokenizer is None else TokenizerCounter(Path(tokenizer))
