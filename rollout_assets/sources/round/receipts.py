"""The proposer shot receipts (`proposer-shots/[<author>/]gen<g>-cand<i>-shot<s>.json`,
docs/input-formats.md §3): where they are, listed as the seed lists them, and the receipt each
holds."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.io import is_record, read_json_or_none
from rollout_assets.sources.round.errors import RoundInputError
from rollout_assets.sources.round.layout import number_in_name


_SHOT_RECEIPT_NAME = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)


@dataclass(frozen=True)
class ShotReceiptFile:
    """A proposer shot receipt's place: `proposer-shots/[<author>/]gen<g>-cand<i>-shot<s>.json`."""

    path: str
    author: str | None
    generation: int
    candidate_index: int
    shot: int

    def relative_path(self, out_dir: Path) -> str:
        return Path(os.path.relpath(self.path, out_dir)).as_posix()

    def worktree_cwd(self, out_dir: Path) -> str:
        """The proposer worktree the arena dispatched this shot into."""
        name = f"gen{self.generation}-cand{self.candidate_index}"
        if self.author is not None:
            name = f"{name}-{self.author}"
        return os.path.join(out_dir, "proposer-wt", name)


def list_shot_receipts(out_dir: Path) -> list[ShotReceiptFile]:
    """Flat and per-author receipts, sorted by path in code-point order; other names are ignored."""
    shot_dir = out_dir / "proposer-shots"
    found: list[ShotReceiptFile] = []

    def collect(name: str, author: str | None, path: str) -> None:
        match = _SHOT_RECEIPT_NAME.match(name)
        if match is not None:
            generation, index, shot = (number_in_name(match[group], Path(path)) for group in (1, 2, 3))
            found.append(ShotReceiptFile(path, author, generation, index, shot))

    for entry in _scan(shot_dir):
        # Like the seed's readdir(withFileTypes): a symlink is not followed, so a link
        # to a directory (or a symlink loop) is read as a file name, never descended into.
        if _is_real_directory(entry):
            if _SHOT_RECEIPT_NAME.match(entry.name):
                # Read as an author folder (the seed's rule), its shot would vanish.
                raise RoundInputError(f"{entry.path}: a folder named like a shot receipt")
            for name in sorted(e.name for e in _scan(Path(entry.path))):
                collect(name, entry.name, os.path.join(entry.path, name))
        else:
            collect(entry.name, None, entry.path)
    found.sort(key=lambda receipt: receipt.path)
    return found


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of a receipts folder; none when it does not exist. One that exists but cannot
    be listed, or is a file, stops the round (the seed read it as empty, dropping its shots unseen)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except NotADirectoryError as error:  # a file where the folder belongs: its shots are unknown
        raise RoundInputError(f"{directory}: not a folder, so its shot receipts cannot be listed") from error
    except OSError as error:
        raise RoundInputError(f"{directory}: cannot list directory ({error.strerror or error})") from error


def _is_real_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def read_shot_receipt(receipt: ShotReceiptFile) -> dict[str, Any] | None:
    """The `receipt` object of a shot receipt file, or None when missing or malformed."""
    parsed = read_json_or_none(receipt.path)
    inner = parsed.get("receipt") if is_record(parsed) else None
    return inner if is_record(inner) else None
