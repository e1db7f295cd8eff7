"""The blocking checks of a round's training data, each recounting from the ledger file and the
written files by its own path (`rollout_assets.training.verify`, which reuses nothing of the
export). The checks of one run share one reading of the ledger.
"""

from typing import Any

from dagster import AssetCheckExecutionContext, AssetCheckResult, MetadataValue, asset_check

from rollout_assets.defs.constants import TRAINING_DATASETS
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.io import file_identity
from rollout_assets.stages.memory import in_child_process
from rollout_assets.training.export import read_report
from rollout_assets.training.files import TrainingFiles
from rollout_assets.training.verify import CHECKS, TrainingVerdict, verify_training

_DESCRIPTIONS = {
    "account_for_every_line": "Every ledger line is in exactly one of kept or dropped with a reason "
    "(kept + dropped = lines), and a per-line drop reason is true of the line.",
    "match_ledger": "Every row's lines are ledger lines, none gated, unrewarded or a gap, and the row "
    "holds exactly their messages, identifiers replaced and recorded as recounted, within the token "
    "limit, grouped as the report says.",
    "tool_messages_answer_calls": "Every tool message answers a tool call of an earlier assistant "
    "message in the same row.",
    "meet_margin": "Every pair's chosen reward (as the ledger has it) exceeds its rejected reward by "
    "at least the margin the pairs were built with.",
    "identifiers_normalized": "No row still names its line's working folder, worker name, run folder or "
    "session ids, and no tool output names a path under another placeholder than its call.",
}


class _RunVerdicts:
    """The verdicts of one round's training checks, computed by the first check of a run and
    reused by the others (one reading of the ledger instead of ten)."""

    def __init__(self) -> None:
        self._entry: tuple[Any, dict[str, TrainingVerdict]] | None = None

    def get(self, context: AssetCheckExecutionContext, locations: RoundLocations) -> dict[str, TrainingVerdict]:
        outputs = locations.outputs(context.partition_key)
        files = TrainingFiles(outputs.training)
        identity = (context.run.run_id, str(outputs.ledger), *file_identity(outputs.ledger),
                    *file_identity(files.report_json))
        if self._entry is None or self._entry[0] != identity:
            self._entry = None
            with round_errors_fail_the_step(context.partition_key):
                report, _ = read_report(outputs.training)
            margin = float(report["filter"]["margin"])
            # In a child: pyarrow and the recount's per-line facts leave with it.
            verdicts = in_child_process(verify_training, outputs.ledger, files, margin, report["filter"])
            self._entry = (identity, verdicts)
        return self._entry[1]


_VERDICTS = _RunVerdicts()


def _training_check(dataset: str, name: str):
    kind = name[len(dataset) + 1 :]

    @asset_check(
        asset=TRAINING_DATASETS[dataset],
        name=name,
        partitions_def=ROUNDS,
        blocking=True,
        description=_DESCRIPTIONS[kind],
    )
    def _check(context: AssetCheckExecutionContext, locations: RoundLocations) -> AssetCheckResult:
        verdict = _VERDICTS.get(context, locations)[name]
        return AssetCheckResult(
            passed=verdict.passed,
            metadata={
                "round": context.partition_key,
                **verdict.counts,
                "problems": MetadataValue.json(verdict.problems),
            },
        )

    return _check


TRAINING_CHECKS = [_training_check(dataset, name) for dataset, names in CHECKS.items() for name in names]
