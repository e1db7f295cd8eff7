"""The files of a cell's arm run directory (its `artifact.runDir`): the supervisor's
`result.json`, with the worker cwds it lists, and the judge's `judge.json`
(docs/input-formats.md §1). Missing or unreadable files read as None: the join turns them
into gap lines.

A run folder's files are read only where they resolve (symlinks followed) inside the round or
inside a root named by ROLLOUT_RUN_DIR_ROOTS: a runDir, or a judge.json symlinked, elsewhere
(a credentials file, another user's folder) would copy that file into the ledger. Such a file
reads as None (the supervisor's gap then says its workers cannot be listed; its verdict is
null) and a warning names it, never its content."""

from __future__ import annotations

import logging
import os
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from rollout_assets.io import is_number, is_record, read_json_or_none



class CellRecord(Protocol):
    """What the run folder readers need of a cell (cells.CellRecord has it): its cache file's
    path, which names its round, and its runDir. A protocol, so cells.py imports this module
    and not the other way round."""

    @property
    def path(self) -> Path: ...

    @property
    def run_dir(self) -> str | None: ...

# Folders outside the round where run folders may live, colon-separated absolute paths.
RUN_DIR_ROOTS_ENV = "ROLLOUT_RUN_DIR_ROOTS"
_LOG = logging.getLogger(__name__)
_WARNED: set[str] = set()  # the folders already warned about, once a process


def run_dir_roots() -> list[str]:
    """The real paths of the roots ROLLOUT_RUN_DIR_ROOTS names (absolute entries only: a
    relative one would depend on the folder the backfill runs in)."""
    return list(_real_roots(os.environ.get(RUN_DIR_ROOTS_ENV, "")))


@lru_cache(maxsize=8)
def _real_roots(raw: str) -> tuple[str, ...]:
    return tuple(os.path.realpath(root) for root in raw.split(":") if os.path.isabs(root))


@lru_cache(maxsize=64)
def _real_round(round_dir: str) -> str:
    # Resolved once a process: a round's thousands of cells all ask for it.
    return os.path.realpath(round_dir)


def round_of_cell(cell_cache: Path) -> Path | None:
    """The round (outDir) a cell cache belongs to: the folder holding its `improve-run`."""
    parts = os.fspath(cell_cache).split(os.sep)[:-1]
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] == "improve-run":
            return Path(os.sep.join(parts[:index]) or os.sep)
    return None


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


# Opening a folder for its path only needs no permission on it, and /proc names what was
# opened: the folder's real path in three system calls, where os.path.realpath makes one lstat
# per component (at 12,012 cells, 0.08 s against 0.31 s). Linux only; elsewhere, and for any
# path the kernel cannot open (missing, a loop, too long), realpath answers as before.
_O_PATH = getattr(os, "O_PATH", None)


def _real_folder(path: str) -> str:
    """os.path.realpath(path), asked of the kernel when it can open `path`."""
    if _O_PATH is not None:
        try:
            handle = os.open(path, _O_PATH | os.O_CLOEXEC)
        except OSError:
            return os.path.realpath(path)
        try:
            real = os.readlink(f"/proc/self/fd/{handle}")
        except OSError:
            real = ""
        finally:
            os.close(handle)
        # Not "path (deleted)" (removed since it was opened) nor one outside this process's root.
        if real.startswith(os.sep) and not real.endswith(" (deleted)"):
            return real
    return os.path.realpath(path)


def _real_file(path: str, real_folder: str) -> str:
    """os.path.realpath(path), given its folder's real path: only a symlink needs resolving."""
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return os.path.join(real_folder, os.path.basename(path))
    except OSError:
        return os.path.join(real_folder, os.path.basename(path))  # as realpath takes a missing name
    return os.path.realpath(path)


def contained_run_dir_file(run_dir: str | None, name: str, round_dir: Path | None) -> str | None:
    """`<runDir>/<name>` when it resolves inside the round or a configured root; None (and a
    warning, once a folder) when it resolves anywhere else."""
    return contained_run_dir_files(run_dir, (name,), round_dir)[0]


def contained_run_dir_files(
    run_dir: str | None, names: tuple[str, ...], round_dir: Path | None
) -> list[str | None]:
    """`contained_run_dir_file` for several names of one run folder, resolving the folder once."""
    paths = [run_dir_file(run_dir, name) for name in names]
    if all(path is None for path in paths):
        return paths
    assert run_dir is not None
    roots = run_dir_roots()
    if round_dir is not None:
        roots.append(_real_round(os.fspath(round_dir)))
    real_folder = _real_folder(run_dir)
    contained: list[str | None] = []
    for path in paths:
        if path is None:
            contained.append(None)
            continue
        real = _real_file(path, real_folder)
        if any(_inside(real, root) for root in roots):
            contained.append(path)
            continue
        contained.append(None)
        folder = os.path.dirname(real)
        if folder not in _WARNED:
            _WARNED.add(folder)
            _LOG.warning(
                "%s resolves to %s, outside the round %s and the run folder roots (%s): not read",
                path,
                real,
                round_dir,
                RUN_DIR_ROOTS_ENV,
            )
    return contained


def run_dir_file(run_dir: str | None, name: str) -> str | None:
    """`<runDir>/<name>`, for an absolute runDir only (docs/input-formats.md §1: "absolute
    path of the arm's run directory"). An empty or relative runDir would name a file under
    whatever folder the backfill runs in, so the same round would give another ledger from
    another folder; its files are unknown instead (the cell then says its workers cannot be
    listed)."""
    if run_dir is None or not os.path.isabs(run_dir):
        return None
    if "\0" in run_dir:  # no file name can hold a NUL
        return None
    try:
        os.fsencode(run_dir)
    except UnicodeEncodeError:  # a lone surrogate: no file name on this system can hold it
        return None
    return os.path.join(run_dir, name)


def _cell_file(cell: CellRecord | str | None, name: str) -> str | None:
    """A cell's run folder file; a bare runDir (no cell, so no round) is read only inside the
    configured roots."""
    if cell is None or isinstance(cell, str):
        return contained_run_dir_file(cell, name, None)
    return contained_run_dir_file(cell.run_dir, name, round_of_cell(cell.path))


def _result_of(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    result = read_json_or_none(path)
    return result if is_record(result) else None


def _verdict_of(path: str | None) -> Any:
    return read_json_or_none(path) if path is not None else None


def read_supervisor_result(cell: CellRecord | str | None) -> dict[str, Any] | None:
    """The cell's `<runDir>/result.json` as an object, or None when absent, unreadable, not an
    object or outside the round and the run folder roots."""
    return _result_of(_cell_file(cell, "result.json"))


def read_judge_verdict(cell: CellRecord | str | None) -> Any:
    """The cell's `<runDir>/judge.json` verbatim, or None when absent, unreadable or outside the
    round and the run folder roots."""
    return _verdict_of(_cell_file(cell, "judge.json"))


def read_result_and_verdict(cell: CellRecord) -> tuple[dict[str, Any] | None, Any]:
    """(`read_supervisor_result(cell)`, `read_judge_verdict(cell)`), the run folder resolved
    once for both files."""
    result_path, verdict_path = contained_run_dir_files(
        cell.run_dir, ("result.json", "judge.json"), round_of_cell(cell.path)
    )
    return _result_of(result_path), _verdict_of(verdict_path)


def reports_unlisted_workers(result: dict[str, Any]) -> bool:
    """True when result.json says workers ran (`spawned` or `workers` above 0) but names no
    worker cwd (no `recoveredSpend.workerCwds` list, an empty one, or one without a string):
    they existed, yet none can be joined."""
    if worker_cwds_of(result):
        return False
    return any(is_number(result.get(key)) and result[key] > 0 for key in ("spawned", "workers"))


def worker_cwds_of(result: dict[str, Any] | None) -> list[str]:
    """Distinct worker cwds in first-occurrence order.

    A respawned worker reuses its clone cwd, so the recovered list can name the same
    directory twice; joining it twice would mint two rollout ids over one opencode
    session (duplicate training signal, inflated worker counts).
    """
    recovered = result.get("recoveredSpend") if result is not None else None
    listed = recovered.get("workerCwds") if is_record(recovered) else None
    if not isinstance(listed, list):
        return []
    return list(dict.fromkeys(cwd for cwd in listed if isinstance(cwd, str)))
