"""Step timings of the latest run of one round on the instance at $DAGSTER_HOME, as JSON.

    DAGSTER_HOME=... python bench/step_times.py ROUND

Each step's seconds from its STEP_START to its STEP_SUCCESS (or STEP_FAILURE) event, in the
order the steps started, plus the run's own span: where a Dagster materialization spends its time.
The keys of the check steps are listed apart ("checks"), so the report can tell what the
checks cost from what the asset steps cost.
"""

import json
import sys

from dagster import DagsterEventType, DagsterInstance, RunsFilter

from rollout_assets.defs.checks import ROUND_CHECKS

# A step runs one op; a check's op is named after its asset and itself.
CHECK_STEPS = frozenset(checks.node_def.name for checks in ROUND_CHECKS)


def step_spans(round_key: str) -> tuple[list[tuple[str, float, float]], float]:
    """Each step's (key, start, end) of the latest run of `round_key`, in the order the steps
    started, and the run's span from its first event to its last."""
    instance = DagsterInstance.get()
    runs = instance.get_runs(filters=RunsFilter(tags={"dagster/partition": round_key}), limit=1)
    if not runs:
        raise SystemExit(f"no run of round {round_key} on this instance")
    logs = instance.all_logs(runs[0].run_id)
    started: dict[str, float] = {}
    spans: list[tuple[str, float, float]] = []
    for entry in logs:
        event = entry.dagster_event
        if event is None or entry.step_key is None:
            continue
        if event.event_type == DagsterEventType.STEP_START:
            started[entry.step_key] = entry.timestamp
        elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            spans.append((entry.step_key, started[entry.step_key], entry.timestamp))
    spans.sort(key=lambda span: span[1])
    return spans, logs[-1].timestamp - logs[0].timestamp


def main(round_key: str) -> None:
    spans, run_s = step_spans(round_key)
    seconds_by_step = {key: round(end - start, 2) for key, start, end in spans}
    print(json.dumps({
        "run_s": run_s,
        "steps": seconds_by_step,
        "checks": [key for key in seconds_by_step if key in CHECK_STEPS],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
