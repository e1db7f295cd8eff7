"""`rounds_summary`: the cross-round overview, one row per round (not partitioned)."""

from dagster import AssetExecutionContext, AutomationCondition, MaterializeResult, MetadataValue, asset

from rollout_assets.defs.assets import OWNERS, rollout_stats
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME
from rollout_assets.defs.resources import LedgerRoot
from rollout_assets.summary import build_rounds_summary, markdown_table, write_parquet_atomic

SUMMARY_GROUP = "summary"


@asset(
    deps=[rollout_stats],
    group_name=SUMMARY_GROUP,
    kinds={"python", "pandas", "parquet"},
    owners=OWNERS,
    automation_condition=AutomationCondition.eager(),
)
def rounds_summary(context: AssetExecutionContext, ledger_root: LedgerRoot) -> MaterializeResult:
    """One row per round: lines per role, gap rate, rewards labeled, mean reward per role, cost."""
    keys = context.instance.get_dynamic_partitions(ROUNDS_PARTITIONS_NAME)
    frame, skipped = build_rounds_summary((key, ledger_root.outputs(key)) for key in keys)
    if skipped:
        context.log.info(f"{len(skipped)} round(s) have no stats yet: {', '.join(skipped[:10])}")
    path = ledger_root.path / "rounds-summary.parquet"
    write_parquet_atomic(frame, path)
    total_lines = int(frame["lines"].sum()) if len(frame) else 0
    total_gaps = int(frame["gap_lines"].sum()) if len(frame) else 0
    return MaterializeResult(
        metadata={
            "path": MetadataValue.path(str(path)),
            "rounds": len(frame),
            "rounds_without_stats": len(skipped),
            "lines": total_lines,
            "gap_rate": total_gaps / total_lines if total_lines else 0.0,
            "summary": MetadataValue.md(markdown_table(frame)),
            "dagster/row_count": len(frame),
        }
    )
