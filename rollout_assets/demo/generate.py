"""The demo's entry points: `write_demo` and `edge_case_sites`.

`write_demo` writes rounds and their stores under one root; `edge_case_sites` names where a
round's planted cases land without writing anything. OWNS the root's layout (`DemoLayout`),
the refusals made before anything is written, and the one SQLite connection with its settings;
rounds.py writes each round through it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.demo.opencode_store import check_store_schema, create_store_schema
from rollout_assets.demo.plan import DEFAULT_ROUNDS, RoundPlan, RoundSpec, plan_round
from rollout_assets.demo.case_sites import EdgeCaseSite, case_sites
from rollout_assets.demo.rounds import write_round


@dataclass(frozen=True)
class DemoLayout:
    """Where `write_demo` put things; every path is absolute."""

    root: Path
    rounds_root: Path  # ROOT/rounds
    opencode_db: Path  # ROOT/opencode.db
    claude_projects_dir: Path  # ROOT/claude-projects
    rounds: tuple[Path, ...]  # the outDir of every round written by this call

    def environment(self, ledger_root: Path) -> dict[str, str]:
        """The variables that point the Dagster project's resources at this demo, writing
        ledgers under `ledger_root` (what scripts/env.sh sets for ./demo)."""
        return {
            "ROLLOUT_ROUNDS_ROOT": str(self.rounds_root),
            "OPENCODE_DB": str(self.opencode_db),
            "CLAUDE_PROJECTS_DIR": str(self.claude_projects_dir),
            "ROLLOUT_LEDGER_ROOT": str(ledger_root),
        }


def write_demo(
    root: Path | str,
    rounds: Sequence[RoundSpec] = DEFAULT_ROUNDS,
    *,
    legacy_opencode_schema: bool = False,
) -> DemoLayout:
    """Write `rounds` under `root`, appending to the root's opencode store and Claude projects.

    Everything is checked before anything is written: a round whose directory exists, two
    specs with one name, a spec too small for its edge cases, or an existing store of the
    other schema raise ValueError.
    """
    root_path = Path(root).resolve()
    plans = [plan_round(root_path, spec) for spec in rounds]
    _refuse_existing_rounds(plans)
    layout = DemoLayout(
        root=root_path,
        rounds_root=root_path / "rounds",
        opencode_db=root_path / "opencode.db",
        claude_projects_dir=root_path / "claude-projects",
        rounds=tuple(plan.out_dir for plan in plans),
    )
    check_store_schema(layout.opencode_db, legacy_opencode_schema)
    layout.rounds_root.mkdir(parents=True, exist_ok=True)
    layout.claude_projects_dir.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(layout.opencode_db)
    try:
        # A 64 MB page cache keeps a large round's index pages in memory; without fsyncs, each
        # spill of that cache costs a write, not a disk flush. A demo store that an OS crash
        # could damage is regenerated, never repaired.
        connection.execute("PRAGMA cache_size = -65536")
        connection.execute("PRAGMA synchronous = OFF")
        create_store_schema(connection, legacy_opencode_schema)
        for plan in plans:
            write_round(plan, connection, legacy_opencode_schema)
    finally:
        connection.close()
    return layout


def edge_case_sites(root: Path | str, spec: RoundSpec) -> dict[str, EdgeCaseSite]:
    """The planted cases of round `spec` under `root`, by case name (pure: reads nothing)."""
    return case_sites(plan_round(Path(root).resolve(), spec))


def _refuse_existing_rounds(plans: list[RoundPlan]) -> None:
    seen: set[str] = set()
    for plan in plans:
        if plan.spec.name in seen:
            raise ValueError(f"round name {plan.spec.name!r} appears twice in the specs")
        seen.add(plan.spec.name)
        if plan.out_dir.exists():
            raise ValueError(f"round directory {plan.out_dir} already exists; refusing to overwrite it")
