"""The command line of the training data and the release (`rollout-assets export`,
`rollout-assets release`): the same core as the Dagster assets, without Dagster.

Both run the same checks as the assets and exit 1 when one fails; an export leaves its files
for inspection, a release that fails a check is not put in place. Each ledger is read from one
open file (a LedgerSnapshot) by every pass and check of the run. An OSError (no permission, a
full disk, a quota, a size limit) is one line naming what was not written, as for the backfill.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

LEDGER_FILE = "rollout-ledger.jsonl"


def add_dataset_commands(commands: Any) -> None:
    export = commands.add_parser("export", help="write the training rows of one ledger (SFT, pairs, GRPO groups)")
    export.add_argument("ledger", metavar="LEDGER.jsonl", help="a round's rollout ledger")
    export.add_argument("out_dir", metavar="OUT_DIR", help="the folder of the training files")
    export.add_argument("--round", dest="round_key", metavar="NAME", help="the round's name (default: the ledger's folder)")
    _filter_options(export)

    release = commands.add_parser("release", help="build a scrubbed, split dataset from the ledgers of a ledger root")
    release.add_argument("ledger_root", metavar="LEDGER_ROOT", help="holds <round>/rollout-ledger.jsonl")
    release.add_argument("out_dir", metavar="OUT_DIR", help="the release is written to OUT_DIR/NAME")
    release.add_argument("--license", help="the dataset's license, an SPDX id (required)")
    release.add_argument("--name", help="the release's name (default: rollout-dataset)")
    release.add_argument("--round", dest="rounds", action="append", metavar="KEY", help="a round to include (repeatable)")
    release.add_argument("--config", type=Path, metavar="FILE", help="a JSON file of release settings")
    release.add_argument(
        "--allow", type=Path, metavar="FILE", help="finding hashes a person checked and allows (one a line)"
    )


def _filter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-reward", type=float, default=0.0, help="SFT keeps rewards above it (default 0)")
    parser.add_argument("--roles", nargs="+", default=None, metavar="ROLE", help="roles to include (default: all)")
    parser.add_argument("--per-instance-cap", type=int, default=3, metavar="K", help="SFT rows per (role, instance)")
    parser.add_argument("--margin", type=float, default=0.05, help="least reward difference of a pair (default 0.05)")
    parser.add_argument(
        "--no-normalize-identifiers", dest="normalize_identifiers", action="store_false",
        help="keep each line's working folder, worker name, run folder and session ids as they are",
    )  # fmt: skip
    parser.add_argument(
        "--group-by", choices=("prompt", "instance"), default="prompt",
        help="pairs and groups join lines of one instance with the same prompt (default), or all of them",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=int, metavar="N", help="drop lines longer than N tokens (too_long)")
    parser.add_argument("--tokenizer", metavar="TOKENIZER.json", help="count tokens with this tokenizer (default: estimate)")


def _bad_round_names(args: argparse.Namespace, names: list[str]) -> int | None:
    """Exit status 2 with the usage line when a --round is not a plain round name (a folder name
    inside the ledger root, never a path such as ../other); None when every name is one."""
    from rollout_assets.round_keys import round_key_problem

    for name in names:
        problem = round_key_problem(name)
        if problem is not None:
            args.command_parser.print_usage(sys.stderr)
            why = problem.split(": ", 1)[-1]
            print(f"rollout-assets: error: --round {name!r} is not a round's name: {why}", file=sys.stderr)
            return 2
    return None


def _not_written(what: str, error: OSError) -> int:
    """What an OSError left unwritten, in one line (the system's words name the file)."""
    print(f"rollout-assets: error: {what} not written: {error}", file=sys.stderr)
    return 1


def run_export(args: argparse.Namespace) -> int:
    from rollout_assets.ledger.snapshot import LedgerSnapshot
    from rollout_assets.training import TrainingFilter, export_training
    from rollout_assets.training.verify import verify_training

    if (status := _bad_round_names(args, [args.round_key] if args.round_key is not None else [])) is not None:
        return status
    ledger = Path(args.ledger)
    settings = TrainingFilter(
        min_reward=args.min_reward,
        per_instance_cap=args.per_instance_cap,
        margin=args.margin,
        normalize_identifiers=args.normalize_identifiers,
        group_by=args.group_by,
        max_tokens=args.max_tokens,
        tokenizer=args.tokenizer,
        **({"roles": tuple(args.roles)} if args.roles else {}),
    )
    round_key = args.round_key or Path(os.path.realpath(ledger)).parent.name
    try:
        # One open file for the rows and the checks, and unchanged at the end: never two ledgers.
        with LedgerSnapshot(ledger) as snapshot:
            export = export_training(snapshot, Path(args.out_dir), round_key, settings)
            for name, report in export.reports.items():
                drops = ", ".join(f"{reason} {count}" for reason, count in report.drops.items()) or "none"
                print(f"{name}: {report.rows} rows from {report.lines_in_rows} of {report.lines} lines (dropped: {drops})")
            print(f"training files → {export.files.folder}")
            verdicts = verify_training(snapshot, export.files, settings.margin, settings.to_json())
            snapshot.check_unchanged()
    except BrokenPipeError:
        raise
    except OSError as error:
        return _not_written(f"training files {args.out_dir}", error)
    return _report_verdicts(verdicts)


def _report_verdicts(verdicts: dict[str, Any]) -> int:
    failed = {name: verdict for name, verdict in verdicts.items() if not verdict.passed}
    for name, verdict in failed.items():
        print(f"rollout-assets: check {name} FAILED: {'; '.join(verdict.problems)}", file=sys.stderr)
    return 1 if failed else 0


def _ledgers(ledger_root: Path, keys: list[str] | None) -> list[Path]:
    """The ledgers of the rounds asked for (every round folder of the root that has one). One that
    is there but no regular file (a FIFO) is kept, for the export to refuse in one sentence."""
    from rollout_assets.release import ReleaseError

    if keys:
        ledgers = [ledger_root / key / LEDGER_FILE for key in keys]
        for ledger in ledgers:
            if not os.path.lexists(ledger):
                raise ReleaseError(f"round {ledger.parent.name}: {ledger} does not exist")
        return ledgers
    ledgers = sorted(path for path in ledger_root.glob(f"*/{LEDGER_FILE}") if os.path.lexists(path))
    if not ledgers:
        raise ReleaseError(f"{ledger_root}: no <round>/{LEDGER_FILE} in it")
    return ledgers


def _round_inputs(ledgers: list[Path], scratch: Path) -> list[Any]:
    from rollout_assets.release import RoundInput
    from rollout_assets.training import export_training

    inputs = []
    for ledger in ledgers:
        key = ledger.parent.name
        files = export_training(ledger, scratch / key, key).files
        inputs.append(RoundInput(key, ledger, files))
    return inputs


def run_release(args: argparse.Namespace) -> int:
    from rollout_assets.release import ReleaseConfig, build_release, load_config_file
    from rollout_assets.release.allowlist import read_allowlist
    from rollout_assets.release.config import MissingLicense
    from rollout_assets.release.target import refuse_among_ledgers, refuse_unless_replaceable

    if (status := _bad_round_names(args, args.rounds or [])) is not None:
        return status
    overrides = {"license": args.license, "name": args.name}
    try:
        if args.config is not None:
            config = load_config_file(args.config, **overrides)
        else:
            config = ReleaseConfig(license=args.license or "", **({"name": args.name} if args.name else {}))
        if args.allow is not None:
            config = dataclasses.replace(config, allowed=read_allowlist(args.allow))
    except MissingLicense as error:
        args.command_parser.print_usage(sys.stderr)
        print(f"rollout-assets: error: {error}", file=sys.stderr)
        return 2
    ledger_root, release = Path(args.ledger_root), Path(args.out_dir) / config.name
    ledgers = _ledgers(ledger_root, args.rounds)
    # Before any work; build_release asks again under the release's lock, just before the swap.
    refuse_among_ledgers(release, ledger_root, [ledger.parent for ledger in ledgers])
    refuse_unless_replaceable(release)
    try:
        with tempfile.TemporaryDirectory(prefix="rollout-release-") as scratch:
            manifest = build_release(_round_inputs(ledgers, Path(scratch)), release, config, verify=True)
    except BrokenPipeError:
        raise
    except OSError as error:
        return _not_written(f"release {release}", error)
    for kind, splits in manifest["rows"].items():
        print(f"{kind}: train {splits['train']}, test {splits['test']}")
    scrubbed = ", ".join(f"{rule} {count}" for rule, count in manifest["scrubbed"].items()) or "nothing"
    print(f"scrubbed: {scrubbed}")
    print(f"release → {release}")
    return 0
