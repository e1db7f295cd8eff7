"""Benchmark of the Inspect logs: writing a round's ledger as Inspect eval logs, against the
backfill that wrote the ledger.

    .venv/bin/python bench/inspect_logs_bench.py                   # the bench's x1 and x4 rounds
    .venv/bin/python bench/inspect_logs_bench.py --scales 1 --repeat 1

For each scale it generates the round bench/bench.py generates (7 campaigns of 429 x scale
instances x 4 reps, 2 worker sessions of 10 steps per cell) and writes its ledger with the library
backfill. Then, `--repeat` times, it times in turn, each in its own process: the backfill
(`rollout-assets backfill`) and the logs (`rollout-assets inspect-logs LEDGER OUT_DIR`, start-up
and the import of inspect_ai included). Timed runs are not observed; peak memory (PSS of the
process tree, forked workers included) comes from one more run of each, sampled every 20 ms, as
bench.py does. It also measures what importing inspect_ai costs a process on its own. It prints
a Markdown table of the median times, their ratio and the peaks.
"""

import argparse
import shutil
import statistics
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import BIN, measure_with_rusage  # noqa: E402 (beside this script)

from rollout_assets.demo import RoundSpec, write_demo  # noqa: E402 (after the sys.path line, to run from a checkout)

IMPORT = "import time; t = time.perf_counter(); import inspect_ai.log; print(time.perf_counter() - t)"


def prepare(workdir: Path, scale: int, instances: int) -> dict[str, list[str]]:
    """Generate the round of one scale, write its ledger; the two commands to measure."""
    root = workdir / f"x{scale}"
    shutil.rmtree(root, ignore_errors=True)
    spec = RoundSpec(name=f"bench-x{scale}", instances=instances * scale, reps=4, generations=2,
                     candidates_per_generation=3, workers_per_cell=2, steps_per_session=10,
                     shots_per_candidate=2, edge_cases=False, seed=7)  # fmt: skip
    layout = write_demo(root, [spec])
    backfill = [str(BIN / "rollout-assets"), "backfill", str(layout.rounds[0]), str(root / "ledger.jsonl"),
                "--opencode-db", str(layout.opencode_db), "--claude-projects", str(layout.claude_projects_dir),
                "--progress", "never"]  # fmt: skip
    measure_with_rusage(backfill)  # the ledger the logs are written from
    logs = [str(BIN / "rollout-assets"), "inspect-logs", str(root / "ledger.jsonl"), str(root / "inspect-logs")]
    return {"backfill": backfill, "inspect_logs": logs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=429, help="instances at x1 (x 4 reps x 7 campaigns = cells)")
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each kind per scale")
    parser.add_argument("--workdir", default="/tmp/rollout-assets-inspect-bench")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    scales = [int(scale) for scale in args.scales.split(",")]
    commands = {scale: prepare(workdir, scale, args.instances) for scale in scales}
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.repeat):  # each kind in turn: the machine's speed drifts over minutes
        for scale in scales:
            for name, command in commands[scale].items():
                times.setdefault((scale, name), []).append(measure_with_rusage(command).wall_s)
    print("| scale | lines | ledger MiB | logs MiB | backfill s | inspect-logs s | ratio | backfill peak MiB | inspect-logs peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scale in scales:
        root = workdir / f"x{scale}"
        peaks = {name: measure_with_rusage(command, sample_memory=True).peak_rss_mib for name, command in commands[scale].items()}
        backfill, logs = (statistics.median(times[(scale, name)]) for name in ("backfill", "inspect_logs"))
        with open(root / "ledger.jsonl", "rb") as ledger:
            lines = sum(1 for _ in ledger)
        ledger_mib = (root / "ledger.jsonl").stat().st_size / 2**20
        logs_mib = sum(path.stat().st_size for path in (root / "inspect-logs").iterdir()) / 2**20
        print(f"| x{scale} | {lines:,} | {ledger_mib:.0f} | {logs_mib:.0f} | {backfill:.1f} | {logs:.1f} | "
              f"{logs / backfill:.2f} | {peaks['backfill']:.0f} | {peaks['inspect_logs']:.0f} |")  # fmt: skip
    for name, runs in sorted(times.items()):
        print(f"- x{name[0]} {name[1]}: " + ", ".join(f"{wall:.1f}" for wall in runs))
    imported = measure_with_rusage([str(BIN / "python"), "-c", IMPORT], sample_memory=True)
    baseline = measure_with_rusage([str(BIN / "python"), "-c", "import time; time.sleep(0.5)"], sample_memory=True)
    print(f"import inspect_ai.log: {float(imported.stdout):.2f} s, process peak {imported.peak_rss_mib:.0f} MiB "
          f"(a bare interpreter: {baseline.peak_rss_mib:.0f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main()
