"""The files of a cell's arm run directory (its `artifact.runDir`): the supervisor's
`result.json`, with the worker cwds it lists, and the judge's `judge.json`
(docs/input-formats.md §1). Missing or unreadable files read as None: the join turns them
into gap lines."""

from __future__ import annotations

import os
from typing import Any

from rollout_assets.io import is_number, is_record, read_json_or_none


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


def read_supervisor_result(run_dir: str | None) -> dict[str, Any] | None:
    """`<runDir>/result.json` as an object, or None when absent, unreadable or not an object."""
    path = run_dir_file(run_dir, "result.json")
    if path is None:
        return None
    result = read_json_or_none(path)
    return result if is_record(result) else None


def read_judge_verdict(run_dir: str | None) -> Any:
    """`<runDir>/judge.json` verbatim, or None when absent or unreadable."""
    path = run_dir_file(run_dir, "judge.json")
    return read_json_or_none(path) if path is not None else None


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
