"""The backfill join: one round outDir plus its harness stores → a stream of ledger lines.

Owns the order of lines and which source record each line comes from (the seed's JOIN):
manifest entries in order (baseline, then generation, candidate); within an entry, cells by
(scenarioId, rep), each supervisor line directly followed by its worker lines; then all
proposer lines by receipt path, each directly followed by the `agent` lines of its transcript's
sub-agent conversations. Lines are produced as a stream and the stats are counted as
they pass, so a huge round is never held in memory.

The join is split into stages (cell rows, worker lines of a batch of cells, proposer lines)
so the Dagster layer can store each stage on its own while producing the same lines.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any, Self

from rollout_assets.backfill.jsdate import js_date_parse_ms
from rollout_assets.backfill.lines import LineContext, proposer_line, subagent_line, supervisor_line
from rollout_assets.backfill.worker_line import worker_line
from rollout_assets.backfill.stats import BackfillStats
from rollout_assets.sources.claude import (
    ClaudeTranscript,
    read_transcript,
    subagent_conversations,
    transcript_files,
)
from rollout_assets.sources.opencode import OpencodeSession, OpencodeStore
from rollout_assets.sources.opencode_store import last_problem
from rollout_assets.sources.round import (
    RoundManifest,
    ShotReceiptFile,
    build_manifest,
    list_shot_receipts,
    read_result_and_verdict,
    read_shot_receipt,
    worker_cwds_of,
)

# Cells per batched opencode session query: bounds memory while keeping queries few.
CELL_BATCH = 512
# A transcript may start up to this long before the shot's start or after its end.
WINDOW_SLACK_MS = 120_000


def utc_now_iso() -> str:
    """ISO-8601 UTC with milliseconds, as JavaScript's Date.toISOString writes it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class CellRow:
    """One campaign cell: its supervisor line and the distinct worker cwds its result.json lists."""

    supervisor: dict[str, Any]
    worker_cwds: list[str]


def cell_rows(manifest: RoundManifest, context: LineContext) -> Iterator[CellRow]:
    """Stage 1: every cell's supervisor line and worker cwds, in ledger order."""
    for entry in manifest.entries:
        for cell in entry.cells:
            result, verdict = read_result_and_verdict(cell)
            line = supervisor_line(context, entry, cell, result=result, verdict=verdict)
            yield CellRow(supervisor=line, worker_cwds=worker_cwds_of(result))


def episode_lines(
    rows: Iterable[CellRow],
    store: OpencodeStore | None,
    context: LineContext,
    *,
    include_supervisors: bool = True,
    cells_per_batch: int = CELL_BATCH,
) -> Iterator[dict[str, Any]]:
    """Stage 2: each supervisor line (optionally) followed by its worker lines.

    The sessions of a batch of cells are fetched in one query, so a round costs a few
    batched lookups instead of one scan of the session table per worker cwd. A smaller batch
    holds fewer cells at once, for a store indexed by directory (`index_directories`), where a
    lookup scans nothing.
    """
    for batch in _batches(rows, cells_per_batch):
        sessions = _sessions_for(batch, store)
        for row in batch:
            if include_supervisors:
                yield row.supervisor
            yield from _worker_lines(row, sessions, store, context)


def _sessions_for(rows: list[CellRow], store: OpencodeStore | None) -> dict[str, list[OpencodeSession]]:
    if store is None:
        return {}
    return store.sessions_by_directory(cwd for row in rows for cwd in row.worker_cwds)


def _worker_lines(
    row: CellRow,
    sessions_by_cwd: dict[str, list[OpencodeSession]],
    store: OpencodeStore | None,
    context: LineContext,
) -> Iterator[dict[str, Any]]:
    """For each distinct cwd: one line per session, or exactly one gap line when there is none."""
    available = store is not None
    # Why the store could not be read: what this process (or the one that forked it to run
    # this round's units) found when it tried.
    problem = None if available else last_problem()
    for cwd in row.worker_cwds:
        sessions = sessions_by_cwd.get(cwd, [])
        if not sessions:
            yield worker_line(
                context, row.supervisor, cwd, None, None, store_available=available, store_problem=problem
            )
            continue
        for session in sessions:
            assert store is not None
            transcript = store.session_transcript(session.id)
            yield worker_line(context, row.supervisor, cwd, session, transcript, store_available=available)


def proposer_lines(
    manifest: RoundManifest, context: LineContext, claude_projects_dir: str | os.PathLike[str]
) -> Iterator[dict[str, Any]]:
    """Stage 3: one line per shot receipt, joined to its Claude transcript by time window, each
    followed by one line per sub-agent conversation of that transcript (`subagent_line`).

    The join is one-to-one within a worktree (`assign_transcripts`): the shots of one worktree
    are read together (receipts come in path order, which keeps them together)."""
    transcripts = _WorktreeTranscripts(Path(os.path.abspath(claude_projects_dir)))
    for worktree_shots in _by_worktree(manifest, list_shot_receipts(manifest.out_dir)):
        receipts = [read_shot_receipt(shot) for shot in worktree_shots]
        candidates = transcripts.candidates(manifest.out_dir, worktree_shots[0])
        unreadable = transcripts.unreadable
        # With a candidate unread, the window cannot be judged: the shots are gaps saying so.
        chosen = [None] * len(receipts) if unreadable is not None else assign_transcripts(candidates, receipts)
        for shot, receipt, transcript in zip(worktree_shots, receipts, chosen, strict=True):
            entry = manifest.entry_for(shot.generation, shot.candidate_index)
            line = proposer_line(context, str(manifest.out_dir), shot, receipt, entry, transcript, unreadable)
            yield line
            if transcript is not None:
                for conversation in subagent_conversations(transcript, transcripts.listed):
                    yield subagent_line(context, line, conversation)


def _by_worktree(manifest: RoundManifest, shots: Iterable[ShotReceiptFile]) -> Iterator[list[ShotReceiptFile]]:
    """Consecutive shots of one worktree, together."""
    group: list[ShotReceiptFile] = []
    for shot in shots:
        if group and shot.worktree_cwd(manifest.out_dir) != group[0].worktree_cwd(manifest.out_dir):
            yield group
            group = []
        group.append(shot)
    if group:
        yield group


def line_context(manifest: RoundManifest, captured_at: str | None = None) -> LineContext:
    return LineContext(
        run_id=manifest.run_id,
        captured_at=captured_at or utc_now_iso(),
        instance_count=len(manifest.instances),
    )


class RoundBackfill:
    """The whole backfill of one round, as one stream. Building it reads the manifest and
    fails loud on corrupt evidence, before anything is written anywhere.

    Use as a context manager (it holds the opencode store open), then iterate `lines()`
    once; `stats` is complete when the iteration ends.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        opencode_db: str | os.PathLike[str],
        claude_projects_dir: str | os.PathLike[str],
        captured_at: str | None = None,
    ):
        self.manifest = build_manifest(out_dir)
        self.out_dir = self.manifest.out_dir
        self.claude_projects_dir = claude_projects_dir
        self.context = line_context(self.manifest, captured_at)
        self.store = OpencodeStore.open(opencode_db)
        self.stats = BackfillStats(opencode_db_available=self.store is not None)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every line of the round in ledger order, counted into `stats` as it passes."""
        rows = cell_rows(self.manifest, self.context)
        for line in episode_lines(rows, self.store, self.context):
            self.stats.observe(line)
            yield line
        for line in proposer_lines(self.manifest, self.context, self.claude_projects_dir):
            self.stats.observe(line)
            yield line


def _batches(rows: Iterable[CellRow], size: int) -> Iterator[list[CellRow]]:
    iterator = iter(rows)
    while batch := list(islice(iterator, size)):
        yield batch


class _WorktreeTranscripts:
    """Parsed transcripts of the current worktree, so each file is read once.

    Receipts are processed in path order, which keeps the shots of one worktree together;
    only one worktree's transcripts are held at a time.
    """

    def __init__(self, projects_dir: Path):
        self.projects_dir = projects_dir
        self._worktree: str | None = None
        self._transcripts: list[ClaudeTranscript] = []
        # (path, why) of the first project folder or transcript file of the current worktree
        # that is there but could not be read; None when every one was read.
        self.unreadable: tuple[str, str] | None = None

    def candidates(self, out_dir: Path, shot: ShotReceiptFile) -> list[ClaudeTranscript]:
        worktree = shot.worktree_cwd(out_dir)
        if worktree != self._worktree:
            # The worktree path is built from the outDir; a moved or symlinked outDir
            # may have been recorded by Claude Code under its real path instead.
            real_worktree = shot.worktree_cwd(Path(os.path.realpath(out_dir)))
            found = transcript_files([worktree, real_worktree], self.projects_dir)
            self._transcripts = [read_transcript(path) for path in found.files]
            self.unreadable = found.unreadable_folder or next(
                ((str(t.path), t.unreadable) for t in self._transcripts if t.unreadable is not None), None
            )
            self._worktree = worktree
        # A file without any main-thread conversation line (a sidechain-only agent file)
        # is not a proposer session: it counts neither for the window nor for "the only one".
        return [t for t in self._transcripts if t.main_thread_lines > 0]

    @property
    def listed(self) -> list[ClaudeTranscript]:
        """Every transcript file of the current worktree, agent files included."""
        return self._transcripts


def _windowed(
    candidates: list[ClaudeTranscript], receipt: dict[str, Any] | None
) -> list[tuple[float, int]]:
    """(distance of its start from the shot's start, its index) of each candidate in the shot's
    window (docs/input-formats.md §6); distance 0 when either time is not read."""
    receipt = receipt or {}
    started = js_date_parse_ms(receipt.get("startedAt"))
    completed = js_date_parse_ms(receipt.get("completedAt"))
    windowed: list[tuple[float, int]] = []
    for index, transcript in enumerate(candidates):
        if transcript.started_at is None:
            continue
        start = js_date_parse_ms(transcript.started_at)
        if started is None or completed is None:
            in_window = len(candidates) == 1
        else:
            in_window = (
                start is not None and started - WINDOW_SLACK_MS <= start <= completed + WINDOW_SLACK_MS
            )
        if in_window:
            distance = 0.0 if start is None or started is None else abs(start - started)
            windowed.append((distance, index))
    return windowed


def choose_transcript(
    candidates: list[ClaudeTranscript], receipt: dict[str, Any] | None
) -> ClaudeTranscript | None:
    """The transcript of a shot alone (docs/input-formats.md §6), or None when none matches."""
    return assign_transcripts(candidates, [receipt])[0]


def assign_transcripts(
    candidates: list[ClaudeTranscript], receipts: list[dict[str, Any] | None]
) -> list[ClaudeTranscript | None]:
    """The transcript of each shot of one worktree, one-to-one: a transcript joins at most one
    shot. Every (shot, transcript in its window) pair is taken closest in time first (ties: the
    earlier shot in receipt order, then the first candidate in file-name order); a pair whose
    shot or transcript is taken already is passed over, so the shot that lost a transcript gets
    its next closest one, or none."""
    pairs = sorted(
        (distance, shot, index)
        for shot, receipt in enumerate(receipts)
        for distance, index in _windowed(candidates, receipt)
    )
    chosen: list[ClaudeTranscript | None] = [None] * len(receipts)
    taken: set[int] = set()
    for _, shot, index in pairs:
        if chosen[shot] is None and index not in taken:
            chosen[shot] = candidates[index]
            taken.add(index)
    return chosen
