"""Benchmark: one tick of `round_dirs_sensor` over a rounds root of many rounds.

    .venv/bin/python bench/bench_sensor.py                 # 2,000 rounds
    .venv/bin/python bench/bench_sensor.py --rounds 200    # a quick run

Generates the rounds with the demo generator (small rounds: a baseline and one candidate,
a few cells each, proposer shots), then times three ticks on a real (temporary) instance:
the first (every round new: fingerprint, partition add, run request), a second with nothing
changed (the cursor carries every round), and a third after one input file of one round was
rewritten. Dagster gives a tick 60 s; the figure to watch is the first tick.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from dagster import SensorResult, SkipReason, build_sensor_context, instance_for_test  # noqa: E402 (after the sys.path line, to run from a checkout)

from rollout_assets.defs.resources import RoundDiscovery, RoundsRoot  # noqa: E402 (after the sys.path line, to run from a checkout)
from rollout_assets.defs.sensors import round_dirs_sensor  # noqa: E402 (after the sys.path line, to run from a checkout)
from rollout_assets.demo import RoundSpec, write_demo  # noqa: E402 (after the sys.path line, to run from a checkout)


def tick(instance, root: Path, cursor: str | None) -> tuple[float, SensorResult | SkipReason, str | None]:
    context = build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"rounds_root": RoundsRoot(root_dir=str(root)), "round_discovery": RoundDiscovery(quiet_period_seconds=0)},
    )
    started = time.perf_counter()
    result = round_dirs_sensor(context)
    elapsed = time.perf_counter() - started
    new_cursor = result.cursor if isinstance(result, SensorResult) else context.cursor
    if isinstance(result, SensorResult):
        # What the daemon does with a tick's result: the next tick finds the partitions added.
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return elapsed, result, new_cursor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--workdir", default="/tmp/rollout-assets-bench-sensor")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    specs = [
        RoundSpec(
            name=f"round-{index:05d}",
            instances=3,
            reps=1,
            generations=1,
            candidates_per_generation=1,
            workers_per_cell=1,
            steps_per_session=1,
            shots_per_candidate=1,
            edge_cases=False,
            seed=index,
        )
        for index in range(args.rounds)
    ]
    started = time.perf_counter()
    layout = write_demo(workdir, specs)
    generated = time.perf_counter() - started
    files = sum(len(names) for _, _, names in os.walk(layout.rounds_root))
    print(f"generated {args.rounds} rounds ({files:,} files) in {generated:.0f} s", flush=True)

    with instance_for_test() as instance:
        first, result, cursor = tick(instance, layout.rounds_root, None)
        assert isinstance(result, SensorResult) and len(result.run_requests) == args.rounds
        second, result2, cursor = tick(instance, layout.rounds_root, cursor)
        assert isinstance(result2, SkipReason), result2
        changed = next((layout.rounds[0] / "improve-run" / "baseline").glob("*/cached-result.json"))
        changed.write_bytes(changed.read_bytes())
        os.utime(changed, (time.time() - 10, time.time() - 10))
        third, result3, _ = tick(instance, layout.rounds_root, cursor)
        assert isinstance(result3, SensorResult) and len(result3.run_requests) == 1
    summary = {
        "rounds": args.rounds,
        "files": files,
        "first_tick_s": round(first, 2),
        "unchanged_tick_s": round(second, 2),
        "one_change_tick_s": round(third, 2),
    }
    print(json.dumps(summary, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
