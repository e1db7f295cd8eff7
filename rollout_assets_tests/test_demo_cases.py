"""The demo reaches every case the code handles, through Dagster, and says so when it stops.

`bash scripts/demo.sh` is where people see the project work: its rounds must run every path
of the readers, the join and the training selection, and pass every blocking check while
doing it. The census (demo_census.py) reads the written files, the ledgers and the training
folders on its own; these tests materialize the shipped demo rounds as the demo script does
and ask the census for every case of its catalogue, and show that a round that loses a case
is noticed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout, write_demo
from rollout_assets_tests.demo_census import CASES, census, claude_cases, opencode_cases, slug
from rollout_assets_tests.test_assets import PROJECT_DIR, VENV_BIN, _cli_env, _dagster_home

ROUND_003 = DEFAULT_ROUNDS[2]


@pytest.fixture(scope="module")
def materialized_demo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[DemoLayout, Path, subprocess.CompletedProcess[str]]:
    """The shipped demo rounds, materialized and checked by `rollout-assets materialize`."""
    root = tmp_path_factory.mktemp("demo-cases")
    layout = write_demo(root / "demo", DEFAULT_ROUNDS)
    ledger_root = root / "ledgers"
    env = _cli_env(_dagster_home(root / "dagster_home"), layout, ledger_root)
    completed = subprocess.run(
        [str(VENV_BIN / "rollout-assets"), "materialize"],
        check=False, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return layout, ledger_root, completed


@pytest.mark.slow
def test_every_demo_round_passes_every_check_through_dagster(
    materialized_demo: tuple[DemoLayout, Path, subprocess.CompletedProcess[str]],
) -> None:
    _, _, completed = materialized_demo
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    for spec in DEFAULT_ROUNDS:
        assert f"=== round {spec.name}: succeeded" in output, output[-4000:]
    # Only a warning may be left: the cells whose result.json is planted missing or corrupt.
    checks = [line for line in output.splitlines() if line.startswith("  check ")]
    not_passed = [line for line in checks if not line.endswith(": passed")]
    assert checks and all("every_cell_lists_its_workers: warning" in line for line in not_passed), not_passed


@pytest.mark.slow
def test_the_demo_rounds_reach_every_case(
    materialized_demo: tuple[DemoLayout, Path, subprocess.CompletedProcess[str]],
) -> None:
    layout, ledger_root, _ = materialized_demo
    reached: set[str] = set()
    for spec in DEFAULT_ROUNDS:
        folder = ledger_root / spec.name
        reached |= census(layout.root, spec.name, folder / "rollout-ledger.jsonl", folder / "training")

    assert sorted(set(CASES) - reached) == []


def _round_003(tmp_path: Path) -> DemoLayout:
    return write_demo(tmp_path / "demo", (ROUND_003,))


def test_a_round_that_loses_its_subagents_folder_is_noticed(tmp_path: Path) -> None:
    layout = _round_003(tmp_path)
    before = claude_cases(layout.root, ROUND_003.name)
    projects = layout.claude_projects_dir
    nested = [p for p in projects.glob("*/*/subagents") if p.is_dir()]
    for folder in nested:
        shutil.rmtree(folder)

    after = claude_cases(layout.root, ROUND_003.name)

    assert "subagent_in_subagents_folder" in before and nested
    assert before - after == {"subagent_in_subagents_folder"}


def test_a_round_whose_cut_line_is_completed_is_noticed(tmp_path: Path) -> None:
    layout = _round_003(tmp_path)
    prefix = slug(str(layout.root / "rounds" / ROUND_003.name))
    cut = [
        path
        for path in layout.claude_projects_dir.rglob("*.jsonl")
        if path.parent.name.startswith(prefix) and not path.read_bytes().endswith(b"\n")
    ]
    assert cut
    for path in cut:  # drop the half-written line, as if the writer had never started it
        text = path.read_bytes()
        path.write_bytes(text[: text.rfind(b"\n") + 1])

    assert "truncated_transcript_line" not in claude_cases(layout.root, ROUND_003.name)


def test_a_round_without_its_planted_cases_misses_them(tmp_path: Path) -> None:
    clean = DEFAULT_ROUNDS[1]
    layout = write_demo(tmp_path / "demo", (clean,))

    reached = claude_cases(layout.root, clean.name) | opencode_cases(layout.root, clean.name)

    assert {"system_prompt", "ignored_part", "ids_and_times_disagree", "malformed_part"}.isdisjoint(reached)
    assert "subagent_inline" in reached  # the census does read a clean round
