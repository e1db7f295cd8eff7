"""How the demo writes its files: UTF-8 text, JSON pretty or compact, JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def compact_file(value: Any) -> str:
    """Per-cell files are compact: indenting tens of thousands of them costs more than writing them."""
    return compact(value) + "\n"


def write_text(path: Path, text: str) -> None:
    """Write a file, creating its folder; hot paths create folders once and call `write_file`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, text)


def write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    write_text(path, "".join(compact(line) + "\n" for line in lines))
