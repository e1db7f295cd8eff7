"""The `tangle.rollout.v1` ledger: the line's schema and the file API. SCHEMA + FILES ONLY.

Owns what a valid rollout line is (pydantic models and their rules, `rollout_json_schema`)
and how a ledger file is written and read: every line validated before anything touches
disk, atomic replacement (temp file + rename, never a half-written ledger), reads that fail
loudly with `path:lineno`.

Does not own where lines come from: nothing here knows rounds, opencode, Claude Code or
Dagster. Producers hand plain dicts to `serialize_line` / `LedgerWriter` / `write_ledger`;
nothing writes a ledger line through any other path.
"""

from rollout_assets.ledger.io import (
    AtomicJsonlWriter,
    LedgerReadError,
    LedgerValidationError,
    LedgerWriter,
    WriterBusyError,
    decode_record,
    iter_jsonl,
    read_ledger,
    read_ledger_dicts,
    serialize_line,
    validate_line,
    write_ledger,
)
from rollout_assets.ledger.schema import ROLLOUT_SCHEMA, ChatMessage, RolloutLine, rollout_json_schema

__all__ = [
    "ROLLOUT_SCHEMA",
    "AtomicJsonlWriter",
    "ChatMessage",
    "LedgerReadError",
    "LedgerValidationError",
    "LedgerWriter",
    "RolloutLine",
    "WriterBusyError",
    "decode_record",
    "iter_jsonl",
    "read_ledger",
    "read_ledger_dicts",
    "rollout_json_schema",
    "serialize_line",
    "validate_line",
    "write_ledger",
]
