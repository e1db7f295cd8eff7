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


def main(round_key: str) -> None:
    instance = DagsterInstance.get()
    runs = instance.get_runs(filters=RunsFilter(tags={"dagster/partition": round_key}), limit=1)
    if not runs:
        raise SystemExit(f"no run of round {round_key} on this instance")
    logs = instance.all_logs(runs[0].run_id)
    started: dict[str, float] = {}
    steps: list[tuple[float, str, float]] = []
    for entry in logs:
        event = entry.dagster_event
        if event is None or entry.step_key is None:
            continue
        if event.event_type == DagsterEventType.STEP_START:
            started[entry.step_key] = entry.timestamp
        elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            begin = started[entry.step_key]
            steps.append((begin, entry.step_key, entry.timestamp - begin))
    seconds_by_step = {key: round(seconds, 2) for _, key, seconds in sorted(steps)}
    print(json.dumps({
        "run_s": logs[-1].timestamp - logs[0].timestamp,
        "steps": seconds_by_step,
        "checks": [key for key in seconds_by_step if key in CHECK_STEPS],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
