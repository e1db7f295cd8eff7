"""A large JSON document written as it is encoded: the same bytes as `io.write_json_atomic`
(indented, non-ASCII kept unless a lone surrogate forces ASCII escapes, a final newline,
replaced atomically), without holding the document's text, nor the list of its pieces that
`json.dumps` builds when it indents (one string per key, value and separator: for the
manifest of a 48,000-cell round, over a hundred MB)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from rollout_assets.io import write_atomically

_BUFFER = 1 << 20


def _write_encoded(handle: Any, value: Any, *, ensure_ascii: bool) -> None:
    """Raises UnicodeEncodeError (before or after writing some) when the text holds a lone surrogate."""
    encoder = json.JSONEncoder(indent=2, ensure_ascii=ensure_ascii, allow_nan=False)
    pending: list[str] = []
    size = 0
    for chunk in encoder.iterencode(value):
        pending.append(chunk)
        size += len(chunk)
        if size >= _BUFFER:
            handle.write("".join(pending).encode("utf-8"))
            pending.clear()
            size = 0
    handle.write(("".join(pending) + "\n").encode("utf-8"))


def write_json_streaming(path: Path, value: Any) -> None:
    """`value` as `io.write_json_atomic` writes it, encoded piece by piece into the temp file."""

    def write(handle: BinaryIO) -> None:
        try:
            _write_encoded(handle, value, ensure_ascii=False)
        except UnicodeEncodeError:
            handle.seek(0)
            handle.truncate()
            _write_encoded(handle, value, ensure_ascii=True)

    write_atomically(path, write)
