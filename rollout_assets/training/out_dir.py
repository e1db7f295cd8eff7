"""Where an export may write: a folder it replaces whole, so one that holds nothing but its own
files, and never the ledger it reads."""

from __future__ import annotations

import os
from pathlib import Path

from rollout_assets.errors import RoundError
from rollout_assets.paths import is_inside, real_path
from rollout_assets.training.files import TrainingFiles

_SHOWN = 3  # names of foreign entries a refusal lists


class TrainingOutputRefused(RoundError, ValueError):
    """An OUT_DIR the export may not replace (it holds other files, or its own input)."""


def export_folder(folder: Path) -> Path:
    """The folder to replace, as an absolute path (`.` names the current folder by its name): a
    symlink at `folder` is followed (the link stays, the folder it leads to is replaced), so the
    build lands beside the real folder, on its filesystem."""
    return real_path(folder) if os.path.islink(folder) else Path(os.path.abspath(folder))


def _is_own(name: str, own: set[str]) -> bool:
    """A training file, or a hidden temp or lock file of one (`.sft.parquet.<hex>.tmp`)."""
    return name in own or any(name.startswith(f".{file}.") for file in own)


def refuse_unless_replaceable(folder: Path, ledger: Path) -> None:
    """TrainingOutputRefused unless `folder` may be replaced by the training files of `ledger`:
    the ledger is not inside it (symlinks followed), and it is missing, or a folder holding
    only the files an export writes."""
    if is_inside(ledger, folder):
        raise TrainingOutputRefused(
            f"refusing to write the training files into {folder}: it holds the ledger {ledger} they are read "
            "from, and the folder is replaced whole; choose another OUT_DIR"
        )
    if not os.path.lexists(folder):
        return
    if not os.path.isdir(folder):
        raise TrainingOutputRefused(f"refusing to replace {folder}: it is not a folder; choose another OUT_DIR")
    own = {path.name for path in TrainingFiles(folder).all_files()}
    foreign = sorted(name for name in os.listdir(folder) if not _is_own(name, own))
    if foreign:
        shown = ", ".join(foreign[:_SHOWN]) + (f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else "")
        raise TrainingOutputRefused(
            f"refusing to replace {folder}: it holds files no export writes ({shown}), and the folder is replaced "
            "whole; give a new or empty folder, or one an earlier export wrote"
        )
