"""The two fingerprints of a round, both taken from file metadata, never from contents.

- The input fingerprint (`fingerprint_round`, a `RoundFingerprint`): the size and
  modification time of every file the backfill reads, the round's own and those its cells
  point to outside it, hashed into one value, with the folders new inputs appear in. The
  sensor compares it to decide which rounds changed, and the run it starts carries it (the
  run tag INPUT_FINGERPRINT_TAG); `round_manifest` takes one for a run that was not given
  one, the stage records carry it under INPUT_FINGERPRINT to `rollout_stats`, whose metadata
  the sensor reads back, so the same inputs are not run again.
- The round's state between stages (`round_state_digest`): the kind, size and modification
  time of every file of the round that more than one stage reads. Each stage record holds the
  one its stage saw (key "inputs"); a stage refuses to run, and the ledger stage to assemble,
  when the round's files are no longer those round_manifest saw, so one ledger never mixes
  two moments of a round. It does not say which inputs a ledger was built from: that is the
  input fingerprint's job.

No Dagster here. Nothing is read but file metadata and each cell's `artifact` paths.
"""

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from stat import S_ISDIR, S_ISREG

from rollout_assets.io import read_regular_file, string_or_none
from rollout_assets.sources.round import (
    CELL_CACHE,
    RoundInputError,
    discover_campaigns,
    list_shot_receipts,
    resolve_out_dir,
    run_dir_file,
)
from rollout_assets.sources.round.layout import sorted_names

# One name for the input fingerprint wherever it is carried: the run tag the sensor sets, the
# key in the stage records that pass it from round_manifest to rollout_stats, and the metadata
# of rollout_stats the sensor reads back.
INPUT_FINGERPRINT = "input_fingerprint"
INPUT_FINGERPRINT_TAG = f"rollout/{INPUT_FINGERPRINT}"


@dataclass(frozen=True)
class RoundFingerprint:
    """Size and modification time of every file the backfill reads, hashed into one value."""

    digest: str
    files: int
    cells: int
    shot_receipts: int
    file_mtimes: tuple[float, ...] = field(default=(), repr=False)
    # The folders new inputs appear in (campaigns, cells, proposer-shots/ and its author
    # folders): a cell whose arm is still running has a folder but no cached-result.json yet,
    # and only the folder's mtime says the round is being written.
    folders: tuple[str, ...] = field(default=(), repr=False)
    # Every input path looked for, there or not: the folders holding them count too (below).
    input_paths: tuple[str, ...] = field(default=(), repr=False)
    round_dir: str = ""

    def folders_being_filled(self) -> set[str]:
        """`folders`, the round's top-level folders, and every folder from the round down to
        each input path (a path outside the round: its own folder). A copy that keeps
        timestamps (`cp -a`, `rsync -a`) dates every file and every finished folder in the
        past; only the folders it is still filling are dated now, and those may be any of
        these: `runs/` while its run folders arrive, a run folder before its result.json."""
        folders = set(self.folders)
        if not self.round_dir:
            return folders
        folders.update(os.path.join(self.round_dir, name) for name in _listdir(self.round_dir))
        # The round as given and as it really is: reached through a symlink (a rounds root on
        # another disk, say), its run folders are written under the real path.
        spellings = {self.round_dir + os.sep, os.path.realpath(self.round_dir) + os.sep}
        for folder in {os.path.dirname(path) for path in self.input_paths}:
            inside = next((spelling for spelling in spellings if folder.startswith(spelling)), None)
            if inside is None:
                folders.add(folder)
                continue
            while folder.startswith(inside) and folder not in folders:
                folders.add(folder)
                folder = os.path.dirname(folder)
        return folders

    def last_written(self, latest: float) -> tuple[float, float]:
        """(the newest mtime of the files and folders up to `latest`, how far the furthest
        entry dated after `latest` lies beyond it, or 0). Folders are looked at only here, for
        a round about to be requested: an unchanged round's tick does not pay for them."""
        newest = ahead = 0.0
        times = list(self.file_mtimes)
        for folder in self.folders_being_filled():
            try:
                stat = os.stat(folder)
            except OSError:
                continue
            if S_ISDIR(stat.st_mode):  # files among them are left out
                times.append(stat.st_mtime)
        for mtime in times:
            if mtime <= latest:
                newest = max(newest, mtime)
            else:
                ahead = max(ahead, mtime - latest)
        return newest, ahead


def _listdir(folder: str | Path) -> list[str]:
    # Any OSError (missing, not a folder, unreadable, symlink loop) means "nothing to read here":
    # the round is still requested, and its run says loudly what it cannot read.
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


@lru_cache(maxsize=200_000)
def _artifact_of(cell_cache: str, size: int, mtime_ns: int) -> tuple[str | None, str | None]:
    """A cell's (artifact.runDir, artifact.patchPath); cached by (path, size, mtime) so
    unchanged cells are parsed once."""
    try:
        record = json.loads(read_regular_file(cell_cache).decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None, None
    artifact = record.get("artifact") if isinstance(record, dict) else None
    if not isinstance(artifact, dict):
        return None, None
    return string_or_none(artifact.get("runDir")), string_or_none(artifact.get("patchPath"))


def _spelled_by_pathlib(path: str) -> str:
    """An absolute `path` as `str(Path(path))` spells it (the digest hashes that spelling, and a
    runDir may hold `//` or `/./`), without building a Path for one spelled so already."""
    if "//" in path or "/./" in path or path.endswith(("/", "/.")):
        return str(Path(path))
    return path


class _InputWalk:
    """One walk of a round's inputs: the files the backfill reads, yielded one at a time in
    the digest's order (`files`); the folders new inputs appear in, kept when asked for; the
    cell and shot receipt counts, once walked.

    Campaigns and receipts are found by the round reader's own rules, so the fingerprint
    covers exactly the files the backfill will read. Paths are strings, each spelled as
    pathlib spells it (the digest hashes them): building tens of thousands of Path objects
    took a third of the time at 12,000 cells.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        keep_folders: bool,
        artifact_of: Callable[[str, int, int], tuple[str | None, str | None]] = _artifact_of,
    ) -> None:
        self.out_dir, self.keep_folders, self.artifact_of = out_dir, keep_folders, artifact_of
        self.folders: list[str] = []
        self.cells = self.receipts = 0

    def _folders(self, *folders: str) -> None:
        if self.keep_folders:
            self.folders += folders

    def files(self) -> Iterator[str]:
        root = str(self.out_dir)
        improve = os.path.join(root, "improve-run")
        yield from (os.path.join(improve, "loop-provenance.json"), os.path.join(improve, "cost-ledger.jsonl"))
        # A candidate's diff is `candidates/<commit10>.patch`: whether it exists sets its diffPath
        # and its proposer lines' patch_path. Every .patch there is taken, whichever commit it is for.
        candidates = os.path.join(root, "candidates")
        yield from (os.path.join(candidates, name) for name in _listdir(candidates) if name.endswith(".patch"))
        # The round's own folders too: a copy that keeps timestamps (`cp -a`, `rsync -a`) dates
        # every finished folder and file in the past, and only the folders it is still filling
        # (the round, improve-run, a generation without its candidates yet) say it is not done.
        self._folders(root, improve, *(os.path.join(improve, name) for name in _listdir(improve)))
        for _, _, campaign_dir in discover_campaigns(self.out_dir):
            self._folders(str(campaign_dir))
            yield from self._cell_files(str(campaign_dir))
        shots = os.path.join(root, "proposer-shots")
        self._folders(shots, *(os.path.join(shots, name) for name in _listdir(shots)))
        receipts = list_shot_receipts(self.out_dir)
        self.receipts = len(receipts)
        yield from (_spelled_by_pathlib(receipt.path) for receipt in receipts)

    def _cell_files(self, campaign: str) -> Iterator[str]:
        for name in _listdir(campaign):
            cell = os.path.join(campaign, name)
            self._folders(cell)
            cache = os.path.join(cell, "cached-result.json")
            try:
                stat = os.stat(cache)
            except OSError:
                continue
            if not S_ISREG(stat.st_mode):  # the round reader refuses it; its run says so
                continue
            self.cells += 1
            yield cache
            run_dir, patch_path = self.artifact_of(cache, stat.st_size, stat.st_mtime_ns)
            for file_name in ("result.json", "judge.json"):
                if path := run_dir_file(run_dir, file_name):
                    yield _spelled_by_pathlib(path)
            if patch_path and os.path.isabs(patch_path):  # whether it exists decides the artifactPaths
                yield _spelled_by_pathlib(patch_path)


def _digest(files: Iterable[str], mtimes: list[float] | None) -> str:
    """The size and mtime of each regular file among `files`, hashed; their mtimes appended to
    `mtimes` unless it is None."""
    digest = hashlib.sha256()
    for path in files:
        try:
            stat = os.stat(path)
        except (OSError, ValueError):  # missing, or a name no file can have (a lone surrogate)
            continue
        if not S_ISREG(stat.st_mode):  # the backfill reads a folder named like an input as no file
            continue
        if mtimes is not None:
            mtimes.append(stat.st_mtime)
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def fingerprint_round(out_dir: Path) -> RoundFingerprint:
    """The input fingerprint of a round: what the sensor compares and the stage records carry
    under INPUT_FINGERPRINT. A directory's own mtime is not in the digest: it does not change
    when a file inside is rewritten, and it changes when a file the backfill does not read
    comes or goes. It only counts towards the quiet period (`last_written`)."""
    walk = _InputWalk(out_dir, keep_folders=True)
    files = list(walk.files())
    mtimes: list[float] = []
    digest = _digest(files, mtimes)
    return RoundFingerprint(
        digest, len(mtimes), walk.cells, walk.receipts, tuple(mtimes), tuple(walk.folders), tuple(files), str(out_dir)
    )


def input_digest(out_dir: Path) -> str:
    """`fingerprint_round(out_dir).digest`, for a run that needs the value only: one stat and
    one hash update a file as it is walked, nothing of the round kept (nor cached: a run takes
    it once). At 96,000 cells the whole fingerprint held over 100 MiB of paths and times."""
    walk = _InputWalk(out_dir, keep_folders=False, artifact_of=_artifact_of.__wrapped__)
    return _digest(walk.files(), None)


def unreadable_round_fingerprint(out_dir: Path, error: RoundInputError) -> RoundFingerprint:
    """The fingerprint of a round the round reader refuses (two folders of one campaign, say):
    the error itself, which names the files. Its run fails saying so; the round runs again
    once the error changes or the round can be read."""
    digest = hashlib.sha256(f"unreadable\0{error}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
    improve = os.path.join(out_dir, "improve-run")
    folders = (str(out_dir), improve, *(os.path.join(improve, name) for name in _listdir(improve)))
    return RoundFingerprint(digest, 0, 0, 0, (), folders)


def round_state_digest(out_dir: str | os.PathLike[str]) -> str:
    """The state of the round's files as a stage saw them: the kind, size and modification
    time of every round file more than one stage reads (loop-provenance.json,
    cost-ledger.jsonl, candidates/*.patch, each cell folder's cached-result.json, shot
    receipts), hashed into 16 hex digits. Stages that saw the same digest saw the same round.

    Not the input fingerprint: it covers only the files more than one stage reads (a file one
    stage alone reads cannot differ between two stages), counts a file's kind and a file that
    is missing, and costs one stat per file, nothing parsed: about 0.1 s at 12,000 cells. A
    cell folder without its cache yet counts too, so a cell that finishes changes it.
    """
    out_dir = resolve_out_dir(out_dir)
    digest = hashlib.sha256()

    def add(path: str | Path) -> None:
        try:
            found = os.stat(path)
            state = f"{found.st_mode:o}\0{found.st_size}\0{found.st_mtime_ns}"
        except (OSError, ValueError):  # absent, unreadable, or a name no file can have
            state = "-"
        digest.update(f"{path}\0{state}\n".encode("utf-8", "surrogateescape"))

    improve_run = out_dir / "improve-run"
    add(improve_run / "loop-provenance.json")
    add(improve_run / "cost-ledger.jsonl")
    candidates = out_dir / "candidates"
    if os.path.isdir(candidates):
        for name in sorted_names(candidates):
            if name.endswith(".patch"):
                add(candidates / name)
    for _, _, campaign_dir in discover_campaigns(out_dir):
        folder = str(campaign_dir)
        for name in sorted_names(campaign_dir):
            add(os.path.join(folder, name, CELL_CACHE))
    for receipt in list_shot_receipts(out_dir):
        add(receipt.path)
    return digest.hexdigest()[:16]
