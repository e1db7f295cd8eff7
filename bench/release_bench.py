"""Benchmark of a release: the scrubber while it writes, and the secrets scan after.

    .venv/bin/python bench/release_bench.py                    # a 3,000-cell round
    .venv/bin/python bench/release_bench.py --instances 429    # the bench's x1 round (12,000 cells)

It generates one round with the demo generator (as bench/bench.py does), writes its ledger
with the library backfill and its training rows with `rollout-assets export`, then measures,
each in its own process: the release build without its checks (scrubbing every string of every
row), and the secrets scan of the built release (`release_has_no_secrets`). It prints the wall
time, the CPU time, the peak RSS and the text scrubbed per second.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rollout_assets.demo import RoundSpec, write_demo  # noqa: E402 (after the sys.path line, to run from a checkout)

BIN = Path(sys.executable).parent

# Each measured step, run as `python -c` in a process of its own: its peak RSS is its own.
BUILD = """
import sys
from pathlib import Path
from rollout_assets.release import ReleaseConfig, RoundInput, build_release
from rollout_assets.training.files import TrainingFiles
root = Path(sys.argv[1])
rounds = [RoundInput(root.name, root / "rollout-ledger.jsonl", TrainingFiles(root / "training"))]
build_release(rounds, Path(sys.argv[2]), ReleaseConfig(license="cc-by-4.0"))
""" + "\n"
SCAN = """
import sys
from pathlib import Path
from rollout_assets.release.verify import check_no_secrets
verdict = check_no_secrets(Path(sys.argv[1]))
assert verdict.passed, verdict.problems
"""


# Appended to each step: its own CPU time and peak RSS, as the last line it prints.
OWN_USAGE = """
import json, resource
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024}))
"""


def measured(code: str, *arguments: str) -> dict[str, float]:
    started = time.perf_counter()
    done = subprocess.run([str(BIN / "python"), "-c", code + OWN_USAGE, *arguments], check=True, cwd=PROJECT,
                          capture_output=True, text=True)  # fmt: skip
    return {"wall_s": time.perf_counter() - started, **json.loads(done.stdout.splitlines()[-1])}


def text_mib(release: Path) -> float:
    """The UTF-8 size of every string the release's rows hold (what the scrubber reads)."""
    from rollout_assets.training.files import parquet_rows

    def size(value: object) -> int:
        if isinstance(value, str):
            return len(value.encode("utf-8", "surrogatepass"))
        if isinstance(value, dict):
            return sum(size(item) for item in value.values())
        if isinstance(value, list):
            return sum(size(item) for item in value)
        return 0

    return sum(size(row) for path in release.rglob("*.parquet") for row in parquet_rows(path)) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=107, help="instances (x 4 reps x 7 campaigns = cells)")
    parser.add_argument("--workdir", default="/tmp/rollout-assets-release-bench")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    spec = RoundSpec(name="bench-release", instances=args.instances, reps=4, generations=2,
                     candidates_per_generation=3, workers_per_cell=2, steps_per_session=10,
                     shots_per_candidate=2, edge_cases=False, seed=7)  # fmt: skip
    layout = write_demo(workdir / "inputs", [spec])
    ledgers = workdir / "ledgers" / spec.name
    subprocess.run([str(BIN / "rollout-assets"), "backfill", str(layout.rounds[0]), str(ledgers / "rollout-ledger.jsonl"),
                    "--opencode-db", str(layout.opencode_db), "--claude-projects", str(layout.claude_projects_dir),
                    "--progress", "never"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    subprocess.run([str(BIN / "rollout-assets"), "export", str(ledgers / "rollout-ledger.jsonl"), str(ledgers / "training")],
                   check=False, stdout=subprocess.DEVNULL)  # fmt: skip
    release = workdir / "release"
    build = measured(BUILD, str(ledgers), str(release))
    scan = measured(SCAN, str(release))
    text = text_mib(release)
    manifest = json.loads((release / "manifest.json").read_text())
    rows = {kind: sum(splits.values()) for kind, splits in manifest["rows"].items()}
    print(f"rows {rows}, {text:.1f} MiB of text, scrubbed {manifest['scrubbed']}")
    for name, result in (("build (scrub and write)", build), ("scan", scan)):
        print(f"{name}: {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} s CPU, "
              f"{result['peak_mib']:.0f} MiB peak, {text / result['wall_s']:.2f} MiB/s")  # fmt: skip


if __name__ == "__main__":
    main()
