"""Benchmark: the backfill against the cost of just parsing its inputs, and Dagster on top.

    .venv/bin/python bench/bench.py                      # 12,000-cell round, then x2, x4 and x8
    .venv/bin/python bench/bench.py --instances 40 --scales 1   # a quick smoke run

For each scale it generates one round with the demo generator (7 campaigns: the baseline and
2 generations x 3 candidates; `--instances` x `--reps` cells each; `--workers` sessions of
`--steps` steps per cell). Then, `--repeat` times, it measures every scale in turn, each kind
in its own process so peak memory is that process's own:

- the parse floor (bench/parse_floor.py): every input byte the backfill needs, parsed once
  with `json`, nothing written;
- the library backfill (`rollout-assets backfill`): wall time, CPU time, peak RSS;
- the ledger's parse floor (bench/parse_floor.py --ledger): the backfill's ledger parsed once;
  with the parse floor, the least any check that proves each line from the inputs must read;
- the Dagster materialization of the round, every asset and check of the partition
  (`dagster asset materialize --select group:rounds --partition ROUND` on a fresh SQLite
  DAGSTER_HOME with the partition added): wall time, peak memory, and each step's time;
- what the definitions' imports alone hold (a process importing `rollout_assets.definitions`):
  the memory every Dagster run of the project starts from, whatever its round.

It checks the targets of the Dagster path at scale (`targets_table`): the Dagster run's peak
memory at most 192 MiB at every scale and growing at most 10% from x1 to the largest; the round
job's (the round, its training data and Inspect logs; one memory run, untimed) at most 320 MiB;
Dagster at most 1.6x the backfill at x1 and 1.4x from x4; the backfill at most 0.8x the parse
floor, with flat memory.

Timed runs are not observed: sampling a process tree's memory reads /proc/PID/smaps_rollup,
which walks the tree's page tables, and at 50 samples a second that took 7% of a core during
a backfill and 14% during a Dagster run, a core the measured processes would otherwise have.
Peak memory therefore comes from one more run of each kind per scale, sampled, whose time
does not count.

Before measuring, the generated files are flushed to disk and read once, and the inputs are
read again before each timed run that reads them, so every measurement starts from the same
warm page cache. It prints the ratios and writes them, with the machine,
to docs/BENCHMARKS.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rollout_assets.demo import RoundSpec, write_demo  # noqa: E402 (after the sys.path line, to run from a checkout)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import report  # noqa: E402 (beside this script)

BIN = Path(sys.executable).parent


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    peak_rss_mib: float | None  # None: a timed run, whose memory was not sampled
    stdout: str


def _tree_pids(pid: int) -> list[int]:
    """A process and all its descendants, from /proc."""
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                stack += [int(child) for child in children.read().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return sorted(pids)


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            return next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return 0


def _tree_pss_kib(pid: int) -> int:
    """Proportional set size of a process and all its descendants (KiB), from /proc.

    PSS, not RSS: forked workers share their parent's pages, and summing RSS would count
    those pages once per process. The processes are read one after another, so a fork between
    reading the parent and its new child would count the shared pages one and a half times: a
    sample during which the tree changed is taken again."""
    for _ in range(5):
        pids = _tree_pids(pid)
        total = sum(_pss_kib(current) for current in pids)
        if _tree_pids(pid) == pids:
            break
    return total


class TreeMemorySampler(threading.Thread):
    """Samples the summed PSS of a process tree every 20 ms; `peak_kib` is the highest sum seen.

    A worker pool's memory is the sum of its processes, which no single process's
    ru_maxrss shows."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self._stop_event = pid, 0, threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak_kib = max(self.peak_kib, _tree_pss_kib(self.pid))
            self._stop_event.wait(0.02)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def measure_with_rusage(command: list[str], env: dict[str, str] | None = None, *, sample_memory: bool = False) -> Measured:
    """Run `command`; its wall time and CPU time (with its children's) and, when
    `sample_memory`, the peak of its whole process tree's memory (PSS)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=PROJECT
    )
    sampler = TreeMemorySampler(process.pid) if sample_memory else None
    if sampler is not None:
        sampler.start()
    assert process.stdout is not None
    stdout = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if sampler is not None:
        sampler.stop()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit code {process.returncode}")
    peak_mib = sampler.peak_kib / 1024 if sampler is not None else None
    return Measured(wall, usage.ru_utime + usage.ru_stime, peak_mib, stdout.decode())


def input_bytes(*paths: Path) -> int:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        else:
            for folder, _, files in os.walk(path):
                total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def warm_page_cache(*paths: Path) -> None:
    for path in paths:
        files = [path] if path.is_file() else [Path(folder, name) for folder, _, names in os.walk(path) for name in names]
        for file in files:
            with open(file, "rb") as handle:
                while handle.read(1 << 20):
                    pass


@dataclass
class Prepared:
    """One generated round and the three commands measured on it."""

    scale: int
    root: Path
    out_dir: Path
    input_bytes: int
    generated_s: float
    commands: dict[str, tuple[list[str], dict[str, str] | None]]
    # Measured for their peak memory only (in the memory runs, after every timed kind).
    memory_only: dict[str, tuple[list[str], dict[str, str] | None]]
    inputs: tuple[Path, ...]  # the round's input files and folders, read again before a timed reader


# The kinds that read the round's inputs: each timed run of one starts with them in the page
# cache, since what ran before it (the training files of the round, gigabytes at x8) may have
# pushed them out and a run would then time the disk.
INPUT_READERS = frozenset({"floor", "backfill", "floor_orjson", "dagster"})


def prepare_scale(workdir: Path, scale: int, args: argparse.Namespace) -> Prepared:
    """Generate the round of one scale and set up what measuring it needs (nothing timed)."""
    root = workdir / f"x{scale}"
    if root.exists():
        shutil.rmtree(root)
    spec = RoundSpec(
        name=f"bench-x{scale}",
        instances=args.instances * scale,
        reps=args.reps,
        generations=2,
        candidates_per_generation=3,
        workers_per_cell=args.workers,
        steps_per_session=args.steps,
        shots_per_candidate=2,
        edge_cases=False,
        seed=7,
    )
    started = time.perf_counter()
    layout = write_demo(root, [spec])
    generated_s = time.perf_counter() - started
    out_dir = layout.rounds[0]
    size = input_bytes(out_dir, layout.opencode_db, layout.claude_projects_dir)
    print(f"x{scale}: generated {size / 2**20:.0f} MiB in {generated_s:.0f} s", flush=True)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "local" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), **layout.environment(root / "ledgers")}
    # The partition must exist before `dagster asset materialize` can select it.
    subprocess.run(
        [str(BIN / "python"), "-c",
         f"from dagster import DagsterInstance; DagsterInstance.get().add_dynamic_partitions('rounds', ['{out_dir.name}'])"],
        env=env, check=True, cwd=PROJECT, stderr=subprocess.DEVNULL,
    )
    commands = {
        "floor": ([str(BIN / "python"), "bench/parse_floor.py", str(out_dir), str(layout.opencode_db),
                   str(layout.claude_projects_dir)], None),
        "backfill": ([str(BIN / "rollout-assets"), "backfill", str(out_dir), str(root / "cli-ledger.jsonl"),
                      "--opencode-db", str(layout.opencode_db), "--claude-projects", str(layout.claude_projects_dir),
                      "--progress", "never"], None),
        # The ledger's lines parsed once: with the floor, what checks that prove each line from
        # the inputs must read at least (they read every input and the ledger).
        "ledger_floor": ([str(BIN / "python"), "bench/parse_floor.py", "--ledger", str(root / "cli-ledger.jsonl")], None),
        # Both again with orjson, the parser the project reads with: the least that reading the
        # inputs and the ledger costs the checks here.
        "floor_orjson": ([str(BIN / "python"), "bench/parse_floor.py", "--orjson", str(out_dir),
                          str(layout.opencode_db), str(layout.claude_projects_dir)], None),
        "ledger_floor_orjson": ([str(BIN / "python"), "bench/parse_floor.py", "--orjson", "--ledger",
                                 str(root / "cli-ledger.jsonl")], None),
        # The training data of the backfill's ledger, and then its checks (docs/training.md).
        "training": ([str(BIN / "python"), "bench/training_step.py", "export", str(root / "cli-ledger.jsonl"),
                      str(root / "training")], None),
        "training_checks": ([str(BIN / "python"), "bench/training_step.py", "checks", str(root / "cli-ledger.jsonl"),
                             str(root / "training")], None),
        # What every Dagster run of the project holds before its first step: the definitions'
        # imports (Dagster, and pyarrow and pandas for the training and release assets).
        "dagster_imports": ([str(BIN / "python"), "-c", "import rollout_assets.definitions"], env),
        "dagster": ([str(BIN / "dagster"), "asset", "materialize", "-m", "rollout_assets.definitions",
                     "--select", "group:rounds", "--partition", out_dir.name], env),
    }
    # The round job (`materialize_round`: the round, its training data and Inspect logs), for its
    # peak: the training and Inspect steps run in forked children of the run (docs/scale.md).
    memory_only = {
        "round_job": ([str(BIN / "dagster"), "asset", "materialize", "-m", "rollout_assets.definitions",
                       "--select", "group:rounds or group:training or group:inspect", "--partition", out_dir.name], env),
    }
    # Every measurement starts from the same state: the generator's writes flushed to disk (so
    # no measurement pays for writing them back) and the inputs read once into the page cache.
    os.sync()
    inputs = (out_dir, layout.opencode_db, layout.claude_projects_dir)
    warm_page_cache(*inputs)
    return Prepared(scale, root, out_dir, size, generated_s, commands, memory_only, inputs)


Runs = dict[str, list[tuple[Measured, dict]]]


def measure_memory(prepared: Prepared) -> dict[str, Measured]:
    """One sampled run of each kind on one round: its peak memory (its time does not count)."""
    peaks = {}
    for name, (command, command_env) in {**prepared.commands, **prepared.memory_only}.items():
        peaks[name] = measure_with_rusage(command, env=command_env, sample_memory=True)
        print(f"x{prepared.scale}: {name} peak {peaks[name].peak_rss_mib:.0f} MiB (memory run)", flush=True)
    return peaks


def measure_once(prepared: Prepared, runs: Runs, repetition: int) -> None:
    """Time the floor, the backfill and Dagster on one round, in turn; append to `runs`."""
    for name, (command, command_env) in prepared.commands.items():
        if name in INPUT_READERS:
            warm_page_cache(*prepared.inputs)
        measured = measure_with_rusage(command, env=command_env)
        print(f"x{prepared.scale}: {name} {measured.wall_s:.1f} s (run {repetition + 1})", flush=True)
        steps: dict = {}
        if name == "dagster":
            steps = json.loads(subprocess.run(
                [str(BIN / "python"), "bench/step_times.py", prepared.out_dir.name], env=command_env,
                check=True, cwd=PROJECT, capture_output=True, text=True,
            ).stdout)
        runs.setdefault(name, []).append((measured, steps))


def summarize(prepared: Prepared, runs: Runs, memory: dict[str, Measured], args: argparse.Namespace) -> dict:
    """The figures of one scale from its timed runs (the median run of each kind by default)
    and its memory runs."""
    chosen = {name: _chosen(measured, args.statistic) for name, measured in runs.items()}
    step_times = chosen["dagster"][1]
    floor, backfill, dagster = (chosen[name][0] for name in ("floor", "backfill", "dagster"))
    stats = json.loads(backfill.stdout[: backfill.stdout.rindex("}") + 1])
    dagster_ledger = prepared.root / "ledgers" / prepared.out_dir.name / "rollout-ledger.jsonl"
    if sum(1 for _ in dagster_ledger.open("rb")) != stats["lines"]:
        raise SystemExit(f"{dagster_ledger} does not hold the backfill's {stats['lines']} lines")
    return {
        "scale": prepared.scale,
        "cells": stats["byRole"].get("supervisor", 0),
        "sessions": stats["workerSessionsJoined"] + stats["workerSessionsEmpty"],
        "lines": stats["lines"],
        "input_mib": prepared.input_bytes / 2**20,
        "generate_s": prepared.generated_s,
        "floor_s": floor.wall_s,
        "floor_rss_mib": memory["floor"].peak_rss_mib,
        "ledger_floor_s": chosen["ledger_floor"][0].wall_s,
        "floor_orjson_s": chosen["floor_orjson"][0].wall_s,
        "ledger_floor_orjson_s": chosen["ledger_floor_orjson"][0].wall_s,
        "backfill_s": backfill.wall_s,
        "backfill_cpu_s": backfill.cpu_s,
        "backfill_rss_mib": memory["backfill"].peak_rss_mib,
        "training_s": chosen["training"][0].wall_s,
        "training_rss_mib": memory["training"].peak_rss_mib,
        "training_checks_s": chosen["training_checks"][0].wall_s,
        "training_checks_rss_mib": memory["training_checks"].peak_rss_mib,
        "dagster_s": dagster.wall_s,
        "dagster_cpu_s": dagster.cpu_s,
        "dagster_rss_mib": memory["dagster"].peak_rss_mib,
        "dagster_imports_rss_mib": memory["dagster_imports"].peak_rss_mib,
        "round_job_rss_mib": memory["round_job"].peak_rss_mib,
        "dagster_run_s": step_times["run_s"],
        "dagster_steps": step_times["steps"],
        "dagster_check_steps": step_times["checks"],
        "runs_s": {name: [round(m.wall_s, 1) for m, _ in measured] for name, measured in runs.items()},
        "memory_runs_s": {name: round(m.wall_s, 1) for name, m in memory.items()},
    }


def _chosen(runs: list[tuple[Measured, dict]], statistic: str) -> tuple[Measured, dict]:
    """The run whose time counts: the median (the lower one of an even count) or the fastest."""
    ordered = sorted(runs, key=lambda run: run[0].wall_s)
    return ordered[0] if statistic == "min" else ordered[(len(ordered) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=429, help="instances at x1 (x 4 reps x 7 campaigns = cells)")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="worker sessions per cell")
    parser.add_argument("--steps", type=int, default=10, help="assistant steps per worker session")
    parser.add_argument("--scales", default="1,2,4,8")
    parser.add_argument("--workdir", default="/tmp/rollout-assets-bench")
    parser.add_argument("--out", default=str(PROJECT / "docs" / "BENCHMARKS.md"))
    parser.add_argument("--keep", action="store_true", help="keep the generated rounds")
    parser.add_argument("--repeat", type=int, default=3, help="measurements of each kind per scale")
    parser.add_argument("--statistic", choices=["median", "min"], default="median", help="which measurement counts")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prepared = [prepare_scale(workdir, int(scale), args) for scale in args.scales.split(",")]
    # Each repetition measures every scale, smallest first, and each kind in turn: this VM's speed
    # drifts over minutes, and measuring one scale after the other would put that drift into the
    # growth ratios. The median run of each kind counts by default: the host's load comes in
    # bursts, and a short run can fall entirely into a quiet spell while a long one cannot.
    runs: list[Runs] = [{} for _ in prepared]
    for repetition in range(args.repeat):
        for scale_runs, scale in zip(runs, prepared):
            measure_once(scale, scale_runs, repetition)
    memory = [measure_memory(scale) for scale in prepared]
    results = [summarize(*measured, args) for measured in zip(prepared, runs, memory)]
    text = report(results, args)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
    # Last: removing gigabytes takes minutes here (the disk is mounted with discard), and the
    # figures must not wait for it, nor be lost if it is interrupted.
    if not args.keep:
        for scale in prepared:
            shutil.rmtree(scale.root)


if __name__ == "__main__":
    main()
