"""`rounds_summary`: the cross-round overview, one row per round (not partitioned)."""

import os
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetExecutionContext,
    AutomationCondition,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from rollout_assets.defs.constants import OWNERS, ROLLOUT_LEDGER, ROLLOUT_STATS, SUMMARY_GROUP
from rollout_assets.defs.failures import round_errors_fail_the_step
from rollout_assets.defs.instance import ledger_checks, round_partitions
from rollout_assets.defs.partitions import SUMMARY_FILE_NAME, round_key_problem
from rollout_assets.defs.resources import RoundLocations
from rollout_assets.summary import StatsFileError, build_rounds_summary, markdown_table, write_parquet_atomic

if TYPE_CHECKING:
    # pandas is imported where the summary is built (rollout_assets.summary), not with the
    # definitions: every run of the project would otherwise hold its ~80 MiB.
    from pandas import DataFrame

_NAMES_LOGGED = 20

# Eager, except that a round without stats does not hold the summary back: `eager()` waits
# while any dependency is missing, and a partition of rollout_stats that is new, or whose
# ledger failed a blocking check, stays missing. Such rounds are left out of the summary.
SUMMARY_AUTOMATION = (
    AutomationCondition.eager()
    .without(~AutomationCondition.any_deps_missing())
    .with_label("eager, rounds without stats left out")
)


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:_NAMES_LOGGED])
    return shown + (f" and {len(keys) - _NAMES_LOGGED} more" if len(keys) > _NAMES_LOGGED else "")


def _round_keys(context: AssetExecutionContext) -> tuple[list[str], list[str]]:
    """(the partition keys that can be rounds, those that cannot). Dagster accepts any dynamic
    key (the UI's "Add new partition", GraphQL, the instance API), so one key that cannot be a
    round is skipped, with a warning, instead of failing every round's row."""
    keys, invalid_keys = [], []
    for key in round_partitions(context.instance):
        problem = round_key_problem(key)
        if problem is None:
            keys.append(key)
        else:
            invalid_keys.append(key)
            context.log.warning(f"partition {key!r} left out of the summary: {problem}")
    return keys, invalid_keys


def _rounds_present(
    context: AssetExecutionContext, locations: RoundLocations, keys: list[str]
) -> set[str] | None:
    """The rounds whose directory is in the rounds root; None, with a warning, when the root
    cannot be listed (missing, unmounted, another ROLLOUT_ROUNDS_ROOT): then nothing is known
    of any round's directory, and no round is marked gone."""
    rounds_root = locations.rounds_root.path
    try:
        names = set(os.listdir(rounds_root))
    except OSError as error:
        context.log.warning(
            f"rounds root {rounds_root} cannot be listed ({error.strerror}): round_dir_present is null "
            "in every row; set ROLLOUT_ROUNDS_ROOT"
        )
        return None
    present = set()
    for key in names.intersection(keys):
        try:
            if (rounds_root / key).is_dir():
                present.add(key)
        except OSError:  # there, but not to be looked into (permissions): not gone
            present.add(key)
    return present


def _why_without_stats(
    context: AssetExecutionContext, rounds: list[str], locations: RoundLocations
) -> dict[str, str]:
    """Why each round has no stats file, from what the instance recorded of its ledger."""
    checks = ledger_checks(context.instance, rounds)
    reasons = {}
    for key in rounds:
        if not checks[key].materialized and locations.outputs(key).ledger.is_file():
            # A ledger this instance never recorded: written by another instance, or by a run
            # on a temporary one (`dagster asset materialize` without DAGSTER_HOME).
            reasons[key] = (
                "no stats: this instance has no record of the ledger beside them (written on another "
                "or a temporary instance); materialize the round"
            )
        elif checks[key].passed:
            # Its ledger was materialized again (and passed) without rollout_stats, which
            # rollout_ledger removes the stats for; the lineage shows rollout_stats stale.
            reasons[key] = (
                "stats out of date: its ledger was materialized again without rollout_stats; materialize rollout_stats"
            )
        else:
            reasons[key] = f"no stats: {checks[key].problem()}"
    return reasons


def _log_left_out_and_gone(context: AssetExecutionContext, reasons: dict[str, str], gone: list[str]) -> None:
    grouped: dict[str, list[str]] = {}
    for key, reason in reasons.items():
        grouped.setdefault(reason, []).append(key)
    for reason, rounds in sorted(grouped.items()):
        context.log.info(f"{len(rounds)} round(s) left out of the summary ({reason}): {_names(rounds)}")
    if gone:
        context.log.info(
            f"{len(gone)} round(s) in the summary whose directory is gone from the rounds root (renamed or "
            f"removed; their ledgers stay, round_dir_present false): {_names(gone)}"
        )


def _write_summary(
    locations: RoundLocations, keys: list[str], present: set[str] | None
) -> "tuple[DataFrame, list[str]]":
    """(the summary written at the ledger root, the rounds left out of it for want of stats)."""
    path = locations.ledger_root.path / SUMMARY_FILE_NAME
    try:
        frame, without_stats = build_rounds_summary(
            ((key, locations.outputs(key)) for key in keys), present=present
        )
        write_parquet_atomic(frame, path)
    except StatsFileError as error:
        raise Failure(description=str(error), metadata={"error": type(error).__name__}) from error
    except OSError as error:
        raise Failure(
            description=f"the rounds summary {path} cannot be written ({error}): "
            "set ROLLOUT_LEDGER_ROOT to a folder this process may write",
            metadata={"error": type(error).__name__},
        ) from error
    return frame, without_stats


def _metadata(
    locations: RoundLocations,
    frame: "DataFrame",
    without_stats: list[str],
    reasons: dict[str, str],
    invalid_keys: list[str],
    gone: list[str],
) -> dict[str, Any]:
    total_lines = int(frame["lines"].sum()) if len(frame) else 0
    total_gaps = int(frame["gap_lines"].sum()) if len(frame) else 0
    return {
        "path": MetadataValue.path(str(locations.ledger_root.path / SUMMARY_FILE_NAME)),
        "rounds": len(frame),
        "rounds_without_stats": len(without_stats),
        "rounds_without_stats_list": MetadataValue.json(without_stats),
        "rounds_without_stats_reasons": MetadataValue.json(reasons),
        "invalid_partition_keys": MetadataValue.json(invalid_keys),
        "rounds_without_directory": MetadataValue.json(gone),
        "lines": total_lines,
        "gap_rate": total_gaps / total_lines if total_lines else MetadataValue.null(),
        "summary": MetadataValue.md(markdown_table(frame)),
        "dagster/row_count": len(frame),
    }


@asset(
    # rollout_ledger too: a new ledger that fails its checks removes the round's stats without
    # rollout_stats being materialized, and the summary must then leave the round out.
    deps=[ROLLOUT_STATS, ROLLOUT_LEDGER],
    group_name=SUMMARY_GROUP,
    kinds={"python", "pandas", "parquet"},
    owners=OWNERS,
    automation_condition=SUMMARY_AUTOMATION,
)
def rounds_summary(context: AssetExecutionContext, locations: RoundLocations) -> MaterializeResult:
    """One row per round: lines per role, gap rate, rewards labeled, mean reward per role, cost."""
    # The summary file is written at the ledger root: refused among the inputs, as every round stage is.
    with round_errors_fail_the_step():
        locations.check_ledger_root()
    keys, invalid_keys = _round_keys(context)
    present = _rounds_present(context, locations, keys)
    frame, without_stats = _write_summary(locations, keys, present)
    reasons = _why_without_stats(context, without_stats, locations)
    gone = [key for key in frame["round"] if present is not None and key not in present]
    _log_left_out_and_gone(context, reasons, gone)
    return MaterializeResult(metadata=_metadata(locations, frame, without_stats, reasons, invalid_keys, gone))
