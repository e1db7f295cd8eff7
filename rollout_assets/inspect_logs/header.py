"""Inspect's own models: the header of each log, and the check of its first samples.

Imports `inspect_ai` (about a second and 50 MB): only the writer imports this module, when it
runs, never the Dagster definitions.

The header is an `EvalLog` without samples, as Inspect writes `header.json`: its `EvalSpec`
names the log's task (`<role>-<candidate>`), the round as run id and dataset, the model most of
its lines ran and when the lines were captured (never the clock); `EvalResults` give the mean
reward over the scored samples (`scored_samples` and `unscored_samples` say how many had one);
`EvalStats` the token usage per model.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalLog,
    EvalMetric,
    EvalResults,
    EvalSample,
    EvalSampleSummary,
    EvalScore,
    EvalSpec,
    EvalStats,
)
from inspect_ai.model import ModelUsage

from rollout_assets.inspect_logs.samples import NO_MODEL, REWARD_SCORE
from rollout_assets.inspect_logs.tally import LogTally

# The ids of a log, from the round and the log's name: the same ledger gives the same header.
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "tangle.rollout.v1/inspect-log")


def _results(tally: LogTally) -> EvalResults:
    scores = []
    if tally.scored:
        scores.append(
            EvalScore(
                name=REWARD_SCORE,
                scorer=REWARD_SCORE,
                scored_samples=tally.scored,
                unscored_samples=tally.samples - tally.scored,
                metrics={"mean": EvalMetric(name="mean", value=tally.reward_sum / tally.scored)},
            )
        )
    return EvalResults(total_samples=tally.samples, completed_samples=tally.samples, scores=scores)


def eval_header(tally: LogTally) -> bytes:
    """The JSON of the log's `header.json`."""
    run_id = tally.run_id or ""
    model = tally.models.most_common(1)[0][0] if tally.models else NO_MODEL
    spec = EvalSpec(
        eval_id=str(uuid.uuid5(_ID_NAMESPACE, f"{run_id}|{tally.task}")),
        run_id=run_id,
        created=tally.first_captured,
        task=tally.task,
        task_display_name=f"{tally.role} lines of {tally.candidate_id}",
        dataset=EvalDataset(name=run_id or None, samples=tally.samples),
        model=model,
        config=EvalConfig(),
        metadata={
            "role": tally.role,
            "candidate_id": tally.candidate_id,
            "generation": tally.generation,
            "candidate_index": tally.candidate_index,
        },
    )
    stats = EvalStats(
        started_at=tally.first_captured,
        completed_at=tally.last_captured,
        model_usage={name: ModelUsage(**usage) for name, usage in sorted(tally.usage.items())},
    )
    log = EvalLog(status="success", eval=spec, results=_results(tally), stats=stats)
    return log.model_dump_json(exclude_none=True).encode("utf-8")


def check_with_inspect(sample: dict[str, Any], summary: dict[str, Any]) -> None:
    """Raise unless Inspect's models take the sample and summary as they are written: a newer
    Inspect that reads the shape differently fails the write, never the viewer. Copies are
    validated: Inspect's validators add keys to the dict they are given."""
    EvalSample.model_validate(copy.deepcopy(sample))
    EvalSampleSummary.model_validate(copy.deepcopy(summary))
