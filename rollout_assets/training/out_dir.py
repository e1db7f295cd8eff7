"""Where an export may write: a folder it replaces whole, so one that holds nothing but its own
files, and never the ledger it reads."""

from __future__ import annotations

import os
from pathlib import Path

from rollout_assets.errors import RoundError
from rollout_assets.folder_swap import OutputFolder
from rollout_assets.folder_swap import refuse_unless_replaceable as check_replaceable
from rollout_assets.paths import real_path
from rollout_assets.training.files import TrainingFiles



class TrainingOutputRefused(RoundError, ValueError):
    """An OUT_DIR the export may not replace (it holds other files, or its own input)."""


_EXPORT = OutputFolder(
    outputs="the training files",
    another="OUT_DIR",
    foreign="no export writes",
    earlier="one an earlier export wrote",
    refused=TrainingOutputRefused,
)


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
    own = {path.name for path in TrainingFiles(folder).all_files()}
    check_replaceable(folder, ledger, _EXPORT, lambda name: _is_own(name, own))
