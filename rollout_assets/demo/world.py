"""The simulated world every demo writer shares: its clock, its models and its sample text.

Times are integer epoch milliseconds; `iso` spells them the way the harnesses do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

BASE_TIME = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BASE_TIME_MS = (BASE_TIME - EPOCH) // timedelta(milliseconds=1)
SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

OFFICIAL_JUDGE = "swe-arena-official-judge"
NON_ASCII_SAMPLE = "naïve café — 日本語 ✓"
SUPERVISOR_MODEL = "claude-sonnet-4-5"
PROPOSER_MODEL = "claude-opus-4-1-20250805"
PROPOSER_RECEIPT_MODEL = "claude-opus-4-1"
SYNTHETIC_MODEL = "<synthetic>"
WORKER_MODELS = (("claude-sonnet-4-5", "anthropic"), ("qwen3-coder", "openrouter"))
CLAUDE_CODE_VERSION = "2.0.31"


def iso(ms: int) -> str:
    moment = EPOCH + timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
