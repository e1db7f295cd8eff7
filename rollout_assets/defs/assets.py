"""The assets of one round (one `rounds` partition each) and the external inputs they read.

Each body is a few lines: resolve the round's folders, call the stage in
`rollout_assets.stages`, attach metadata. Stages pass data by path (files under the ledger
root), so no transcript is ever pickled or held by Dagster.
"""


from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetExecutionContext,
    AssetRecordsFilter,
    AssetSpec,
    DagsterInstance,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from rollout_assets.backfill import BackfillStats
from rollout_assets.backfill.gaps import GAP_KINDS
from rollout_assets.defs.partitions import ROUNDS, InvalidRoundKey
from rollout_assets.defs.resources import (
    ClaudeProjects,
    ConfigurationError,
    LedgerRoot,
    OpencodeDatabase,
    RoundsRoot,
)
from rollout_assets.ledger import WriterBusyError
from rollout_assets.sources.fingerprint import fingerprint_round
from rollout_assets.sources.round import RoundInputError, RoundManifest
from rollout_assets.stages import (
    RoundChangedError,
    RoundOutputs,
    StageMismatchError,
    TranscriptLossError,
    write_campaign_cells,
    write_manifest,
    write_proposer_transcripts,
    write_rollout_ledger,
    write_rollout_stats,
    write_worker_sessions,
)

ROUNDS_GROUP = "rounds"
SOURCES_GROUP = "sources"
OWNERS = ["team:rollouts"]
# The fingerprint of the round's inputs a run was started for (`round_dirs_sensor`,
# `rollout-assets materialize`), as a run tag; `rollout_stats` records it as metadata, so the
# sensor knows which inputs were already materialized.
FINGERPRINT_TAG = "rollout/fingerprint"
FINGERPRINT_METADATA = "input_fingerprint"

# -- external inputs: shown in lineage, never materialized here -------------------

round_outdir = AssetSpec(
    "round_outdir",
    description="A round's outDir under the rounds root, as the improvement loop wrote it.",
    partitions_def=ROUNDS,
    group_name=SOURCES_GROUP,
    kinds={"file"},
    owners=OWNERS,
)
opencode_db = AssetSpec(
    "opencode_db",
    description="The opencode SQLite store holding worker sessions (read-only).",
    group_name=SOURCES_GROUP,
    kinds={"sqlite"},
    owners=OWNERS,
)
claude_projects = AssetSpec(
    "claude_projects",
    description="The Claude Code projects folder holding proposer transcripts (read-only).",
    group_name=SOURCES_GROUP,
    kinds={"file"},
    owners=OWNERS,
)

EXTERNAL_INPUTS = [round_outdir, opencode_db, claude_projects]

# Errors that mean "this round cannot be materialized as it is": one clear sentence in the UI.
_ROUND_ERRORS = (
    RoundInputError,
    ConfigurationError,
    InvalidRoundKey,
    RoundChangedError,
    StageMismatchError,
    TranscriptLossError,
    WriterBusyError,
)


def _fail(error: Exception, round_key: str, **metadata: Any) -> Failure:
    return Failure(description=str(error), metadata={"round": round_key, "error": type(error).__name__, **metadata})


def _writable_outputs(
    key: str,
    ledger_root: LedgerRoot,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
) -> RoundOutputs:
    """The round's output folder, created only once the ledger root is known to be apart from
    every input. Each stage checks, since a run may select any one of them."""
    ledger_root.check_apart_from_inputs(rounds_root, opencode, claude)
    return ledger_root.writable_outputs(key)


def _captured_at(context: AssetExecutionContext) -> str:
    """One capture time per run: the run's creation time, so every stage of a run agrees."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    created = record.create_timestamp if record is not None else datetime.now(UTC)
    return created.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _path(path: Any) -> MetadataValue:
    return MetadataValue.path(str(path))


def _role_and_gap_metadata(stats: BackfillStats) -> dict[str, Any]:
    metadata: dict[str, Any] = {f"lines_{role}": stats.by_role.get(role, 0) for role in ("supervisor", "worker", "proposer")}
    metadata.update({f"gap_{kind}": stats.by_gap_kind.get(kind, 0) for kind in GAP_KINDS})
    return metadata


def _sensor_fingerprint(context: AssetExecutionContext, out_dir: Path) -> str | None:
    """The fingerprint of the round's inputs this run reads, as the sensor computes it: the
    run's tag when the sensor (or `rollout-assets materialize`) started it, else taken now,
    before the manifest reads anything. rollout_stats records it, and the sensor then does not
    run the same inputs again after a run started from the UI or `dagster asset materialize`.
    A file changed after it was taken makes the sensor run the round again, never less.

    A re-execution (from the UI, or Dagster's automatic retries) carries its parent's tags,
    and with them the fingerprint of the inputs as they were when the parent was requested:
    it takes its own."""
    tagged = context.run.tags.get(FINGERPRINT_TAG)
    if tagged and context.run.parent_run_id is None:
        return tagged
    try:
        return fingerprint_round(out_dir).digest
    except (OSError, ValueError):  # RoundInputError included: the manifest stage fails saying why
        return None


def _manifest_table(manifest: RoundManifest) -> str:
    rows = ["| candidate | generation | commit | cells | reps | resolved | cached | shots | cost USD |", "|---|---|---|---|---|---|---|---|---|"]
    for entry in manifest.entries:
        commit = entry.commit[:10] if entry.commit else "—"
        rows.append(
            f"| {entry.candidate_id} | {entry.generation} | `{commit}` | {len(entry.cells)} | {entry.reps} "
            f"| {entry.resolved_count}/{len(manifest.instances)} | {entry.cells_cached} "
            f"| {len(entry.shot_receipt_paths)} | {entry.cost['costUsd']:.4f} |"
        )
    return "\n".join(rows)


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_outdir],
    kinds={"python", "json"},
    owners=OWNERS,
)
def round_manifest(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The manifest of one round: generations, candidates, commits, resolved counts and cost."""
    key = context.partition_key
    try:
        out_dir = rounds_root.round_dir(key)
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
        manifest = write_manifest(out_dir, outputs, _sensor_fingerprint(context, out_dir))
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    cells = sum(len(entry.cells) for entry in manifest.entries)
    return MaterializeResult(
        metadata={
            "path": _path(outputs.manifest),
            "out_dir": _path(out_dir),
            "run_id": manifest.run_id,
            "instances": len(manifest.instances),
            "campaigns": len(manifest.entries),
            "generations": len({entry.generation for entry in manifest.entries if not entry.is_baseline}),
            "cells": cells,
            "shot_receipts": sum(len(entry.shot_receipt_paths) for entry in manifest.entries),
            "settled_cost_calls": manifest.settled_call_ids,
            "candidates": MetadataValue.md(_manifest_table(manifest)),
            "dagster/row_count": cells,
        }
    )


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_manifest, round_outdir],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def campaign_cells(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The campaign cells of one round, each with its supervisor line, reward and worker cwds."""
    key = context.partition_key
    try:
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
        summary = write_campaign_cells(rounds_root.round_dir(key), outputs, _captured_at(context), context.log.info)
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    if summary.cells_without_worker_list:
        context.log.warning(
            f"{summary.cells_without_worker_list} cell(s) of round {key} have no readable result.json: "
            "their worker sessions cannot be listed"
        )
    return MaterializeResult(
        metadata={
            "path": _path(outputs.campaign_cells),
            "cells": summary.cells,
            "worker_cwds": summary.worker_cwds,
            "reward_labeled": summary.reward_labeled,
            "cells_without_worker_list": summary.cells_without_worker_list,
            "cells_per_candidate": MetadataValue.json(summary.by_candidate),
            "dagster/row_count": summary.cells,
        }
    )


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[campaign_cells, opencode_db],
    kinds={"python", "sqlite", "jsonl"},
    owners=OWNERS,
)
def worker_sessions(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The worker lines of one round, joined from the opencode store, gap lines included."""
    key = context.partition_key
    unavailable = opencode.unavailable_reason()
    if unavailable:
        context.log.warning(unavailable)
    try:
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
        stats = write_worker_sessions(outputs, opencode.db_path, _captured_at(context), context.log.info)
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    if unavailable is None and not stats.opencode_db_available:
        context.log.warning(f"opencode database {opencode.db_path} could not be read: worker lines are gap lines")
    return MaterializeResult(
        metadata={
            "path": _path(outputs.worker_sessions),
            "lines": stats.lines,
            "sessions_joined": stats.worker_sessions_joined,
            "cwds_missed": stats.worker_cwds_missed,
            "sessions_empty": stats.worker_sessions_empty,
            "gap_lines": stats.gap_lines,
            "opencode_db": _path(opencode.db_path),
            "opencode_db_available": stats.opencode_db_available,
            "dagster/row_count": stats.lines,
        }
    )


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[round_manifest, round_outdir, claude_projects],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def proposer_transcripts(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The proposer lines of one round, joined to Claude Code transcripts by time window."""
    key = context.partition_key
    unavailable = claude.unavailable_reason()
    if unavailable:
        context.log.warning(unavailable)
    try:
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
        stats = write_proposer_transcripts(outputs, claude.path, _captured_at(context))
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    return MaterializeResult(
        metadata={
            "path": _path(outputs.proposer_transcripts),
            "lines": stats.lines,
            "shots_joined": stats.proposer_shots_joined,
            "shots_missed": stats.proposer_shots_missed,
            "transcripts_empty": stats.proposer_transcripts_empty,
            "claude_projects": _path(claude.path),
            "claude_projects_available": unavailable is None,
            "dagster/row_count": stats.lines,
        }
    )


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[campaign_cells, worker_sessions, proposer_transcripts],
    kinds={"python", "jsonl"},
    owners=OWNERS,
)
def rollout_ledger(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The validated tangle.rollout.v1 ledger of one round, one line per agent invocation."""
    key = context.partition_key
    try:
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
        stats = write_rollout_ledger(outputs, opencode.db_path, claude.path)
    except TranscriptLossError as error:
        # The description names three; the failure's metadata lists them (the first 200).
        raise _fail(
            error,
            key,
            transcripts_dropped=len(error.lost),
            transcripts_dropped_list=MetadataValue.json([transcript.describe() for transcript in error.lost[:200]]),
        ) from error
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    return MaterializeResult(
        metadata={
            "path": _path(outputs.ledger),
            "lines": stats.lines,
            "gap_lines": stats.gap_lines,
            "full_transcripts": stats.full_transcripts,
            "reward_labeled": stats.reward_labeled,
            **_role_and_gap_metadata(stats),
            "dagster/row_count": stats.lines,
        }
    )


_COMPLETED = {AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED}


@dataclass(frozen=True)
class LedgerChecks:
    """What the instance recorded about the blocking checks of a round's latest ledger."""

    materialized: bool  # the round has a rollout_ledger materialization
    failed: tuple[str, ...]  # blocking checks whose evaluation of that ledger failed
    not_evaluated: tuple[str, ...]  # blocking checks not (yet) evaluated on that ledger

    @property
    def passed(self) -> bool:
        return self.materialized and not self.failed and not self.not_evaluated

    def problem(self) -> str:
        """Why the ledger is not known to pass its blocking checks, as part of a sentence."""
        if not self.materialized:
            return "its ledger is not materialized yet"
        if self.failed:
            return f"its ledger failed the blocking check(s) {', '.join(self.failed)}"
        return f"the blocking check(s) {', '.join(self.not_evaluated)} have not been evaluated on its latest ledger"


def _blocking_ledger_checks() -> list[AssetCheckKey]:
    # Imported here: the checks module imports this one for the assets it checks.
    from rollout_assets.defs.checks import ROUND_CHECKS

    keys = [spec.key for checks in ROUND_CHECKS for spec in checks.check_specs if spec.blocking]
    return sorted((key for key in keys if key.asset_key == rollout_ledger.key), key=lambda key: key.name)


def _ledger_materialized(instance: DagsterInstance, round_key: str) -> bool:
    records_filter = AssetRecordsFilter(asset_key=rollout_ledger.key, asset_partitions=[round_key])
    return bool(instance.fetch_materializations(records_filter, limit=1).records)


def ledger_checks(instance: DagsterInstance, round_keys: Iterable[str]) -> dict[str, LedgerChecks]:
    """The blocking checks of each round's latest `rollout_ledger` materialization, as the
    instance recorded them: one query per check for all the rounds, and one per round that
    no check evaluated."""
    round_keys = list(round_keys)
    if not round_keys:
        return {}
    blocking = _blocking_ledger_checks()
    recorded = instance.event_log_storage.get_asset_check_partition_info(blocking, partition_keys=round_keys)
    infos = {(info.partition_key, info.check_key): info for info in recorded}
    checks: dict[str, LedgerChecks] = {}
    for key in round_keys:
        found = [infos[key, check] for check in blocking if (key, check) in infos]
        # An evaluation's record knows the ledger's latest materialization; without one, ask.
        if found:
            materialized = any(info.latest_materialization_storage_id is not None for info in found)
        else:
            materialized = _ledger_materialized(instance, key)
        failed, not_evaluated = [], []
        for check in blocking:
            info = infos.get((key, check))
            # Evaluated means: on the ledger's latest materialization, not on an earlier one.
            if info is None or not info.is_current or info.latest_execution_status not in _COMPLETED:
                not_evaluated.append(check.name)
            elif info.latest_execution_status != AssetCheckExecutionRecordStatus.SUCCEEDED:
                failed.append(check.name)
        checks[key] = LedgerChecks(materialized, tuple(failed), tuple(not_evaluated))
    return checks


def stats_table(stats: dict[str, Any]) -> str:
    """The counters as Markdown: one table per role, one per gap reason, then the rest."""
    rewards, costs = stats["rewardByRole"], stats["costUsdByRole"]
    lines = ["| role | lines | rewards labeled | mean reward | cost USD |", "|---|---|---|---|---|"]
    for role, count in stats["byRole"].items():
        reward = rewards.get(role)
        # A sum that overflowed is stored as null: shown as a dash, like a missing one.
        mean = f"{reward['mean']:.3f}" if reward and reward["mean"] is not None else "—"
        usd = costs.get(role, {}).get("usd")
        cost = f"{usd:.4f}" if usd is not None else "—"
        lines.append(f"| {role} | {count} | {reward['labeled'] if reward else 0} | {mean} | {cost} |")
    lines += ["", "| gap reason | lines |", "|---|---|"]
    lines += [f"| {kind} | {count} |" for kind, count in stats["byGapReason"].items()]
    lines += ["", "| counter | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in stats.items() if not isinstance(value, dict)]
    return "\n".join(lines)


@asset(
    partitions_def=ROUNDS,
    group_name=ROUNDS_GROUP,
    deps=[rollout_ledger],
    kinds={"python", "json"},
    owners=OWNERS,
)
def rollout_stats(
    context: AssetExecutionContext,
    rounds_root: RoundsRoot,
    opencode: OpencodeDatabase,
    claude: ClaudeProjects,
    ledger_root: LedgerRoot,
) -> MaterializeResult:
    """The counters of one round's ledger, per role and per gap reason."""
    key = context.partition_key
    try:
        outputs = _writable_outputs(key, ledger_root, rounds_root, opencode, claude)
    except _ROUND_ERRORS as error:
        raise _fail(error, key) from error
    # In a run of the round the blocking checks stop this step when they fail; selected alone
    # (the UI's "Materialize" on this asset), nothing does, so the recorded verdicts are asked.
    checks = ledger_checks(context.instance, [key])[key]
    if not checks.passed:
        raise Failure(
            description=f"round {key}: not writing stats, {checks.problem()}; "
            "materialize rollout_ledger (with its checks) for this round first",
            metadata={
                "round": key,
                "failed_checks": list(checks.failed),
                "not_evaluated_checks": list(checks.not_evaluated),
            },
        )
    try:
        stats, recorded_fingerprint = write_rollout_stats(outputs)
    except StageMismatchError as error:
        raise _fail(error, key) from error
    except (OSError, ValueError) as error:
        raise Failure(
            description=f"round {key}: the stats of {outputs.ledger} cannot be written: {error}",
            metadata={"round": key, "error": type(error).__name__},
        ) from error
    as_json = stats.to_json()
    # The inputs the ledger was built from, as its round_manifest recorded them. Not this run's
    # tag: a run of rollout_stats alone may be tagged with inputs the ledger was not built from.
    fingerprint = recorded_fingerprint
    metadata: dict[str, Any] = {
        **({FINGERPRINT_METADATA: fingerprint} if fingerprint else {}),
        "path": _path(outputs.stats),
        "lines": stats.lines,
        "full_transcripts": stats.full_transcripts,
        "gap_lines": stats.gap_lines,
        "reward_labeled": stats.reward_labeled,
        # No lines, no rate: a 0.0 would plot an empty round as a round without gaps.
        "gap_rate": stats.gap_lines / stats.lines if stats.lines else MetadataValue.null(),
        "worker_sessions_joined": stats.worker_sessions_joined,
        "worker_cwds_missed": stats.worker_cwds_missed,
        "worker_sessions_empty": stats.worker_sessions_empty,
        "proposer_shots_joined": stats.proposer_shots_joined,
        "proposer_shots_missed": stats.proposer_shots_missed,
        "proposer_transcripts_empty": stats.proposer_transcripts_empty,
        "cells_without_worker_list": stats.cells_without_worker_list,
        "opencode_db_available": stats.opencode_db_available,
        **_role_and_gap_metadata(stats),
        "stats": MetadataValue.md(stats_table(as_json)),
    }
    return MaterializeResult(metadata=metadata)


ROUND_ASSETS = [round_manifest, campaign_cells, worker_sessions, proposer_transcripts, rollout_ledger, rollout_stats]
