"""`rollout-assets materialize`: run `materialize_round` for rounds on the Dagster instance at
$DAGSTER_HOME (steps on the job's executor, as under `dagster dev`), then `materialize_summary`, and print
what each round produced.

The same definitions, resources and checks as `dagster dev`; the runs and their check
results land in the instance, so the UI shows them afterwards.

These runs are launched directly, not through the run queue, so the queue's one-run-per-round
limit does not hold them back: a round that already has a run in progress on the instance is
not started (the queue, in turn, holds back its runs of a round while one of these runs it).

A failed step is one sentence: our own failures by their message, a full disk or a file past
the size limit by its cause; only an unexpected error keeps its stack trace. Ctrl-C stops the
run in progress and the command with it (exit 130): no further round, no summary.
"""

import contextlib
import errno
import json
import logging
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, PreviewWarning, execute_job, reconstructable

from rollout_assets.defs.assets import rollout_ledger
from rollout_assets.defs.instance import RUNNING_STATUSES, round_run
from rollout_assets.defs.partitions import ROUNDS_PARTITIONS_NAME, SUMMARY_FILE_NAME
from rollout_assets.defs.resources import LedgerRoot, RoundsRoot, list_round_dirs
from rollout_assets.sources.fingerprint import INPUT_FINGERPRINT_TAG, input_digest
from rollout_assets.stages.layout import RoundOutputs

# The runs' events stay in the instance (and the UI). The terminal gets what `_report_round`
# prints from them: one sentence per failure and the warnings the steps logged, not Dagster's
# event lines with the framework's stack trace under every failure (150 lines for one bad file).
_QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


class _PrintLog:
    def warning(self, message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)


def _fingerprint_tags(out_dir: Path) -> dict[str, str]:
    """The run tag the sensor gives its runs: with it, the sensor does not run these inputs again."""
    try:
        return {INPUT_FINGERPRINT_TAG: input_digest(out_dir)}
    except (OSError, ValueError):  # RoundInputError included: the run fails saying why
        return {}


@contextmanager
def _run_round(instance: DagsterInstance, key: str, out_dir: Path) -> Iterator[Any]:
    """One run of `materialize_round` for a round. On a persistent instance it is launched with
    `execute_job` on the job's executor, as `dagster dev` would; a temporary instance can only
    run it with `execute_in_process`."""
    from rollout_assets.definitions import defs, materialize_round_job

    tags = _fingerprint_tags(out_dir)
    if instance.is_ephemeral:
        yield defs.resolve_job_def("materialize_round").execute_in_process(
            partition_key=key, instance=instance, raise_on_error=False, run_config=_QUIET_CONSOLE, tags=tags
        )
        return
    with execute_job(
        reconstructable(materialize_round_job),
        instance=instance,
        tags={"dagster/partition": key, **tags},
        run_config=_QUIET_CONSOLE,
        raise_on_error=False,
    ) as result:
        yield result


# Failures of the machine, not of a round nor of the code: a full disk, a used-up quota, a file
# past the size limit. Their stack trace would only show where the write happened to be.
_OUT_OF_ROOM = {
    errno.ENOSPC: "the disk it writes to is full",
    errno.EDQUOT: "the disk quota of this user is used up",
    errno.EFBIG: "a file it writes would grow past the file-size limit of this process (ulimit -f) "
    "or of its filesystem",
}
# How an OSError reads once serialized: "OSError: [Errno 28] No space left on device: '/path'".
_OS_ERROR_MESSAGE = re.compile(r"^[\w.]+: (\[Errno (\d+)\] .*)")


def _failure_text(error: Any) -> str:
    """A failure as the terminal shows it: our own failures (`Failure`, raised with one sentence
    naming the file and the problem) by that sentence; running out of room by its cause; anything
    else, being unexpected, with its stack trace."""
    if error.cls_name == "Failure":
        return error.message.strip().split(": ", 1)[-1]
    # Dagster wraps what a step raised; the trace that matters is the step's own.
    if error.cls_name == "DagsterExecutionStepExecutionError" and error.cause is not None:
        error = error.cause
    return _out_of_room_text(error) or error.to_string().strip()


def _out_of_room_text(error: Any) -> str | None:
    """The cause in words, then the system's own "[Errno N] …", when the error (or what caused
    it) is an OSError of `_OUT_OF_ROOM`; else None."""
    while error is not None:
        found = _OS_ERROR_MESSAGE.match(error.message.strip())
        if found and int(found.group(2)) in _OUT_OF_ROOM:
            return f"{_OUT_OF_ROOM[int(found.group(2))]} ({found.group(1)})"
        error = error.cause
    return None


def _print_failures_and_warnings(instance: DagsterInstance, run_id: str) -> None:
    """Print, in order, why each step of the run failed, why the run failed when no step did,
    and the warnings the steps logged."""
    step_failed = False
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            # Warnings are the steps' own (context.log.warning). The engine's messages of this
            # kind are errors: "Dependencies for step … failed. Not executing.", one per step
            # after a failure, which the failure above already explains.
            if entry.level == logging.WARNING:
                print(f"  warning from {entry.step_key or 'the run'}: {entry.user_message}")
        elif event.is_step_failure:
            step_failed = True
            error = event.event_specific_data.error
            # A blocking check that failed fails its step too; its `check … FAILED` line says why.
            if error.cls_name != "DagsterAssetCheckFailedError":
                print(f"  step {event.step_key} failed: {_failure_text(error)}")
        elif event.is_run_failure and not step_failed:
            # A run that failed outside any step (a resource, the executor): its own reason.
            error = event.event_specific_data.error if event.event_specific_data else None
            print(f"  run failed: {_failure_text(error) if error else event.message}")


_SAMPLES_SHOWN = 3


def _check_details(evaluation: Any) -> str:
    """What a check that did not pass found, from its metadata: its counts and a few of the
    invocations at fault (the UI shows the whole sample)."""
    if evaluation.passed:
        return ""
    metadata = {name: value.value for name, value in evaluation.metadata.items()}
    counts = [f"{name} {metadata[name]}" for name in ("expected", "seen", "missing") if name in metadata]
    counts += [f"{name.replace('_', ' ')} {value}" for name, value in metadata.items() if name.startswith("cells_")]
    sample = metadata.get("sample") or metadata.get("cells") or []
    shown = "; ".join(str(item) for item in sample[:_SAMPLES_SHOWN])
    more = f" and {len(sample) - _SAMPLES_SHOWN} more" if len(sample) > _SAMPLES_SHOWN else ""
    return f" ({', '.join(counts)}{'; e.g. ' + shown + more if shown else ''})"


def _report_round(result: Any, key: str, ledger_root: LedgerRoot, instance: DagsterInstance) -> bool:
    """Print a round's stats, check results and ledger path; True when the run succeeded."""
    outputs = ledger_root.outputs(key)
    print(f"\n=== round {key}: {'succeeded' if result.success else 'FAILED'} (run {result.run_id})")
    if outputs.stats.is_file() and result.success:
        print(json.dumps(json.loads(outputs.stats.read_text()), indent=2))
    checks_failed = False
    for evaluation in sorted(result.get_asset_check_evaluations(), key=lambda e: e.check_name):
        if evaluation.passed:
            verdict = "passed"
        elif evaluation.severity.value == "WARN":
            verdict = "warning (non-blocking)"
        else:
            verdict = "FAILED"
            checks_failed = True
        print(f"  check {evaluation.check_name}: {verdict}{_check_details(evaluation)}")
    _print_failures_and_warnings(instance, result.run_id)
    ledger_written = any(
        event.is_step_materialization and event.asset_key == rollout_ledger.key for event in result.all_events
    )
    # The path alone only when the run vouches for the file there.
    if result.success:
        print(f"  ledger: {outputs.ledger}")
        _print_training_rows(outputs.training)
        _print_inspect_logs(outputs)
    elif ledger_written and checks_failed:
        print(f"  ledger: {outputs.ledger} (written, but it FAILED a blocking check above: do not use it)")
    elif ledger_written:
        print(f"  ledger: {outputs.ledger} (written; the run failed after it, see above)")
    else:
        print("  ledger: not written by this run (any earlier ledger of the round stays as it was)")
    return result.success


def _print_training_rows(folder: Path) -> None:
    """The rows of the round's training data, as its report gives them (docs/training.md)."""
    from rollout_assets.training.export import read_report

    report, _ = read_report(folder)
    rows = ", ".join(f"{name} {dataset['rows']}" for name, dataset in report["datasets"].items())
    print(f"  training rows: {rows} → {folder}")


def _print_inspect_logs(outputs: RoundOutputs) -> None:
    """The samples of the round's Inspect logs, as their record gives them (docs/viewing.md)."""
    from rollout_assets.inspect_logs.folder import read_record
    from rollout_assets.inspect_logs.viewer import shown_view_command

    record = read_record(outputs.inspect_logs)
    if record is not None:
        samples = sum(log["samples"] for log in record.logs)
        print(f"  Inspect logs: {samples} samples in {len(record.logs)} logs → {outputs.inspect_logs}")
        print(f"  transcripts: {shown_view_command(outputs.folder)}")


class _Interrupted(Exception):
    """Ctrl-C stopped a run: nothing after it is started. The message says which run."""


class _NothingToRun(Exception):
    """No round can be run as asked; the message is the line to print."""


@contextmanager
def _noticing_interrupts() -> Iterator[Callable[[], bool]]:
    """A function that tells whether Ctrl-C came since the block began.

    While Dagster executes a job it holds SIGINT: the step running fails with
    DagsterExecutionInterruptedError and the job returns as an ordinary failed run, so no
    KeyboardInterrupt reaches this module. But the interpreter writes every signal it handles
    to the wakeup file descriptor, whichever Python handler then runs: reading it after a run
    tells whether SIGINT came meanwhile, without reading Dagster's error classes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False  # only the main thread receives signals (or may set the descriptor)
        return
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    seen = False

    def interrupted() -> bool:
        nonlocal seen
        with contextlib.suppress(BlockingIOError):  # nothing written since the last look
            seen = seen or signal.SIGINT in os.read(read_end, 4096)
        return seen

    try:
        yield interrupted
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)


def materialize_rounds(round_keys: list[str]) -> int:
    """Materialize the named rounds (or every round under the rounds root), then the rounds
    summary, printing what each produced; 0 when all passed, 130 when Ctrl-C stopped a run."""
    warnings.filterwarnings("ignore", category=PreviewWarning)
    from rollout_assets.definitions import defs

    rounds_root, ledger_root = _roots(defs)
    instance = _instance()
    try:
        found, keys = _rounds_to_run(round_keys, rounds_root)
    except _NothingToRun as nothing:
        print(nothing, file=sys.stderr)
        return 1
    instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, keys)
    with _noticing_interrupts() as interrupted:
        try:
            failed = 0
            for key in keys:
                failed += not _materialize_round(instance, key, found[key], ledger_root, interrupted)
            summary_written = _materialize_summary(defs, instance, found, ledger_root, interrupted)
        except _Interrupted as stopped:
            print(f"rollout-assets: interrupted {stopped}", file=sys.stderr)
            return 130
    return 1 if failed or not summary_written else 0


def _roots(defs: Any) -> tuple[RoundsRoot, LedgerRoot]:
    """The rounds root and the ledger root as a run resolves them (bound resources may hold
    EnvVar placeholders)."""
    resources = defs.resources
    rounds_root: RoundsRoot = resources["rounds_root"].process_config_and_initialize()  # type: ignore[union-attr]
    ledger_root: LedgerRoot = resources["ledger_root"].process_config_and_initialize()  # type: ignore[union-attr]
    return rounds_root, ledger_root


def _instance() -> DagsterInstance:
    if not os.environ.get("DAGSTER_HOME"):
        print("DAGSTER_HOME is not set: using a temporary instance (nothing is kept for the UI)", file=sys.stderr)
        return DagsterInstance.ephemeral()
    return DagsterInstance.get()


def _rounds_to_run(round_keys: list[str], rounds_root: RoundsRoot) -> tuple[dict[str, Path], list[str]]:
    """Every round under the rounds root by key, and the keys to run (the named ones, or all);
    _NothingToRun when the root cannot be listed, a named round is not there, or there is none."""
    listing = list_round_dirs(rounds_root.path, _PrintLog())
    if listing.root_problem is not None:
        raise _NothingToRun(f"rollout-assets: error: {listing.root_problem}")
    found = listing.rounds
    keys = round_keys or sorted(found)
    unknown = [key for key in keys if key not in found]
    if unknown:
        raise _NothingToRun(f"rollout-assets: error: no round {', '.join(unknown)} under {rounds_root.path}")
    if not keys:
        raise _NothingToRun(f"no rounds under {rounds_root.path} (set ROLLOUT_ROUNDS_ROOT)")
    return found, keys


def _materialize_round(
    instance: DagsterInstance,
    key: str,
    out_dir: Path,
    ledger_root: LedgerRoot,
    interrupted: Callable[[], bool],
) -> bool:
    """Run `materialize_round` for one round and print its report; True when it succeeded."""
    # Checked just before launching: two launches at the same moment can still both start,
    # and then the round's lock (defs/round_lock.py) fails the second one before it writes.
    busy = round_run(instance, key, RUNNING_STATUSES)
    if busy is not None:
        print(
            f"\n=== round {key}: NOT STARTED: run {busy} of this round is in progress on the instance; "
            "run again once it has finished (or terminate it in the UI)"
        )
        return False
    with _run_round(instance, key, out_dir) as result:
        if interrupted():
            raise _Interrupted(
                f"during round {key} (run {result.run_id}); no further round and no rounds summary were run"
            )
        return _report_round(result, key, ledger_root, instance)


def _materialize_summary(
    defs: Any,
    instance: DagsterInstance,
    found: dict[str, Path],
    ledger_root: LedgerRoot,
    interrupted: Callable[[], bool],
) -> bool:
    """Run `materialize_summary` and print the table it wrote; True when it succeeded."""
    if instance.is_ephemeral:
        # The summary covers the instance's rounds. A temporary instance knows only those
        # materialized just now, and the summary file is shared: every round under the rounds
        # root joins it, as on the persistent instance that materialized them earlier.
        instance.add_dynamic_partitions(ROUNDS_PARTITIONS_NAME, sorted(found))
    summary = defs.resolve_job_def("materialize_summary").execute_in_process(
        instance=instance, raise_on_error=False, run_config=_QUIET_CONSOLE
    )
    if interrupted():
        raise _Interrupted(f"during the rounds summary (run {summary.run_id})")
    summary_path = ledger_root.path / SUMMARY_FILE_NAME
    print(f"\n=== rounds summary: {'written' if summary.success else 'FAILED'} → {summary_path}")
    _print_failures_and_warnings(instance, summary.run_id)
    if summary.success:
        import pandas as pd

        from rollout_assets.summary import markdown_table

        print(markdown_table(pd.read_parquet(summary_path)))
        left_out = summary.asset_materializations_for_node("rounds_summary")[0].metadata
        for key, reason in left_out["rounds_without_stats_reasons"].value.items():
            print(f"left out: {key} ({reason})")
    return summary.success
