"""The command line's `inspect-logs` and `view`: a ledger as Inspect eval logs, and the viewer
on them (docs/viewing.md).

    rollout-assets inspect-logs LEDGER OUT_DIR [--workers N]
    rollout-assets view LEDGER_OR_ROUND_FOLDER [--port P]

`inspect-logs` only writes. `view` writes each ledger's logs when they are missing or stale,
then replaces itself with `inspect view` bound to 127.0.0.1 (Ctrl-C stops it). Errors are one
line and exit 1 (a ledger that fails to read names `file:line`); bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rollout_assets.cli_args import positive_int


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to 65535, not {text!r}")
    return port


def add_view_commands(commands: Any) -> None:
    """Add `inspect-logs` and `view` to the command line's subcommands (importing nothing heavy:
    the parser is built for every command)."""
    logs = commands.add_parser("inspect-logs", help="write a ledger as Inspect eval logs into OUT_DIR")
    logs.add_argument("ledger", metavar="LEDGER", help="a ledger file (tangle.rollout.v1 JSONL)")
    logs.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write the logs into (replaced whole)")
    logs.add_argument(
        "--workers", type=positive_int, default=None, metavar="N", help="processes (default: every core); same logs for any N"
    )
    view = commands.add_parser(
        "view", help="open ledgers in Inspect's log viewer on 127.0.0.1, writing their logs when missing or stale"
    )
    view.add_argument(
        "path",
        metavar="LEDGER_OR_ROUND_FOLDER",
        help="a ledger file, a round's folder under the ledger root, or a folder of round folders",
    )
    view.add_argument("--port", type=_port, default=None, help="the viewer's port (default: 7575, inspect view's own)")


def _not_written(what: str, error: OSError) -> int:
    print(f"rollout-assets: error: {what} not written: {error}", file=sys.stderr)
    return 1


def _print_logs(report: Any) -> None:
    for log in report.logs:
        mean = "" if log.mean_reward is None else f", mean reward {log.mean_reward:.3f}"
        print(
            f"  {log.file_name}: {log.samples} samples ({log.with_messages} with a transcript, {log.gaps} gap lines; "
            f"{log.scored} scored{mean})"
        )


def run_inspect_logs(args: argparse.Namespace) -> int:
    from rollout_assets.inspect_logs import write_inspect_logs
    from rollout_assets.inspect_logs.viewer import HOST

    try:
        report = write_inspect_logs(Path(args.ledger), Path(args.out_dir), workers=args.workers)
    except BrokenPipeError:
        raise
    except OSError as error:
        return _not_written(f"Inspect logs {args.out_dir}", error)
    _print_logs(report)
    print(f"Inspect logs → {args.out_dir} ({report.lines} samples in {len(report.logs)} logs)")
    print(f"open them: inspect view --log-dir {args.out_dir} --host {HOST}")
    return 0


def run_view(args: argparse.Namespace) -> int:
    from rollout_assets.inspect_logs import logs_folder_for, stale_reason, write_inspect_logs
    from rollout_assets.inspect_logs.viewer import DEFAULT_PORT, HOST, port_taken, view_command, view_target

    target = view_target(Path(args.path))
    port = args.port or DEFAULT_PORT
    if port_taken(port):
        print(f"rollout-assets: error: port {port} on {HOST} is taken: give another with --port", file=sys.stderr)
        return 1
    for ledger in target.ledgers:
        folder = logs_folder_for(ledger)
        reason = stale_reason(ledger, folder)
        if reason is None:
            print(f"Inspect logs of {ledger}: up to date in {folder}")
            continue
        print(f"Inspect logs of {ledger}: writing them into {folder} ({reason})", flush=True)
        try:
            report = write_inspect_logs(ledger, folder)
        except BrokenPipeError:
            raise
        except OSError as error:
            return _not_written(f"Inspect logs {folder}", error)
        _print_logs(report)
    command = view_command(target.log_dir, port)
    print(f"Inspect log viewer on http://{HOST}:{port} showing {target.log_dir} (Ctrl-C stops it)", flush=True)
    sys.stderr.flush()
    os.execv(command[0], command)
    return 0  # not reached: execv replaces this process
