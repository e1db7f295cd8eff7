"""What the inputs say the ledger must hold, recounted once per round (`recount_inputs`): the
cells, the receipts, the sessions of the worker cwds, the run id, and every line the round
should produce, in ledger order (`ExpectedLine`)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from rollout_assets.audit.cells import Cell, CellsRecount, recount_cells, resolved_fractions
from rollout_assets.audit.folders import UnreadableRound
from rollout_assets.audit.shots import ProposerWorktree, proposer_worktrees, shot_receipts
from rollout_assets.audit.spill import SpilledMapping, SpilledRows, tally_key
from rollout_assets.audit.stores import StoreReading, read_store
from rollout_assets.audit.subagents import assign_joins, joined_session
from rollout_assets.audit.strict_json import input_json
from rollout_assets.audit.wording import generation_and_index, rollout_id, unreadable_transcripts_gap
from rollout_assets.io import read_regular_file

# What a line's gap may be, beside an exact gap (a supervisor's, or a shot's whose transcript folder
# cannot be listed), as `ExpectedLine.gap`:
STORE_UNAVAILABLE = 1  # a worker cwd, the store unreadable: its "store unavailable" gap
NO_SESSION = 2  # a worker cwd without a session in a readable store: its "no session" gap
SESSION = 3  # a session: its transcript, or its "no readable message parts" gap (parts are not read here)
NO_TRANSCRIPT = 4  # a shot whose worktree has no transcript file: its "no transcript matched" gap
TRANSCRIPT = 5  # a shot with transcript files (not read here): joined, or either proposer gap
SUBAGENT = 6  # a sub-agent conversation the audit counted: its transcript, never a gap


class ExpectedLine(NamedTuple):
    """One line the inputs say the ledger must hold, in ledger order."""

    rollout_id: str
    reward: Any  # what its reward must be
    coordinates: tuple[
        Any, ...
    ]  # what its (candidate_id, generation, candidate_index, instance_id, rep) must be
    # The invocation, for a failing check's sample: (kind, *names), worded only when one is
    # shown (a string per line would hold tens of MB for a large round).
    parts: tuple[Any, ...]
    parent: str | None  # what its parent_rollout_id must be
    gap: Any  # what its gap may be: see inputs_match._gap_problem
    # A proposer's or sub-agent's token usage as the audit reads its transcript (usage_proofs.py):
    # (the file read, or None when the audit's join gives the shot none; its four sums), or why
    # the audit cannot tell which file the shot joins. None for the other roles.
    usage: Any = None

    @property
    def what(self) -> str:
        kind, *names = self.parts
        if kind == "proposer":
            return f"proposer {names[0]}"
        if kind == "agent":
            return f"sub-agent conversation {names[2]} of {names[1]} (proposer {names[0]})"
        *worker, candidate, scenario, rep = names
        supervisor = f"supervisor {candidate}/{scenario}/rep{rep}"
        return f"worker {worker[0]} session {worker[1]} of {supervisor}" if kind == "worker" else supervisor


@dataclass
class InputsRecount:
    """Everything the round's inputs say the ledger must account for, read once."""

    # What the counting checks compare, as (key,) records labeled with their tally, on disk
    # (`tally` builds a Counter when a verdict asks): "cells", (candidate, scenario, rep) of
    # each cell, one supervisor line each; "worker_cwds", every worker cwd some result.json
    # lists; "session_ids", the opencode sessions of those cwds, once per cell listing the cwd.
    keys: SpilledRows
    cells_without_worker_list: list[
        str
    ]  # cells whose workers ran but cannot be listed (see cells._supervisor_gap)
    receipts: Counter[tuple[str, int]]  # (instance_id, shot): one proposer line each
    store_readable: bool
    run_id: str  # the run_id of every line
    # Every line, in ledger order, on disk and keyed by its rollout_id; None when the recount
    # was taken without the opencode store.
    expected: SpilledRows | None = None
    # What the gap proofs read further (see gap_proofs.py): where the inputs are, the store
    # as the audit read it, and, by rollout id, each supervisor's cell (its runDir, and the
    # number of worker cwds its result.json lists) and each proposer's shot.
    out_dir: Path | None = None
    opencode_db: Path | None = None
    claude_projects: Path | None = None
    # The store as the audit read it, with the sessions of each worker cwd on disk (`sessions_of`).
    store: StoreReading = field(default_factory=lambda: StoreReading(False))
    supervisor_cells: SpilledMapping = field(default_factory=SpilledMapping)  # on disk: one per cell
    shots: dict[str, ProposerWorktree] = field(default_factory=dict)

    def tally(self, name: str) -> Counter[Any]:
        """The keys of one tally ("cells", "worker_cwds" or "session_ids"), each as often as counted."""
        assert name in ("cells", "worker_cwds", "session_ids")
        return self.keys.counted(name)

    def sessions_of(self, cwd: str) -> list[str]:
        """The ids of the sessions of a worker cwd the store holds, oldest first."""
        return self.store.sessions_of(cwd)


def recount_inputs(
    out_dir: Path,
    opencode_db: Path | None,
    workers: int | None = None,
    *,
    claude_projects: Path | None = None,
    cells: CellsRecount | None = None,
) -> InputsRecount:
    """One walk of the cells (and their result.json), the receipts, and one SQL pass over the
    store (skipped when `opencode_db` is None); with `claude_projects`, the names of the
    transcript files each proposer worktree could be joined to (no file is read).

    `cells`: the walk of the cells already made (`recount_cells` of `out_dir`), which this
    recount then consumes: its cells are read back once."""
    if cells is None:
        cells = recount_cells(out_dir, workers)
    store = read_store(opencode_db, cells.worker_cwds) if opencode_db is not None else StoreReading(False)
    receipts = list(shot_receipts(out_dir))
    recount = InputsRecount(
        keys=SpilledRows(),
        cells_without_worker_list=cells.without_list,
        receipts=Counter(receipt.key for receipt in receipts),
        store_readable=store.readable,
        run_id=_run_id(out_dir),
        out_dir=out_dir,
        opencode_db=opencode_db,
        claude_projects=claude_projects,
        store=store,
        expected=SpilledRows(ExpectedLine) if opencode_db is not None else None,
    )
    _walk_cells(recount, cells)
    if recount.expected is not None:
        worktrees = assign_joins(out_dir, proposer_worktrees(out_dir, receipts, claude_projects))
        for line in _proposer_lines(recount, cells, worktrees):
            recount.expected.append(line, key=line.rollout_id)
    return recount


def _walk_cells(recount: InputsRecount, cells: CellsRecount) -> None:
    """The counting checks' keys and, with the store, the expected lines of every cell, in
    one walk of the cells and their cwds' sessions."""
    keys, expected = recount.keys, recount.expected
    for cwd in cells.worker_cwds:
        keys.append((cwd,), key=tally_key(cwd), label="worker_cwds")
    for cell, cwds, supervisor_gap in _cells_with_sessions(cells, recount.store):
        task = (cell.candidate_id, cell.scenario_id, cell.rep)
        keys.append((task,), key=tally_key(task), label="cells")
        # once per cell listing the session's cwd: two cells listing one cwd both get its lines
        for _, sessions in cwds:
            for session in sessions:
                keys.append((session,), key=tally_key(session), label="session_ids")
        if expected is not None:
            for line in _cell_lines(recount, cell, cwds, supervisor_gap):
                expected.append(line, key=line.rollout_id)


def _cells_with_sessions(
    cells: CellsRecount, store: StoreReading
) -> Iterator[tuple[Cell, tuple[tuple[str, list[str]], ...], str]]:
    """(cell, each cwd it lists with the ids of its sessions in the store, its supervisor's
    gap), in ledger order: the cells and their cwds' sessions are two walks in the same order."""
    listed = cells.worker_cwds.listed_sessions() if store.readable else None
    for cell, cwds, gap in cells.cells_in_order():
        yield cell, tuple((cwd, next(listed) if listed is not None else []) for cwd in cwds), gap


def _run_id(out_dir: Path) -> str:
    """docs/line-format.md: loop-provenance.json's `runId`, else the absolute outDir. A
    provenance file that is there but cannot be read or parsed is no round's (the round reader
    refuses it)."""
    path = out_dir / "improve-run" / "loop-provenance.json"
    try:
        provenance = input_json(read_regular_file(path))
    except (FileNotFoundError, NotADirectoryError):
        provenance = None
    except (OSError, ValueError) as error:
        raise UnreadableRound(f"{path}: cannot read the loop provenance ({error})") from error
    run_id = provenance.get("runId") if isinstance(provenance, dict) else None
    return run_id if isinstance(run_id, str) and run_id else os.path.abspath(out_dir)


# Every line of the round, in ledger order, named by its id (docs/line-format.md, Ids): each
# cell's supervisor, then one worker line per session of each of its cwds (one gap line for a
# cwd without a session), cell after cell (`_cell_lines`); then one proposer line per receipt,
# by path, each followed by one `agent` line per sub-agent conversation of the transcript the
# audit's own one-to-one join gives it (`_proposer_lines`). Each with its parent and what its
# gap may be.


def _cell_lines(
    recount: InputsRecount, cell: Cell, cwds: tuple[tuple[str, list[str]], ...], supervisor_gap: str
) -> Iterator[ExpectedLine]:
    """The lines of one cell: its supervisor's, then its workers'."""
    run_id, store = recount.run_id, recount.store
    supervisor = rollout_id(f"{run_id}|supervisor|{cell.candidate_id}|{cell.scenario_id}|{cell.rep}")
    recount.supervisor_cells[supervisor] = (cell.run_dir, len(cwds))
    # A worker line carries its supervisor's candidate and task.
    coordinates = (
        cell.candidate_id,
        *generation_and_index(cell.candidate_id),
        cell.scenario_id,
        cell.rep,
    )
    names = (cell.candidate_id, cell.scenario_id, cell.rep)
    yield ExpectedLine(supervisor, cell.reward, coordinates, ("supervisor", *names), None, supervisor_gap)
    for cwd, found in cwds:
        gap = SESSION if found else NO_SESSION if store.readable else STORE_UNAVAILABLE
        for session in found or ["-"]:
            worker = rollout_id(f"{supervisor}|{cwd}|{session}")
            yield ExpectedLine(
                worker, cell.reward, coordinates, ("worker", cwd, session, *names), supervisor, gap
            )


def _proposer_lines(
    recount: InputsRecount, cells: CellsRecount, worktrees: list[ProposerWorktree]
) -> Iterator[ExpectedLine]:
    fractions = resolved_fractions(cells)
    for shot in worktrees:
        receipt, worktree, transcripts, unreadable_folder = shot[:4]
        proposer = rollout_id(f"{recount.run_id}|proposer|{receipt.relative_path}")
        recount.shots[proposer] = shot
        coordinates = (receipt.candidate_id, *generation_and_index(receipt.candidate_id), *receipt.key)
        parts = ("proposer", receipt.relative_path, worktree, transcripts)
        gap: Any = NO_TRANSCRIPT if transcripts == () else TRANSCRIPT
        if unreadable_folder is not None:
            gap = unreadable_transcripts_gap(worktree, *unreadable_folder)
        reward = fractions.get(receipt.candidate_id)
        joined = None
        if shot.joined is not None and unreadable_folder is None:
            joined = joined_session(shot.joined, transcripts or ())
        yield ExpectedLine(proposer, reward, coordinates, parts, None, gap, _shot_usage(shot, joined))
        for conversation in joined.conversations if joined is not None else ():
            agent = rollout_id(f"{proposer}|agent|{conversation.in_project}|{conversation.key}")
            agent_parts = ("agent", receipt.relative_path, conversation.file, conversation.key)
            usage = (conversation.file, conversation.usage)
            yield ExpectedLine(agent, reward, coordinates, agent_parts, proposer, SUBAGENT, usage)


def _shot_usage(shot: ProposerWorktree, joined: Any) -> Any:
    """What the audit reads of the usage of the transcript its one-to-one join gives the shot."""
    if not shot.assigned:
        return "the audit cannot settle which transcript of the worktree the shot joins"
    if joined is None:
        return (None, ())
    return (shot.joined, joined.usage)
