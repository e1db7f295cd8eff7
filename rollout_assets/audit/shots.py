"""The proposer shots: their receipts (docs/input-formats.md §3) and the names of the Claude
transcript files each shot's worktree could be joined to (docs/input-formats.md §5). No
transcript is opened here."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rollout_assets.audit.folders import listdir

_RECEIPT = re.compile(r"^gen(\d+)-cand(\d+)-shot(\d+)\.json\Z", re.ASCII)


class Receipt(NamedTuple):
    key: tuple[str, int]  # (the proposer line's instance_id, shot)
    relative_path: str  # to the outDir: what the proposer's id names
    candidate_id: str  # the campaign whose resolved fraction is the shot's reward


def shot_receipts(out_dir: Path) -> Iterator[Receipt]:
    """The receipts under proposer-shots/, named genG-candI-shotS.json: there, or one folder
    down (whose name then ends the instance id)."""
    shots = out_dir / "proposer-shots"
    for name in listdir(shots):
        path = shots / name
        if path.is_dir() and not path.is_symlink():
            for inner in listdir(path):
                match = _RECEIPT.match(inner)
                if match:
                    candidate = f"gen{int(match[1])}-cand{int(match[2])}"
                    yield Receipt(
                        (f"{candidate}-{name}", int(match[3])), f"proposer-shots/{name}/{inner}", candidate
                    )
        else:
            match = _RECEIPT.match(name)
            if match:
                candidate = f"gen{int(match[1])}-cand{int(match[2])}"
                yield Receipt((candidate, int(match[3])), f"proposer-shots/{name}", candidate)


class ProposerWorktree(NamedTuple):
    receipt: Receipt
    worktree: str  # the shot's worktree path, as its gap names it (docs/input-formats.md §3)
    transcripts: tuple[str, ...] | None  # its candidate transcript files; None when not looked up
    # (folder, why) of the first of its project folders that is there but cannot be listed
    unreadable_folder: tuple[str, str] | None = None
    folders: tuple[str, ...] = ()  # its project folders, there or not


def _claude_folder_name(cwd: str) -> str:
    """docs/input-formats.md §5: every character of `cwd` outside [A-Za-z0-9-] becomes `-`; one
    outside the Basic Multilingual Plane becomes two, as JavaScript's UTF-16 string has two
    units there."""
    return "".join(ch if ch in _FOLDER_NAME_KEPT else ("--" if ord(ch) > 0xFFFF else "-") for ch in cwd)


_FOLDER_NAME_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def proposer_worktrees(
    out_dir: Path, receipts: list[Receipt], claude_projects: Path | None
) -> list[ProposerWorktree]:
    """Each receipt, by path, with its worktree and the `.jsonl` files of that worktree's Claude
    project folders (its path under the absolute outDir, and under the outDir's real path)."""
    absolute = os.path.abspath(out_dir)
    real = os.path.realpath(absolute)
    projects = os.path.abspath(claude_projects) if claude_projects is not None else None
    found = []
    for receipt in sorted(receipts, key=lambda receipt: receipt.relative_path):
        worktree = os.path.join(absolute, "proposer-wt", receipt.key[0])
        transcripts: tuple[str, ...] | None = None
        unreadable_folder = None
        folders: dict[str, None] = {}
        if projects is not None:
            folders = dict.fromkeys(
                os.path.join(projects, _claude_folder_name(os.path.join(base, "proposer-wt", receipt.key[0])))
                for base in (absolute, real)
            )
            names = []
            for folder in folders:
                listed, why = _transcript_folder(folder)
                names += [os.path.join(folder, name) for name in listed if name.endswith(".jsonl")]
                if why is not None and unreadable_folder is None:
                    unreadable_folder = (folder, why)
            transcripts = tuple(names)
        found.append(ProposerWorktree(receipt, worktree, transcripts, unreadable_folder, tuple(folders)))
    return found


def _transcript_folder(folder: str) -> tuple[list[str], str | None]:
    """(the folder's names, why it cannot be listed): a folder that is not there (or is a file)
    holds no transcript, nor does one whose name is too long for any folder to have it; one
    that is there but cannot be listed (permission, a symlink loop) leaves its shots
    unjoinable, with a gap saying why."""
    try:
        return sorted(os.listdir(folder)), None
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return [], None
        return [], error.strerror or str(error)
