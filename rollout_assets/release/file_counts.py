"""What a release's files hold, counted from the files alone, and the numbers its card states,
read from the card's text: the two sides the card check compares. Nothing here comes from the
code that wrote the release (build.py, card.py), so a wrong number written consistently into
both the card and the manifest is still found."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_ROWS_LINE = re.compile(r"^\| (\w+) \| (train|test) \| (\d+) \|$", re.M)
_INSTANCES = re.compile(r"(\d+) instances in train, (\d+) in test")
_SFT_TOKENS = re.compile(r"SFT tokens \(estimated\): (\d+) in train, (\d+) in test")


@dataclass
class FileCounts:
    rows: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, split) -> rows, for every file
    instances: dict[str, int] = field(default_factory=dict)  # split -> distinct instance ids, every kind
    sft_tokens: dict[str, int] = field(default_factory=dict)  # split -> the sft rows' tokens
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (first place, second place)


@dataclass
class CardNumbers:
    rows: dict[tuple[str, str], int]
    instances: dict[str, int] | None
    sft_tokens: dict[str, int] | None


def _content_digest(row: dict) -> str:
    content = {key: value for key, value in row.items() if key != "metadata"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def count_files(release: Path) -> FileCounts:
    """Rows per kind and split, instances and SFT tokens per split, and repeated contents,
    from every data file under `release/data/`."""
    import pyarrow.parquet as pq  # here, not with the module: see training/files.py

    counts = FileCounts()
    instances: dict[str, set[str]] = {"train": set(), "test": set()}
    tokens = {"train": 0, "test": 0}
    seen: dict[tuple[str, str], str] = {}
    for path in sorted((release / "data").rglob("*.parquet")):
        kind, split = path.parent.name, path.name.split("-", 1)[0].removesuffix(".parquet")
        number = 0
        # A few rows a batch, read ahead by nothing and on this thread (see training/files.py).
        for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=8, use_threads=False):
            for row in batch.to_pylist():
                number += 1
                instances.setdefault(split, set()).add(row["metadata"]["instance_id"])
                if kind == "sft":
                    tokens[split] = tokens.get(split, 0) + (row.get("tokens") or 0)
                place = f"{path.relative_to(release)} row {number}"
                first = seen.setdefault((kind, _content_digest(row)), place)
                if first != place:
                    counts.duplicates.append((first, place))
        counts.rows[(kind, split)] = counts.rows.get((kind, split), 0) + number
    counts.instances = {split: len(ids) for split, ids in instances.items()}
    counts.sft_tokens = tokens
    return counts


def card_numbers(card: str) -> CardNumbers:
    """The rows table, the instances sentence and the SFT tokens line of a card, as it states
    them; a number the card does not state is absent (None)."""
    rows = {(kind, split): int(count) for kind, split, count in _ROWS_LINE.findall(card)}
    instances = _INSTANCES.search(card)
    tokens = _SFT_TOKENS.search(card)
    return CardNumbers(
        rows=rows,
        instances={"train": int(instances[1]), "test": int(instances[2])} if instances else None,
        sft_tokens={"train": int(tokens[1]), "test": int(tokens[2])} if tokens else None,
    )
