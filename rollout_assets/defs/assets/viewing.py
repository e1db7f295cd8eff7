"""`inspect_logs` (group `inspect`): every line of a round's ledger as a sample of Inspect eval
logs, one log per role and candidate, for Inspect's log viewer (docs/viewing.md).

The body imports nothing of Inspect until it runs: the code location loads the definitions on
every run, and `inspect_ai` takes about a second and 50 MB to import.
"""

from pathlib import Path
from typing import Any

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from rollout_assets.defs.constants import INSPECT_GROUP, OWNERS, ROLLOUT_LEDGER
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.partitions import ROUNDS
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.stages import RoundOutputs
from rollout_assets.stages.memory import in_child_process


def _logs_table(report: Any) -> str:
    rows = [
        "| log | samples | with a transcript | gap lines | scored | mean reward |",
        "|---|---|---|---|---|---|",
    ]
    for log in report.logs:
        mean = "—" if log.mean_reward is None else f"{log.mean_reward:.3f}"
        rows.append(f"| {log.file_name} | {log.samples} | {log.with_messages} | {log.gaps} | {log.scored} | {mean} |")
    return "\n".join(rows)


def _metadata(report: Any, outputs: RoundOutputs) -> dict[str, Any]:
    from rollout_assets.inspect_logs.viewer import shown_view_command

    metadata: dict[str, Any] = {
        "path": MetadataValue.path(str(outputs.inspect_logs)),
        "open_with": MetadataValue.text(shown_view_command(outputs.folder)),
        "logs": len(report.logs),
        "samples": report.lines,
        "samples_with_transcript": sum(log.with_messages for log in report.logs),
        "samples_gap": sum(log.gaps for log in report.logs),
        "samples_scored": sum(log.scored for log in report.logs),
        "samples_per_log": MetadataValue.md(_logs_table(report)),
    }
    # One number per log, which the Plots tab graphs across rounds (`samples_worker-gen0-cand1`).
    metadata.update({f"samples_{log.task}": log.samples for log in report.logs})
    metadata["dagster/row_count"] = report.lines
    return metadata


@asset(
    partitions_def=ROUNDS,
    group_name=INSPECT_GROUP,
    deps=[ROLLOUT_LEDGER],
    kinds={"python", "inspect"},
    owners=OWNERS,
)
def inspect_logs(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """Every line of one round's ledger as an Inspect sample, one eval log per role and candidate."""
    key = context.partition_key
    with round_errors_fail_the_step(key):
        outputs = locations.writable_outputs(key)
        # In a child: inspect_ai (about 70 MiB) and the writer's buffers leave with it, so the
        # round job's later steps do not start from them.
        report = in_child_process(_write_logs, outputs.ledger, outputs.inspect_logs)
    return MaterializeResult(metadata=_metadata(report, outputs))


def _write_logs(ledger: Path, folder: Path) -> Any:
    from rollout_assets.inspect_logs import write_inspect_logs

    return write_inspect_logs(ledger, folder)
