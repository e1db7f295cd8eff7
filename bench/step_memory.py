"""Where a Dagster materialization's memory goes: each step's peak, from one sampled run.

    DAGSTER_HOME=... ROLLOUT_ROUNDS_ROOT=... python bench/step_memory.py ROUND [SELECTION]

Runs `dagster asset materialize --select group:rounds --partition ROUND` (the command
bench/bench.py measures; the partition must exist on the instance; SELECTION replaces
`group:rounds`, e.g. "group:rounds or group:training" for what the round job runs), samples the PSS of its
whole process tree every 20 ms, then reads the run's STEP_START and STEP_SUCCESS (or
STEP_FAILURE) events and prints, as JSON, the memory at the run's first step and each step's
memory at its start and its peak. Samples between steps count for no step: they show in
`peak_mib`, the run's own peak.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BIN, PROJECT, _tree_pss_kib  # noqa: E402 (the bench's own sampling, from this folder)
from step_times import step_spans  # noqa: E402


class TimelineSampler(threading.Thread):
    """The summed PSS of a process tree (KiB) every 20 ms, with the wall-clock time of each sample."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self._stop_event = pid, [], threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.time(), _tree_pss_kib(self.pid)))
            self._stop_event.wait(0.02)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def main(round_key: str, selection: str = "group:rounds") -> None:
    command = [str(BIN / "dagster"), "asset", "materialize", "-m", "rollout_assets.definitions",
               "--select", selection, "--partition", round_key]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT)
    sampler = TimelineSampler(process.pid)
    sampler.start()
    status = process.wait()
    sampler.stop()
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit code {status}")
    spans, _ = step_spans(round_key)
    first_start = spans[0][1]

    def mib(kib: float) -> int:
        return round(kib / 1024)

    def during(start: float, end: float) -> list[int]:
        return [kib for at, kib in sampler.samples if start <= at <= end]

    before_first = [kib for at, kib in sampler.samples if at <= first_start]
    steps = {}
    for key, start, end in spans:
        inside = during(start, end) or [0]
        steps[key] = {"start_mib": mib(inside[0]), "peak_mib": mib(max(inside)), "seconds": round(end - start, 2)}
    print(json.dumps({
        "peak_mib": mib(max(kib for _, kib in sampler.samples)),
        "at_first_step_mib": mib(before_first[-1]) if before_first else None,
        "steps": steps,
    }, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
