"""Rows per dataset and drops per reason of the training data, on the demo and on a bench round:

    .venv/bin/python bench/training_rows.py WORKDIR                 # demo rounds + a 12,012-cell round
    .venv/bin/python bench/training_rows.py WORKDIR --instances 40  # a smaller bench round
    .venv/bin/python bench/training_rows.py WORKDIR --export-args=--no-normalize-identifiers

It writes the default demo rounds and one bench round (the round bench/bench.py measures at x1:
the baseline and 2 generations x 3 candidates, `--instances` x `--reps` cells each) under
WORKDIR, unless they are there already, and makes each round's ledger with `rollout-assets
backfill`. Then, per round, `rollout-assets export` writes the training data and runs its
checks, and `bench/training_step.py export` times the export alone in a process of its own (wall
time, CPU time and peak RSS, from wait4), three times, beside three timed backfills of the same
round (the least of each counts). It prints one Markdown table: lines, rows per dataset, drops
per reason, and the bench round's export time and memory against the backfill's.

The code measured is the checkout this script sits in, so a copy of the script in another
checkout measures that checkout's code.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rollout_assets.demo import DEFAULT_ROUNDS, DemoLayout, RoundSpec, write_demo  # noqa: E402 (after the sys.path line)

DATASETS = ("sft_rows", "preference_pairs", "grpo_groups")
_CLI = "import sys; from rollout_assets.cli import main; sys.exit(main())"


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PROJECT)}


def _run(command: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MiB, stdout) of one process of the checkout's code
    (CPU and memory of its worker processes included)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=_environment(), cwd=PROJECT)
    assert process.stdout is not None
    stdout = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stdout}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def _backfill_command(layout: DemoLayout, out_dir: Path, ledger: Path) -> list[str]:
    return [sys.executable, "-c", _CLI, "backfill", str(out_dir), str(ledger), "--opencode-db", str(layout.opencode_db),
            "--claude-projects", str(layout.claude_projects_dir), "--progress", "never"]


def _rounds(workdir: Path, args: argparse.Namespace) -> list[tuple[str, Path, list[str]]]:
    """(name, ledger, the command that backfills it) of every round measured, generated and
    backfilled when missing."""
    bench = RoundSpec(
        name=f"bench-{args.instances}", instances=args.instances, reps=args.reps, generations=2,
        candidates_per_generation=3, workers_per_cell=args.workers, steps_per_session=args.steps,
        shots_per_candidate=2, edge_cases=False, seed=7,
    )  # fmt: skip
    rounds = []
    for root, specs in ((workdir / "demo", DEFAULT_ROUNDS), (workdir / bench.name, (bench,))):
        if not root.exists():
            write_demo(root, specs)
        layout = DemoLayout(root, root / "rounds", root / "opencode.db", root / "claude-projects",
                            tuple(root / "rounds" / spec.name for spec in specs))  # fmt: skip
        for out_dir in layout.rounds:
            ledger = workdir / "ledgers" / out_dir.name / "rollout-ledger.jsonl"
            if not ledger.is_file():
                ledger.parent.mkdir(parents=True, exist_ok=True)
                _run(_backfill_command(layout, out_dir, ledger))
            rounds.append((out_dir.name, ledger, _backfill_command(layout, out_dir, workdir / "timed-ledger.jsonl")))
    return rounds


def _measure(name: str, ledger: Path, backfill: list[str], workdir: Path, export_args: list[str]) -> dict:
    """The report of `rollout-assets export` (which also runs the checks); for a bench round,
    the export's time and peak memory on their own and the backfill's time beside them."""
    out = workdir / "training" / name
    _run([sys.executable, "-c", _CLI, "export", str(ledger), str(out), *export_args])
    report = json.loads((out / "training-report.json").read_text(encoding="utf-8"))
    measured = {"name": name, "lines": report["datasets"]["sft_rows"]["lines"], "datasets": report["datasets"]}
    if name.startswith("bench-"):
        # The export and the backfill in turn, three times each; the least of each counts (the
        # host is shared, and the least is the run least slowed by others).
        export = [sys.executable, "bench/training_step.py", "export", str(ledger), str(workdir / "timed")]
        exports = [_run(export) for _ in range(3)]
        backfills = [_run(backfill) for _ in range(3)]
        measured.update(
            export_s=min(run[0] for run in exports), export_cpu_s=min(run[1] for run in exports),
            export_peak_mib=max(run[2] for run in exports),
            backfill_s=min(run[0] for run in backfills), backfill_cpu_s=min(run[1] for run in backfills),
        )  # fmt: skip
    return measured


def table(results: list[dict]) -> str:
    from rollout_assets.training import DROP_REASONS

    found = {reason for result in results for dataset in result["datasets"].values() for reason in dataset["drops"]}
    reasons = [reason for reason in DROP_REASONS if reason in found]
    header = "| round | lines | dataset | rows | " + " | ".join(reasons) + " |"
    lines = [header, "|---" * (4 + len(reasons)) + "|"]
    for result in results:
        for name in DATASETS:
            dataset = result["datasets"][name]
            drops = " | ".join(str(dataset["drops"].get(reason, 0)) for reason in reasons)
            lines.append(f"| {result['name']} | {result['lines']} | {name} | {dataset['rows']} | {drops} |")
    for result in results:
        if "export_s" in result:
            lines.append("")
            lines.append(
                f"{result['name']}: export {result['export_s']:.1f} s wall, {result['export_cpu_s']:.1f} s CPU, "
                f"peak RSS {result['export_peak_mib']:.0f} MiB; backfill {result['backfill_s']:.1f} s wall, "
                f"{result['backfill_cpu_s']:.1f} s CPU; export / backfill {result['export_s'] / result['backfill_s']:.2f}x wall, "
                f"{result['export_cpu_s'] / result['backfill_cpu_s']:.2f}x CPU"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir")
    parser.add_argument("--instances", type=int, default=429, help="instances of the bench round (x 4 reps x 7 campaigns = cells)")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--export-args", default="", help="options passed to rollout-assets export, space-separated")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    export_args = args.export_args.split()
    rounds = _rounds(workdir, args)
    results = [_measure(name, ledger, backfill, workdir, export_args) for name, ledger, backfill in rounds]
    print(table(results), end="")


if __name__ == "__main__":
    main()
