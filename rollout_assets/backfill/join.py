"""The backfill join: one round outDir plus its harness stores → a stream of ledger lines.

Owns the order of lines and which source record each line comes from (the seed's JOIN):
manifest entries in order (baseline, then generation, candidate); within an entry, cells by
(scenarioId, rep), each supervisor line directly followed by its worker lines; then all
proposer lines by receipt path. Lines are produced as a stream and the stats are counted as
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
from rollout_assets.backfill.lines import LineContext, proposer_line, supervisor_line
from rollout_assets.backfill.worker_line import worker_line
from rollout_assets.backfill.stats import BackfillStats
from rollout_assets.sources.claude import ClaudeTranscript, read_transcript, transcript_files
from rollout_assets.sources.opencode import OpencodeSession, OpencodeStore
from rollout_assets.sources.opencode_store import last_problem
from rollout_assets.sources.round import (
    RoundManifest,
    ShotReceiptFile,
    build_manifest,
    list_shot_receipts,
    read_judge_verdict,
    read_shot_receipt,
    read_supervisor_result,
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
            result = read_supervisor_result(cell.run_dir)
            verdict = read_judge_verdict(cell.run_dir)
            line = supervisor_line(context, entry, cell, result=result, verdict=verdict)
            yield CellRow(supervisor=line, worker_cwds=worker_cwds_of(result))


def episode_lines(
    rows: Iterable[CellRow],
    store: OpencodeStore | None,
    context: LineContext,
    *,
    include_supervisors: bool = True,
) -> Iterator[dict[str, Any]]:
    """Stage 2: each supervisor line (optionally) followed by its worker lines.

    The sessions of a batch of cells are fetched in one query, so a round costs a few
    batched lookups instead of one scan of the session table per worker cwd.
    """
    for batch in _batches(rows, CELL_BATCH):
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
    """Stage 3: one line per shot receipt, joined to its Claude transcript by time window."""
    transcripts = _WorktreeTranscripts(Path(os.path.abspath(claude_projects_dir)))
    for shot in list_shot_receipts(manifest.out_dir):
        receipt = read_shot_receipt(shot)
        entry = manifest.entry_for(shot.generation, shot.candidate_index)
        candidates = transcripts.candidates(manifest.out_dir, shot)
        unreadable = transcripts.unreadable
        # With a candidate unread, the window cannot be judged: the shot is a gap saying so.
        transcript = None if unreadable is not None else choose_transcript(candidates, receipt)
        yield proposer_line(context, str(manifest.out_dir), shot, receipt, entry, transcript, unreadable)


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


def choose_transcript(
    candidates: list[ClaudeTranscript], receipt: dict[str, Any] | None
) -> ClaudeTranscript | None:
    """The transcript of a shot (docs/input-formats.md §6), or None when none matches."""
    receipt = receipt or {}
    started = js_date_parse_ms(receipt.get("startedAt"))
    completed = js_date_parse_ms(receipt.get("completedAt"))
    windowed: list[tuple[ClaudeTranscript, float | None]] = []
    for transcript in candidates:
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
            windowed.append((transcript, start))
    if not windowed:
        return None

    def distance(item: tuple[ClaudeTranscript, float | None]) -> float:
        start = item[1]
        return 0.0 if start is None or started is None else abs(start - started)

    # Stable sort: on a tie the first candidate in file-name order wins.
    return min(windowed, key=distance)[0]
