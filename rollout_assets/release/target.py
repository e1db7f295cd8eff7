"""Where a release may be written: a new folder, or an earlier release, never anything else.

A release replaces its folder whole, so whatever is there is removed. It is replaced only when
its manifest.json names the release format (RELEASE_FORMAT); anything else (a folder that is
not a release, a file, a symlink) is refused. Nor may a release be written among the ledgers it
is built from: not as or around the ledger root, not in a round's folder, and inside the
ledger root only under its releases folder. Paths are compared with symlinks followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import orjson

from rollout_assets.io import open_regular_file
from rollout_assets.paths import folder_relation, is_inside, real_path
from rollout_assets.release.config import ReleaseError

# The manifest's "format": what makes a folder an earlier release this code may replace.
RELEASE_FORMAT = "rollout-assets.release.v1"
# The folder of the ledger root that holds releases (`<ledger root>/releases/<name>/`).
RELEASES_FOLDER = "releases"
# Far more than any manifest; a bigger file is not one.
_MANIFEST_MAX_BYTES = 64 << 20


class ReleasePlaceRefused(ReleaseError):
    """The release's folder may not be written: it holds something else, or lies among the ledgers."""


def is_release(folder: Path) -> bool:
    """True when `folder` holds a manifest.json that names the release format."""
    try:
        with open_regular_file(folder / "manifest.json") as handle:
            manifest = orjson.loads(handle.read(_MANIFEST_MAX_BYTES + 1))
    except (OSError, ValueError):  # missing, a FIFO, unreadable, not JSON
        return False
    return isinstance(manifest, dict) and manifest.get("format") == RELEASE_FORMAT


def refuse_unless_replaceable(release: Path) -> None:
    """ReleasePlaceRefused unless `release` is free, or an earlier release."""
    if not os.path.lexists(release):
        return
    if os.path.islink(release):
        what = "a symlink"
    elif not os.path.isdir(release):
        what = "a file"
    elif not is_release(release):
        what = f"a folder that is not a release (no manifest.json of format {RELEASE_FORMAT})"
    else:
        return
    raise ReleasePlaceRefused(
        f"refusing to replace {release}: it is {what}, and a release replaces only an earlier release; "
        "choose another --name or OUT_DIR"
    )


def refuse_among_ledgers(release: Path, ledger_root: Path | None, round_folders: Iterable[Path]) -> None:
    """ReleasePlaceRefused when `release` is or holds the ledger root, is, holds or lies inside a
    round's folder, or lies inside the ledger root elsewhere than under its releases folder."""
    relation = folder_relation(release, ledger_root) if ledger_root is not None else None
    if relation in ("is", "contains"):
        _refuse_in_ledger_root(release, relation, ledger_root)
    for folder in round_folders:
        round_relation = folder_relation(release, folder)
        if round_relation is not None:
            raise ReleasePlaceRefused(
                f"refusing to write the release {release}: it {_said(round_relation)} the folder of round "
                f"{folder.name} ({folder}); choose another OUT_DIR"
            )
    if relation == "lies inside" and ledger_root is not None:
        releases = real_path(ledger_root) / RELEASES_FOLDER
        if real_path(release) == releases or not is_inside(release, releases):
            _refuse_in_ledger_root(release, relation, ledger_root)


def _refuse_in_ledger_root(release: Path, relation: str, ledger_root: Path) -> None:
    raise ReleasePlaceRefused(
        f"refusing to write the release {release}: it {_said(relation)} the ledger root {ledger_root}, where only "
        f"{Path(ledger_root) / RELEASES_FOLDER}/<name> may hold a release; choose another OUT_DIR"
    )


def _said(relation: str | None) -> str:
    return {"is": "is", "contains": "holds", "lies inside": "lies inside"}.get(relation or "", "meets")
