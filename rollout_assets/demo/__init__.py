"""Demo rounds: deterministic, realistic round outDirs plus the harness stores they point at.

OWNS the sample INPUTS only (formats: docs/input-formats.md). Under one ROOT it writes:

    ROOT/rounds/<name>/          one round outDir per RoundSpec (improve-run/, runs/, patches/,
                                 candidates/, proposer-shots/)
    ROOT/opencode.db             the opencode store holding the worker sessions of every round
    ROOT/claude-projects/        Claude Code project folders holding the proposer transcripts
    ROOT/worker-clones/...       NOT written: worker cwds are only names, as in a real store

It imports nothing from rollout_assets outside this package and reads nothing back: a reader
bug cannot shape its own fixture. Stdlib only.

Determinism: the same root path and specs give the same bytes, modulo the root path itself
(and its Claude slug). Times start at 2026-11-02T09:00:00.000Z plus a per-round day offset taken
from a hash of the round name; random values come from `random.Random(spec.seed)`, drawn in a
fixed order (so any new draw changes every later value: the golden ledger test notices); every id
is a hash of round-relative names or a zero-padded counter. Nothing reads the clock or uuid4.

DEFAULT_ROUNDS (what `rollout-assets demo ROOT` writes): round-001, small, every edge case;
round-002, larger and clean (no edge cases); round-003, every edge case plus every FIX_CASES name.
planted.py has the table of every planted case and where DEFAULT_ROUNDS puts it.

Scale: files are streamed cell by cell, the opencode rows go in through `executemany` in chunks
inside one transaction per round, and nothing is quadratic in the number of cells.

Modules, one job each:

    generate.py            write_demo, edge_case_sites, DemoLayout: the entry points
    plan.py                RoundSpec, DEFAULT_ROUNDS and a round's structure and paths
    planted.py             the planted cases: catalogue and assignment
    case_sites.py          where each planted case lands in a written round
    rounds.py              one round's outDir, writers called in the order of the random draws
    cells.py               one cell's files and its worker sessions
    opencode_store.py      the opencode schema and its session/message/part rows
    session_edits.py       a planted edit of one session's rows before they are written
    worker_text.py         what a worker session's prompt and tool calls say
    shots.py               one proposer shot's receipt and transcript files
    claude_transcripts.py  the lines of a Claude Code session file
    leaks.py               the planted secrets: their values and the tool calls that leak them
    world.py, ids.py, files.py  the clock and models, hash-derived ids, file writing
"""

from rollout_assets.demo.generate import DemoLayout, edge_case_sites, write_demo
from rollout_assets.demo.plan import DEFAULT_ROUNDS, RoundSpec
from rollout_assets.demo.case_sites import EdgeCaseSite
from rollout_assets.demo.planted import EDGE_CASE_LOCATIONS, FIX_CASES
from rollout_assets.demo.world import NON_ASCII_SAMPLE

__all__ = [
    "DEFAULT_ROUNDS",
    "EDGE_CASE_LOCATIONS",
    "FIX_CASES",
    "NON_ASCII_SAMPLE",
    "DemoLayout",
    "EdgeCaseSite",
    "RoundSpec",
    "edge_case_sites",
    "write_demo",
]
