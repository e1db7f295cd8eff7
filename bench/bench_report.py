"""The report of bench/bench.py (docs/BENCHMARKS.md): its tables, the Dagster run's cost split
and the targets, from the summarized results of every scale."""

import argparse
import os
import platform
import sys
import time


def machine() -> str:
    cpus = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.machine()}, {cpus} cores, {memory:.0f} GiB, Python {platform.python_version()}, {platform.system()}"


def report(results: list[dict], args: argparse.Namespace) -> str:
    base = results[0]
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `bench/bench.py` ({' '.join(sys.argv[1:]) or 'defaults'}) on {machine()},",
        f"on {time.strftime('%Y-%m-%d')}. Each figure comes from one run of the script, all on the same files; each time",
        f"is the {'fastest' if args.statistic == 'min' else 'median'} of {args.repeat} measurements taken in turn "
        "(all of them are listed below). Timed runs are not observed; each memory figure is the peak",
        "of one more run of that kind, sampled every 20 ms (its time is listed, and does not count).",
        "",
        ("| scale | cells | worker sessions | lines | inputs MiB | parse floor s | backfill s (CPU s) | backfill / floor "
        "| backfill peak MiB (PSS, all processes) | Dagster s | Dagster / backfill | Dagster peak MiB (PSS) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| x{r['scale']} | {r['cells']:,} | {r['sessions']:,} | {r['lines']:,} | {r['input_mib']:.0f} "
            f"| {r['floor_s']:.1f} | {r['backfill_s']:.1f} ({r['backfill_cpu_s']:.1f}) "
            f"| {r['backfill_s'] / r['floor_s']:.2f} | {r['backfill_rss_mib']:.0f} | {r['dagster_s']:.1f} "
            f"| {r['dagster_s'] / r['backfill_s']:.2f} | {r['dagster_rss_mib']:.0f} |"
        )
    lines += [
        "",
        "The training data of the backfill's ledger (`bench/training_step.py`: the rows, then their checks;",
        "each its own process, start-up included):",
        "",
        "| scale | rows s | rows / backfill | rows peak MiB | checks s | checks / backfill | checks peak MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| x{r['scale']} | {r['training_s']:.1f} | {r['training_s'] / r['backfill_s']:.2f} | {r['training_rss_mib']:.0f} "
            f"| {r['training_checks_s']:.1f} | {r['training_checks_s'] / r['backfill_s']:.2f} | {r['training_checks_rss_mib']:.0f} |"
        )
    lines += ["", *dagster_memory_table(results)]
    lines += ["", "Growth against x1 (time ratio; linear would equal the scale):", ""]
    for r in results[1:]:
        lines.append(
            f"- x{r['scale']}: backfill x{r['backfill_s'] / base['backfill_s']:.2f}, "
            f"Dagster x{r['dagster_s'] / base['dagster_s']:.2f}, peak memory of the backfill "
            f"{r['backfill_rss_mib']:.0f} MiB (x1: {base['backfill_rss_mib']:.0f} MiB), of the Dagster "
            f"materialization {r['dagster_rss_mib']:.0f} MiB (x1: {base['dagster_rss_mib']:.0f} MiB)"
        )
    lines += ["", "Every measurement, in seconds, in the order taken:", ""]
    for r in results:
        lines.append(
            f"- x{r['scale']}: " + "; ".join(f"{name} {', '.join(f'{t:.1f}' for t in times)}" for name, times in r["runs_s"].items())
            + "; memory runs " + ", ".join(f"{name} {t:.1f}" for name, t in r["memory_runs_s"].items())
        )
    lines += ["", *dagster_steps_table(results)]
    lines += ["", *dagster_cost_model(results)]
    lines += ["", *checks_share_table(results)]
    lines += ["", *targets_table(results)]
    return "\n".join(lines) + "\n"


def dagster_steps_table(results: list[dict]) -> list[str]:
    """Each Dagster step's seconds at every scale, then the run's span and the whole command."""
    lines = ["Where the Dagster materialization spends its time (seconds per step, from the run's events;",
             "`total` is the whole command, start-up and imports included; the run that counts):", ""]
    lines.append("| step | " + " | ".join(f"x{r['scale']}" for r in results) + " |")
    lines.append("|---|" + "---|" * len(results))
    for step in results[0]["dagster_steps"]:
        lines.append(f"| {step} | " + " | ".join(f"{r['dagster_steps'].get(step, 0):.2f}" for r in results) + " |")
    lines.append("| run (first to last event) | " + " | ".join(f"{r['dagster_run_s']:.1f}" for r in results) + " |")
    lines.append("| total | " + " | ".join(f"{r['dagster_s']:.1f}" for r in results) + " |")
    return lines


def dagster_memory_table(results: list[dict]) -> list[str]:
    """The Dagster run's peak beside what the definitions' imports alone hold: the part of the
    peak that a round's size can change."""
    return [
        "Memory of the Dagster materialization against what the definitions' imports alone hold (one process",
        "importing `rollout_assets.definitions`, nothing run; PSS): the part of the peak a round can change;",
        "and the round job's peak (`materialize_round`: the round, its training data and Inspect logs, one",
        "memory run).",
        "",
        "| scale | imports MiB | Dagster peak MiB | above the imports MiB | round job peak MiB |",
        "|---|---|---|---|---|",
        *(f"| x{r['scale']} | {r['dagster_imports_rss_mib']:.0f} | {r['dagster_rss_mib']:.0f} "
          f"| {r['dagster_rss_mib'] - r['dagster_imports_rss_mib']:.0f} | {r['round_job_rss_mib']:.0f} |" for r in results),
    ]


# The checks' share of the Dagster run at x1 before the gap lines were proved (3.3 s of 14.3 s,
# docs/performance.md "The cost of proving every gap"): the share proving them was not to raise.
SHARE_BEFORE_GAP_PROOFS = 0.23
GAP_PROOFS_STEP = "rollout_ledger_every_gap_is_warranted"


def _read_floor(r: dict) -> float:
    """The least that reading every input and the ledger once with orjson costs, on every core."""
    return (r["floor_orjson_s"] + r["ledger_floor_orjson_s"]) / len(os.sched_getaffinity(0))


def _checks_share(r: dict) -> float:
    return _cost_parts(r)["checks"] / r["dagster_s"]


def checks_share_table(results: list[dict]) -> list[str]:
    """The checks' steps as a share of the whole Dagster command: in all, without the gap
    proofs' step, and the least share checks that read every input and the ledger once (the
    read floor of the cost table) could have beside these asset steps."""
    rows = []
    for r in results:
        checks = _cost_parts(r)["checks"]
        gaps = r["dagster_steps"].get(GAP_PROOFS_STEP, 0.0)
        floor = _read_floor(r)
        rows.append((checks, gaps, _checks_share(r), (checks - gaps) / (r["dagster_s"] - gaps),
                     floor / (r["dagster_s"] - checks + floor)))
    header = "| | " + " | ".join(f"x{r['scale']}" for r in results) + " |"
    return [
        "The checks' share of the Dagster materialization (their steps over the whole command; before",
        f"the gap lines were proved it was {SHARE_BEFORE_GAP_PROOFS:.0%} at x1):",
        "",
        header,
        "|---|" + "---|" * len(results),
        "| the checks' steps, s | " + " | ".join(f"{row[0]:.1f}" for row in rows) + " |",
        "| of them the gap proofs (`every_gap_is_warranted`), s | " + " | ".join(f"{row[1]:.1f}" for row in rows) + " |",
        "| the checks' share | " + " | ".join(f"{row[2]:.0%}" for row in rows) + " |",
        "| the share without the gap proofs' step | " + " | ".join(f"{row[3]:.0%}" for row in rows) + " |",
        "| the least share of checks that only read (the read floor beside these asset steps) | "
        + " | ".join(f"{row[4]:.0%}" for row in rows) + " |",
    ]


# The Dagster materialization's memory ceiling at every scale (MiB, PSS of all its processes),
# and how much more the largest round may need than x1: memory must not follow the round.
DAGSTER_PEAK_MIB = 192
FLAT_GROWTH = 1.10
# The round job's (the round, its training data and Inspect logs) ceiling at every scale.
ROUND_JOB_PEAK_MIB = 320


def _dagster_time_limit(scale: int) -> float:
    """At most this multiple of the backfill's time: start-up weighs most at x1."""
    return 1.6 if scale < 4 else 1.4


def targets_table(results: list[dict]) -> list[str]:
    """The targets of the Dagster path at scale, each with the figures that decide it."""
    base, largest = results[0], results[-1]

    def figures(key: str, digits: int = 0) -> str:
        return ", ".join(f"x{r['scale']} {r[key]:.{digits}f}" for r in results)

    targets = [
        (f"Dagster peak memory <= {DAGSTER_PEAK_MIB} MiB at every scale",
         all(r["dagster_rss_mib"] <= DAGSTER_PEAK_MIB for r in results), figures("dagster_rss_mib")),
        ("Dagster materialization <= 1.6 x backfill at x1, <= 1.4 x at x4 and beyond",
         all(r["dagster_s"] <= _dagster_time_limit(r["scale"]) * r["backfill_s"] for r in results),
         ", ".join(f"x{r['scale']} {r['dagster_s'] / r['backfill_s']:.2f}" for r in results)),
        (f"round job (round, training data, Inspect logs) peak memory <= {ROUND_JOB_PEAK_MIB} MiB at every scale",
         all(r["round_job_rss_mib"] <= ROUND_JOB_PEAK_MIB for r in results), figures("round_job_rss_mib")),
        ("library backfill <= 0.8 x parse floor", all(r["backfill_s"] <= 0.8 * r["floor_s"] for r in results),
         ", ".join(f"x{r['scale']} {r['backfill_s'] / r['floor_s']:.2f}" for r in results)),
        ("training rows <= 0.5 x library backfill", all(r["training_s"] <= 0.5 * r["backfill_s"] for r in results),
         ", ".join(f"x{r['scale']} {r['training_s'] / r['backfill_s']:.2f}" for r in results)),
        (f"the checks' share of the Dagster materialization <= {SHARE_BEFORE_GAP_PROOFS:.0%}",
         all(_checks_share(r) <= SHARE_BEFORE_GAP_PROOFS for r in results),
         ", ".join(f"x{r['scale']} {_checks_share(r):.0%}" for r in results)),
    ]
    if len(results) > 1:
        growth = f"x1 -> x{largest['scale'] // base['scale']}"
        targets += [
            (f"Dagster peak memory grows <= {FLAT_GROWTH - 1:.0%} {growth}",
             largest["dagster_rss_mib"] <= FLAT_GROWTH * base["dagster_rss_mib"],
             f"{largest['dagster_rss_mib'] / base['dagster_rss_mib']:.2f} x"),
            (f"backfill peak memory flat (grows <= {FLAT_GROWTH - 1:.0%} {growth})",
             largest["backfill_rss_mib"] <= FLAT_GROWTH * base["backfill_rss_mib"],
             f"{largest['backfill_rss_mib'] / base['backfill_rss_mib']:.2f} x"),
            (f"backfill time grows at most 1.1 x the round ({growth})",
             largest["backfill_s"] <= 1.1 * largest["scale"] / base["scale"] * base["backfill_s"],
             f"{largest['backfill_s'] / base['backfill_s']:.2f} x"),
        ]
    return ["| target | met | measured |", "|---|---|---|",
            *(f"| {name} | {'yes' if met else 'NO'} | {measured} |" for name, met, measured in targets)]


# What the Dagster materialization adds to the backfill, part by part: (key, row label).
_COST_PARTS = [
    ("start_up", "start-up and shut-down (whole command less the run's span)"),
    ("checks", "the checks' steps"),
    ("assets", "the asset steps beyond the backfill (their sum less the backfill's time)"),
    ("between", "between steps (the run's span less every step)"),
]


def _cost_parts(r: dict) -> dict[str, float]:
    checks = sum(r["dagster_steps"][key] for key in r["dagster_check_steps"])
    assets = sum(r["dagster_steps"].values()) - checks
    return {
        "start_up": r["dagster_s"] - r["dagster_run_s"],
        "checks": checks,
        "assets": assets - r["backfill_s"],
        "between": r["dagster_run_s"] - assets - checks,
    }


def dagster_cost_model(results: list[dict]) -> list[str]:
    """What the Dagster materialization adds to the backfill, each part as a multiple of the
    backfill; and the least ratio any layout of the asset steps could reach with these checks."""
    split = [(_cost_parts(r), r["backfill_s"]) for r in results]
    lines = [
        "What the Dagster materialization adds to the backfill, in seconds (and as a multiple of the",
        "backfill's time; the targets leave 0.60 at x1 and 0.40 from x4):",
        "",
        "| cost | " + " | ".join(f"x{r['scale']}" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for key, label in _COST_PARTS:
        lines.append(f"| {label} | " + " | ".join(f"{part[key]:.1f} ({part[key] / backfill:.2f})" for part, backfill in split) + " |")
    # Even asset steps that cost exactly the backfill, with nothing between them, leave the
    # start-up and the checks on top: no layout of the stages goes below this.
    lines.append("| least Dagster / backfill with these checks: 1 + start-up + checks | " + " | ".join(
        f"{1 + (part['start_up'] + part['checks']) / backfill:.2f}" for part, backfill in split) + " |")
    # Checks that prove every line from the inputs by their own path must at least read every
    # input and the ledger once: the two parse floors with the project's parser, on every core
    # at best.
    cores = len(os.sched_getaffinity(0))
    read = [_read_floor(r) for r in results]
    lines.append(f"| the checks' read floor: (parse floor + ledger parse, with orjson) / {cores} cores | " + " | ".join(
        f"{seconds:.1f} ({seconds / r['backfill_s']:.2f})" for seconds, r in zip(read, results)) + " |")
    lines.append("| least Dagster / backfill with checks that only read: 1 + start-up + read floor | " + " | ".join(
        f"{1 + (part['start_up'] + seconds) / backfill:.2f}" for (part, backfill), seconds in zip(split, read)) + " |")
    return lines
