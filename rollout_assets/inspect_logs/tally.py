"""What one log's header says of its samples, counted as they are written.

One `LogTally` per log: its samples, how many carry a transcript or are gap lines, the reward
(the scored samples and their mean), the models and their token usage, and the span of the
lines' capture times. The header (header.py) is built from it, and the writer's report and the
asset's metadata read it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rollout_assets.inspect_logs.samples import NO_MODEL, ConvertedLine

# ModelUsage's fields, summed per model across a log's samples.
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "input_tokens_cache_write",
    "input_tokens_cache_read",
    "reasoning_tokens",
    "total_cost",
)


@dataclass
class LogTally:
    file_name: str
    role: str
    candidate_id: str | None
    run_id: str | None = None
    generation: int | None = None
    candidate_index: int | None = None
    samples: int = 0
    with_messages: int = 0
    gaps: int = 0
    scored: int = 0
    errors: int = 0
    messages: int = 0
    reward_sum: float = 0.0
    first_captured: str | None = None
    last_captured: str | None = None
    models: Counter[str] = field(default_factory=Counter)
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    @property
    def task(self) -> str:
        """The log's task name: its file name without `.eval` (`worker-gen0-cand1`)."""
        return self.file_name.removesuffix(".eval")

    def count(self, line: dict[str, Any], converted: ConvertedLine) -> None:
        """Count one written sample."""
        if self.samples == 0:
            self.run_id, self.generation = line["run_id"], line["generation"]
            self.candidate_index = line["candidate_index"]
        self.samples += 1
        self.messages += len(line["messages"])
        if line["messages"]:
            self.with_messages += 1
        else:
            self.gaps += 1
        reward = line["outcome"]["reward"]
        if reward is not None:
            self.scored += 1
            self.reward_sum += reward
        if line["outcome"]["error"] is not None:
            self.errors += 1
        if converted.model is not None:
            self.models[converted.model] += 1
        if converted.usage is not None:
            self._add_usage(converted.model or NO_MODEL, converted.usage)
        self._add_capture_time(line["provenance"]["captured_at"])

    def _add_usage(self, model: str, usage: dict[str, Any]) -> None:
        total = self.usage.setdefault(model, {})
        for key in USAGE_FIELDS:
            if key in usage:
                total[key] = total.get(key, 0) + usage[key]

    def _add_capture_time(self, captured_at: str) -> None:
        if captured_at in (self.first_captured, self.last_captured):
            return  # the usual case: a round's lines share one or a few capture times
        moment = datetime.fromisoformat(captured_at)
        if self.first_captured is None or moment < datetime.fromisoformat(self.first_captured):
            self.first_captured = captured_at
        if self.last_captured is None or moment > datetime.fromisoformat(self.last_captured):
            self.last_captured = captured_at

    def to_json(self) -> dict[str, Any]:
        """The counts the writer's record and the asset's metadata keep."""
        return {
            "file": self.file_name,
            "role": self.role,
            "candidate_id": self.candidate_id,
            "samples": self.samples,
            "with_messages": self.with_messages,
            "gaps": self.gaps,
            "scored": self.scored,
            "mean_reward": self.mean_reward,
            "errors": self.errors,
            "messages": self.messages,
        }
