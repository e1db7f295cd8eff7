"""The data files of a release: named by their content, listed by the card only when they hold rows.

`datasets` keys its cache of a local dataset on the card's `data_files` patterns, not on the
files' bytes: a release rebuilt in place under the same names would load the rows of the first
build from the cache. So each file's name ends in the start of its SHA-256
(`data/sft/train-00000-of-00001-<16 hex digits>.parquet`), the card names each file exactly, and
new rows give new names and a new cache entry. A split without rows has no file (`datasets`
cannot load a split of an empty Parquet file), and a kind without rows no config.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DIGEST_CHARS = 16  # of the SHA-256 in a data file's name


def staged_data_file(folder: Path, kind: str, split: str) -> Path:
    """Where a split's rows are written before the file is named by its content."""
    return folder / "data" / kind / f"{split}.parquet"


def content_name(split: str, sha256: str) -> str:
    return f"{split}-00000-of-00001-{sha256[:DIGEST_CHARS]}.parquet"


def split_of_file(path: Path) -> tuple[str, str]:
    """(kind, split) of a data file, from its place and name."""
    return path.parent.name, path.name.split("-", 1)[0].removesuffix(".parquet")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def name_by_content(folder: Path, rows: dict[str, dict[str, int]]) -> dict[Path, str]:
    """Rename each staged data file of `folder` after its content, removing the files without
    rows; return the files kept and their SHA-256, in kind and split order."""
    named = {}
    for kind, splits in rows.items():
        for split, count in splits.items():
            staged = staged_data_file(folder, kind, split)
            if count == 0:
                staged.unlink()
                continue
            sha256 = _sha256(staged)
            final = staged.with_name(content_name(split, sha256))
            os.rename(staged, final)
            named[final] = sha256
        if not any(splits.values()):
            staged_data_file(folder, kind, "train").parent.rmdir()
    return named
