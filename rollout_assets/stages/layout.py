"""Where the outputs of one round live under the ledger root (see the package docstring for
which stage writes which file). Paths only: nothing here reads or writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RoundOutputs:
    """Where the outputs of one round live under the ledger root."""

    folder: Path

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"

    @property
    def manifest_head(self) -> Path:
        """The manifest without its per-cell lists, which the stages after it read."""
        return self.folder / "stages" / "manifest-head.json"

    @property
    def manifest_cells(self) -> Path:
        """The manifest's cells, one JSON line each: what campaign_cells reads of them."""
        return self.folder / "stages" / "manifest-cells.jsonl"

    @property
    def campaign_cells(self) -> Path:
        return self.folder / "stages" / "campaign-cells.jsonl"

    @property
    def worker_sessions(self) -> Path:
        return self.folder / "stages" / "worker-sessions.jsonl"

    @property
    def worker_sessions_summary(self) -> Path:
        return self.folder / "stages" / "worker-sessions.json"

    @property
    def proposer_transcripts(self) -> Path:
        return self.folder / "stages" / "proposer-transcripts.jsonl"

    @property
    def ledger(self) -> Path:
        return self.folder / "rollout-ledger.jsonl"

    @property
    def ledger_stats(self) -> Path:
        return self.folder / "stages" / "rollout-ledger-stats.json"

    @property
    def stats(self) -> Path:
        return self.folder / "rollout-stats.json"

    @property
    def training(self) -> Path:
        """The folder of the round's training data (docs/training.md)."""
        return self.folder / "training"

    @property
    def inspect_logs(self) -> Path:
        """The folder of the round's Inspect eval logs (docs/viewing.md)."""
        return self.folder / "inspect-logs"

    def built_from(self, stage: str) -> Path:
        return self.folder / "stages" / "built-from" / f"{stage}.json"
