"""The `rollout-assets` command line: the core without Dagster.

    rollout-assets backfill OUTDIR OUT.jsonl [--opencode-db PATH] [--claude-projects DIR]
                            [--progress auto|always|never] [--workers N]
    rollout-assets manifest OUTDIR
    rollout-assets schema
    rollout-assets demo ROOT
    rollout-assets materialize [ROUND ...]
    rollout-assets export LEDGER.jsonl OUT_DIR [filter options]
    rollout-assets release LEDGER_ROOT OUT_DIR --license ID [--name NAME] [--round KEY ...] [--config FILE]
    rollout-assets inspect-logs LEDGER OUT_DIR [--workers N]
    rollout-assets view LEDGER_OR_ROUND_FOLDER [--port P]

`backfill` keeps the seed's contract: the stats JSON (2-space indent) on stdout, then
`rollout ledger → OUT (N lines)`. Corrupt evidence exits 1 with one line naming the file
and the problem, and writes no ledger (an existing file at OUT stays as it was). A store
that cannot be read, or a round with nothing in it, is not an error (the ledger says so in
gap lines, or is empty), but a warning on stderr says so.

OUT is written by a rename onto it. A symlink at OUT is written through: the ledger is renamed
onto the file it leads to (created when the link dangles), and the link stays, so
`backfill ... /dev/stdout > ledger.jsonl` fills ledger.jsonl and never replaces /dev/stdout. An OUT that is a FIFO or a character device (`/dev/stdout`,
`/dev/null`, a named pipe), or a symlink to one, is written into instead, never replaced: see
`_StreamedLedger`. When that OUT is stdout itself, the stats and the ledger line go to stderr so
the ledger stays alone in the pipe. A block device or a socket at OUT is refused (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

# Only what parsing the arguments needs is imported here. The backfill and the line schema
# (pydantic: most of the start-up time) are imported by the commands, inside main's handling
# of Ctrl-C, so an interrupt right after Enter is one line too, not a traceback.
from rollout_assets.cli_args import positive_int
from rollout_assets.datasets_cli import add_dataset_commands, run_export, run_release
from rollout_assets.io import to_indented_json
from rollout_assets.paths import STREAM_KINDS, is_inside, special_file_kind, sqlite_files
from rollout_assets.sources.claude import DEFAULT_CLAUDE_PROJECTS_DIR, unreadable_folder_reason
from rollout_assets.sources.opencode import DEFAULT_OPENCODE_DB, OpencodeStoreChanged
from rollout_assets.sources.round import build_manifest, resolve_out_dir
from rollout_assets.view_cli import add_view_commands, run_inspect_logs, run_view

if TYPE_CHECKING:
    from rollout_assets.backfill.stats import BackfillStats


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout-assets", description="Turn improvement-loop rounds into tangle.rollout.v1 ledgers."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    backfill = commands.add_parser("backfill", help="write the rollout ledger of one round outDir")
    backfill.add_argument("out_dir", metavar="OUTDIR", help="the round's outDir")
    backfill.add_argument("ledger_path", metavar="OUT.jsonl", help="where to write the ledger")
    backfill.add_argument(
        "--opencode-db",
        default=DEFAULT_OPENCODE_DB,
        metavar="PATH",
        help="the opencode SQLite store of the worker sessions (default: %(default)s)",
    )
    backfill.add_argument(
        "--claude-projects",
        default=DEFAULT_CLAUDE_PROJECTS_DIR,
        metavar="DIR",
        help="the Claude Code projects folder of the proposer transcripts (default: %(default)s)",
    )
    backfill.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress bar on stderr (auto: only on a terminal)",
    )
    backfill.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="worker processes (default: every core); the ledger is the same for any N",
    )

    manifest = commands.add_parser("manifest", help="print the manifest JSON of one round outDir")
    manifest.add_argument("out_dir", metavar="OUTDIR")

    commands.add_parser("schema", help="print the JSON Schema of a tangle.rollout.v1 line")

    demo = commands.add_parser("demo", help="write demo rounds and matching harness stores into ROOT")
    demo.add_argument("root", metavar="ROOT")

    materialize = commands.add_parser(
        "materialize",
        help="materialize and check rounds through Dagster on the instance at $DAGSTER_HOME",
    )
    materialize.add_argument(
        "rounds", nargs="*", metavar="ROUND", help="round names (default: every round found)"
    )
    add_dataset_commands(commands)
    add_view_commands(commands)
    for command_parser in commands.choices.values():
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def _check_ledger_path(ledger_path: Path, out_dir: Path, opencode_db: str, claude_projects_dir: str) -> None:
    """Raise _UsageError, before any work, unless OUT is a place the ledger may be written.

    Inputs are read-only: nothing is ever written inside the round, over the opencode store
    (or the files SQLite keeps beside it) or inside the Claude projects folder, whatever
    symlinks lead there. And OUT must be a file path the writer can create: not a directory,
    not under a file; or a FIFO or character device to write into, not a block device or socket.
    """
    real_out = Path(os.path.realpath(ledger_path))
    real_store = os.path.realpath(opencode_db)
    store_files = sqlite_files(opencode_db)
    store_file = f"the opencode database {opencode_db}"
    if real_out != Path(real_store):
        store_file = f"{real_out}, a file SQLite keeps beside {store_file}"
    refusals = [
        (is_inside(real_out, out_dir), f"refusing to write the ledger OUT {ledger_path} inside the round outDir {out_dir}"),
        (real_out in store_files, f"refusing to write the ledger OUT {ledger_path} over {store_file}"),
        (
            is_inside(real_out, claude_projects_dir),
            f"refusing to write the ledger OUT {ledger_path} inside the Claude projects folder {claude_projects_dir}",
        ),
    ]
    for refused, message in refusals:
        if refused:
            raise _UsageError(message)
    if os.path.isdir(ledger_path):
        raise _UsageError(f"OUT {ledger_path} is a directory: give the path of the ledger file to write")
    kind = special_file_kind(ledger_path)
    if kind is not None and kind not in STREAM_KINDS:
        raise _UsageError(f"OUT {ledger_path} is {kind}: give a file path, a FIFO or a character device")
    # The writer creates missing folders; the nearest entry that exists must be a folder.
    for ancestor in ledger_path.absolute().parents:
        if os.path.lexists(ancestor):
            if not os.path.isdir(ancestor):
                raise _UsageError(f"cannot write OUT {ledger_path}: its parent {ancestor} is not a directory")
            break


class _ProgressBar:
    """A one-line progress bar over the round's cells on stderr."""

    width = 30

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} cells")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _file_identity(path: Path) -> tuple[int, ...] | None:
    """What tells a file replaced by the writer's rename (a new inode) from the one before."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


# Bytes per read and write when the staged ledger is copied into a FIFO or character device.
_COPY_CHUNK = 1 << 20


class _StreamedLedger:
    """OUT is a FIFO or a character device (or a symlink to one): the ledger goes into it.

    The writer's rename would replace the node itself: /dev/null would become a file, and the
    reader of a FIFO would wait for ever on a node no longer in the folder. So the backfill
    writes the ledger, every line validated, into a private folder of the system's temporary
    folder ($TMPDIR), and it is copied into OUT once complete: a reader gets the whole ledger,
    or nothing when the backfill fails. (Writing the lines into OUT as they come would spare the
    copy, but a failed backfill would leave the reader a ledger cut at a line boundary, which
    looks complete.)
    """

    def __init__(self, node: Path, kind: str) -> None:
        self.node, self.kind = node, kind
        self._folder = tempfile.TemporaryDirectory(prefix="rollout-assets-")
        self.staged = Path(self._folder.name) / "ledger.jsonl"
        self.opened = False  # from here on, bytes may have reached OUT
        self.copied = False

    def __enter__(self) -> Self:
        return self

    def copy_into_node(self) -> None:
        """Copy the finished ledger into OUT; a FIFO waits here until a reader opens it."""
        descriptor = os.open(self.node, os.O_WRONLY)
        self.opened = True
        with os.fdopen(descriptor, "wb") as node, open(self.staged, "rb") as ledger:
            shutil.copyfileobj(ledger, node, _COPY_CHUNK)
        self.copied = True

    def is_stdout(self) -> bool:
        """True when OUT is this process's stdout (`/dev/stdout`, or the FIFO stdout goes into)."""
        try:
            node, stdout = os.stat(self.node), os.fstat(sys.stdout.fileno())
        except (OSError, ValueError):
            return False
        return (node.st_dev, node.st_ino) == (stdout.st_dev, stdout.st_ino)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if not self.opened and self.kind == "a FIFO":
                # A reader already waiting on the FIFO would wait for ever for this failed writer:
                # opening and closing it gives the reader end of file. Only a FIFO: opening some
                # character devices does something (a watchdog starts its timer).
                with contextlib.suppress(OSError):  # ENXIO: no reader is waiting
                    os.close(os.open(self.node, os.O_WRONLY | os.O_NONBLOCK))
        finally:
            self._folder.cleanup()


def run_backfill(args: argparse.Namespace) -> int:
    out_dir = resolve_out_dir(args.out_dir)
    ledger_path = Path(args.ledger_path)
    _check_ledger_path(ledger_path, out_dir, args.opencode_db, args.claude_projects)
    kind = special_file_kind(ledger_path)  # a FIFO or a character device, if anything (checked above)
    if kind is None:
        # A link is written through, never replaced: the rename lands on the file it leads to.
        target = Path(os.path.realpath(ledger_path)) if os.path.islink(ledger_path) else ledger_path
        return _backfill(args, out_dir, target, stream=None)
    with _StreamedLedger(ledger_path, kind) as stream:
        return _backfill(args, out_dir, ledger_path, stream)


def _backfill(
    args: argparse.Namespace, out_dir: Path, ledger_path: Path, stream: _StreamedLedger | None
) -> int:
    from rollout_assets.backfill.parallel import backfill_to_file

    show_progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    before = _file_identity(ledger_path)
    try:
        _, stats = backfill_to_file(
            out_dir,
            ledger_path if stream is None else stream.staged,
            opencode_db=args.opencode_db,
            claude_projects_dir=args.claude_projects,
            workers=args.workers,
            on_cells_done=_ProgressBar() if show_progress else None,
        )
        if stream is not None:
            stream.copy_into_node()
        # The ledger is in place; what is left is saying so. Ctrl-C has nothing to stop any
        # more, and an interrupt now (or while Python shuts down) would end the finished backfill
        # with status 130, or with "the ledger was not written" printed after all.
        _ignore_interrupts()
        for warning in _backfill_warnings(args, stats):
            print(f"rollout-assets: warning: {warning}", file=sys.stderr)
    except BrokenPipeError:
        raise
    except OSError as error:
        # What the checks above cannot foresee (a name too long, a full disk, OUT turned into
        # a folder meanwhile). The writer is atomic: whatever was at OUT is still there, unless
        # the copy into a FIFO or device had begun.
        written = "not written in full" if stream is not None and stream.opened else "not written"
        print(f"rollout-assets: error: ledger {args.ledger_path} {written}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rollout-assets: {_interrupted(args, ledger_path, before, stream)}", file=sys.stderr)
        return 130
    report = sys.stderr if stream is not None and stream.is_stdout() else sys.stdout
    print(to_indented_json(stats.to_json()), file=report)
    print(f"rollout ledger → {args.ledger_path} ({stats.lines} lines)", file=report)
    return 0


def _interrupted(
    args: argparse.Namespace,
    ledger_path: Path,
    before: tuple[int, ...] | None,
    stream: _StreamedLedger | None,
) -> str:
    """What became of OUT after Ctrl-C. The writer has removed its temporary files on the way
    out; whether OUT changed depends on whether the interrupt came before or after the rename
    (or the copy into a FIFO or device)."""
    written = stream.copied if stream is not None else _file_identity(ledger_path) != before
    if written:
        return f"interrupted after the ledger was written: OUT {args.ledger_path} holds the new ledger"
    if stream is not None and stream.opened:
        return (
            f"interrupted while the ledger was being copied into OUT {args.ledger_path} ({stream.kind}): "
            "it got part of it at most"
        )
    return "interrupted; the ledger was not written, OUT is as it was"


def _ignore_interrupts() -> None:
    """Ignore SIGINT from here on (main() restores it when it was called from other code)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _backfill_warnings(args: argparse.Namespace, stats: BackfillStats) -> list[str]:
    """What a ledger written without an error may still be missing, said on stderr so a
    mistyped path is not found only in the stats (stdout stays the seed's contract)."""
    warnings = []
    if not stats.opencode_db_available and stats.by_role.get("worker"):
        warnings.append(
            f"opencode database {args.opencode_db} could not be read (missing, not a file, or not an opencode "
            "store): every worker line is a gap line; give the store with --opencode-db"
        )
    if not os.path.isdir(args.claude_projects) and stats.by_role.get("proposer"):
        warnings.append(
            f"Claude projects folder {args.claude_projects} is not a directory: every proposer line is a gap "
            "line; give the folder with --claude-projects"
        )
    elif (why := unreadable_folder_reason(args.claude_projects)) and stats.by_role.get("proposer"):
        warnings.append(
            f"Claude projects folder {args.claude_projects} cannot be read ({why}): every proposer line is a "
            "gap line; run as a user who may read it"
        )
    if stats.lines == 0:
        warnings.append(f"{args.out_dir} holds no campaign cells and no proposer shots: the ledger is empty")
    return warnings


def run_manifest(args: argparse.Namespace) -> int:
    print(to_indented_json(build_manifest(args.out_dir).to_json()))
    return 0


def run_schema(_: argparse.Namespace) -> int:
    from rollout_assets.ledger import rollout_json_schema

    print(json.dumps(rollout_json_schema(), indent=2))
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from rollout_assets.demo import write_demo

    try:
        layout = write_demo(args.root)
    except ValueError as error:
        # write_demo checks everything before writing anything (an existing round, a store of
        # the other schema): a refusal is a one-line error, not a crash.
        print(f"rollout-assets: error: {error}", file=sys.stderr)
        return 1
    print(f"demo rounds      → {layout.rounds_root} ({len(layout.rounds)} rounds)")
    for round_dir in layout.rounds:
        print(f"  {round_dir.name}")
    print(f"opencode store   → {layout.opencode_db}")
    print(f"claude projects  → {layout.claude_projects_dir}")
    return 0


def run_materialize(args: argparse.Namespace) -> int:
    from rollout_assets.defs.resources import ConfigurationError

    # A setting the definitions refuse (ROLLOUT_SENSOR_INTERVAL_SECONDS=2m, say) is the user's
    # to fix, not a bug: its one sentence, without the traceback of the import that read it.
    try:
        from rollout_assets.materialize import materialize_rounds

        return materialize_rounds(args.rounds)
    except ConfigurationError as error:
        print(f"rollout-assets: error: {error}", file=sys.stderr)
        return 2


_COMMANDS = {
    "backfill": run_backfill,
    "manifest": run_manifest,
    "schema": run_schema,
    "demo": run_demo,
    "materialize": run_materialize,
    "export": run_export,
    "release": run_release,
    "inspect-logs": run_inspect_logs,
    "view": run_view,
}


def _reported_errors() -> tuple[type[Exception], ...]:
    """The errors that exit 1 with their one-line message (imported only when one is raised)."""
    from rollout_assets.errors import RoundError
    from rollout_assets.ledger import LedgerValidationError

    return (RoundError, LedgerValidationError, OpencodeStoreChanged, FileExistsError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 with a usage line on bad arguments
    sigint = signal.getsignal(signal.SIGINT)
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as error:
        args.command_parser.print_usage(sys.stderr)  # as argparse's own errors do
        print(f"rollout-assets: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback. A backfill that reached its writer says itself
        # what became of OUT (run_backfill); one interrupted before has not touched it.
        done = "; the ledger was not written, OUT is as it was" if args.command == "backfill" else ""
        print(f"rollout-assets: interrupted{done}", file=sys.stderr)
        return 130
    except Exception as error:
        if not isinstance(error, _reported_errors()):
            raise
        print(f"rollout-assets: error: {error}", file=sys.stderr)
        return 1
    finally:
        # Called from other code (argv given), not as the command: its Ctrl-C stays as it was.
        # As the command, a finished backfill keeps ignoring it until the process has exited.
        if argv is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, sigint)
        if argv is None:
            # The process exits next, and Python's shut-down would walk every object still
            # alive for cycles several times: 0.6 s after `materialize` (Dagster's objects).
            # Frozen objects are not walked; their memory goes with the process all the same.
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
