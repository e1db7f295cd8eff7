"""Bugs planted in the code one at a time, each caught by a blocking check on the demo through
Dagster.

A check that never fails on a real mistake proves nothing. Each case below changes one line of
the code the checks verify (never a check): the kinds of mistake a change to the join, the
training selection or the release could make while every file stays self-consistent. A copy
of the project carrying the bug materializes demo round-003 (the round with every planted
case) through Dagster with its training data and a release (planted_bug_run.py); the test asserts
that the named blocking checks fail and that their first problem names the lines or rows.
The same run on the unchanged code passes every check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, write_demo

PROJECT_DIR = Path(__file__).resolve().parent.parent
ROUND = DEFAULT_ROUNDS[2]


@dataclass(frozen=True)
class PlantedBug:
    name: str
    file: str  # under rollout_assets/
    before: str  # appears exactly once in the file
    after: str
    caught_by: frozenset[str]  # blocking checks that must fail
    names: str  # what the first problem of each of them must mention


BUGS = (
    PlantedBug(
        "GRPO groups of one allowed",
        "training/select.py",
        "        if len(bucket) < 2:\n",
        "        if len(bucket) < 1:\n",
        frozenset({"grpo_groups_account_for_every_line"}),
        "line",
    ),
    PlantedBug(
        "SFT cap off by one",
        "training/select.py",
        "        elif per_group[group] >= settings.per_instance_cap:\n",
        "        elif per_group[group] > settings.per_instance_cap:\n",
        frozenset({"sft_rows_account_for_every_line"}),
        "SFT rows of",
    ),
    PlantedBug(
        "errored lines let through the filter (dropped as incomplete)",
        "training/filter.py",
        '    if outcome["error"] is not None:\n        return "error"\n',
        "",
        frozenset({"sft_rows_account_for_every_line", "preference_pairs_account_for_every_line"}),
        "line",
    ),
    PlantedBug(
        "pair margin tested on a bucket's first pair only",
        "training/select.py",
        "        while best < worst and ranked[best].reward - ranked[worst].reward >= settings.margin:\n",
        "        while best < worst and (best > 0 or ranked[best].reward - ranked[worst].reward >= settings.margin):\n",
        frozenset({"preference_pairs_meet_margin"}),
        "pair ",
    ),
    PlantedBug(
        "sub-agent usage not counted",
        "sources/claude.py",
        "        for conversation in self.conversations:\n            conversation.count_usage()\n",
        "",
        frozenset({"every_usage_is_its_transcripts"}),
        "rollout_id",
    ),
    PlantedBug(
        "the card's test rows taken from train",
        "release/card.py",
        "{manifest['rows'][kind][split]} |\")",
        "{manifest['rows'][kind]['train']} |\")",
        frozenset({"release_card_matches_files"}),
        "test",
    ),
)


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("planted") / "demo"
    write_demo(root, (ROUND,))
    return root


def _project_copy(folder: Path, bug: PlantedBug | None) -> Path:
    """The package and its test helpers, with `bug` planted in the package's copy."""
    for package in ("rollout_assets", "rollout_assets_tests"):
        shutil.copytree(PROJECT_DIR / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
    if bug is not None:
        target = folder / "rollout_assets" / bug.file
        text = target.read_text(encoding="utf-8")
        assert text.count(bug.before) == 1, f"{bug.file} no longer holds the line the bug replaces"
        target.write_text(text.replace(bug.before, bug.after), encoding="utf-8")
    return folder


def _run(folder: Path, demo_root: Path) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ROLLOUT_", "DAGSTER_"))}
    env["PYTHONPATH"] = str(folder)
    completed = subprocess.run(
        [sys.executable, "-m", "rollout_assets_tests.planted_bug_run", str(demo_root), str(folder / "ledgers"), ROUND.name],
        check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-4000:]
    found = json.loads(completed.stdout.splitlines()[-1])
    assert found["code"].startswith(str(folder)), "the copy's code must be the one that ran"
    return found


def _failed(found: dict[str, Any]) -> set[str]:
    """The blocking checks that failed (a warning, such as the round's cells whose worker list
    is unreadable, is not a failure)."""
    return {name for name, verdict in found["checks"].items() if not verdict["passed"] and verdict["blocking"]}


@pytest.mark.slow
def test_the_unchanged_code_passes_every_check(tmp_path: Path, demo_root: Path) -> None:
    found = _run(_project_copy(tmp_path, None), demo_root)

    assert found["step_failures"] == {}
    assert len(found["checks"]) > 20 and _failed(found) == set()


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.name)
def test_a_planted_bug_fails_a_blocking_check(tmp_path: Path, demo_root: Path, bug: PlantedBug) -> None:
    found = _run(_project_copy(tmp_path, bug), demo_root)

    assert bug.caught_by <= _failed(found), {name: found["checks"].get(name) for name in bug.caught_by}
    for name in bug.caught_by:
        assert bug.names in (found["checks"][name]["problem"] or ""), found["checks"][name]
