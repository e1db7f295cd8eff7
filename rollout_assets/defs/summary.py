"""`rounds_summary`: the cross-round overview, one row per round (not partitioned)."""

from dagster import (
    AssetExecutionContext,
    AutomationCondition,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from rollout_assets.defs.assets import OWNERS, rollout_stats
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME, SUMMARY_FILE_NAME, round_key_problem
from rollout_assets.defs.resources import (
    ClaudeProjects,
    ConfigurationError,
    LedgerRoot,
    OpencodeDatabase,
    RoundsRoot,
)
from rollout_assets.summary import build_rounds_summary, markdown_table, write_parquet_atomic

SUMMARY_GROUP = "summary"
_NAMES_LOGGED = 20


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:_NAMES_LOGGED])
    return shown + (f" and {len(keys) - _NAMES_LOGGED} more" if len(keys) > _NAMES_LOGGED else "")


@asset(
    deps=[rollout_stats],
    group_name=SUMMARY_GROUP,
    kinds={"python", "pandas", "parquet"},
    owners=OWNERS,
    automation_condition=AutomationCondition.eager(),
)
def rounds_summary(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """One row per round: lines per role, gap rate, rewards labeled, mean reward per role, cost."""
    # The summary file is written at the ledger root: refused among the inputs, as every round stage is.
    try:
        ledger_root.check_apart_from_inputs(rounds_root, opencode, claude)
    except ConfigurationError as error:
        raise Failure(description=str(error), metadata={"error": type(error).__name__}) from error
    # Dagster accepts any dynamic key (the UI's "Add new partition", GraphQL, the instance API),
    # so one key that cannot be a round is skipped here instead of failing every round's row.
    keys, invalid_keys = [], []
    for key in context.instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME):
        problem = round_key_problem(key)
        if problem is None:
            keys.append(key)
        else:
            invalid_keys.append(key)
            context.log.warning(f"partition {key!r} left out of the summary: {problem}")
    frame, without_stats = build_rounds_summary((key, ledger_root.outputs(key)) for key in keys)
    if without_stats:
        context.log.info(
            f"{len(without_stats)} round(s) left out, no stats (not materialized yet, or the ledger failed "
            f"a blocking check): {_names(without_stats)}"
        )
    path = ledger_root.path / SUMMARY_FILE_NAME
    write_parquet_atomic(frame, path)
    total_lines = int(frame["lines"].sum()) if len(frame) else 0
    total_gaps = int(frame["gap_lines"].sum()) if len(frame) else 0
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path)),
            "rounds": len(frame),
            "rounds_without_stats": len(without_stats),
            "rounds_without_stats_list": MetadataValue.json(without_stats),
            "invalid_partition_keys": MetadataValue.json(invalid_keys),
            "lines": total_lines,
            "gap_rate": total_gaps / total_lines if total_lines else 0.0,
            "summary": MetadataValue.md(markdown_table(frame)),
            "dagster/row_count": len(frame),
        }
    )
