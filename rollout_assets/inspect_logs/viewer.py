"""Opening ledgers in Inspect's log viewer: which ledgers a path names, where their logs are,
and the `inspect view` command that shows them, bound to 127.0.0.1.

A path is a ledger file, a round's folder under the ledger root (holding `rollout-ledger.jsonl`),
or a folder of round folders (the ledger root itself: every round at once, listed by folder).
"""

from __future__ import annotations

import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from rollout_assets.errors import RoundError
from rollout_assets.inspect_logs.folder import logs_folder_for
from rollout_assets.stages.layout import RoundOutputs

HOST = "127.0.0.1"
DEFAULT_PORT = 7575  # inspect view's own default


class NothingToView(RoundError, ValueError):
    """A path that names no ledger."""


@dataclass(frozen=True)
class ViewTarget:
    """The ledgers a path names and the folder the viewer lists (with its subfolders)."""

    ledgers: list[Path]
    log_dir: Path


def view_target(path: Path) -> ViewTarget:
    """The ledgers `path` names; NothingToView when it names none."""
    if path.is_file():
        return ViewTarget([path], logs_folder_for(path))
    if path.is_dir():
        round_outputs = RoundOutputs(path)
        if round_outputs.ledger.is_file():
            return ViewTarget([round_outputs.ledger], round_outputs.inspect_logs)
        ledger_name = round_outputs.ledger.name
        ledgers = sorted(ledger for ledger in path.glob(f"*/{ledger_name}") if ledger.is_file())
        if ledgers:
            return ViewTarget(ledgers, path)
        raise NothingToView(
            f"{path} holds no ledger: give a ledger file, a round's folder (holding {ledger_name}) or a folder "
            "of round folders"
        )
    raise NothingToView(f"{path} does not exist: give a ledger file, a round's folder or a folder of round folders")


def view_command(log_dir: Path, port: int = DEFAULT_PORT) -> list[str]:
    """`inspect view` on `log_dir` (which it lists with its subfolders), run by this interpreter,
    so by the Inspect installed with it."""
    return [sys.executable, "-m", "inspect_ai", "view", "--log-dir", str(log_dir), "--host", HOST, "--port", str(port)]


def shown_view_command(path: Path) -> str:
    """The command a person types to open the logs of `path` (a ledger or a round's folder)."""
    return f"rollout-assets view {shlex.quote(str(path))}"


def port_taken(port: int) -> bool:
    """True when something listens on 127.0.0.1:`port` already (the viewer could not bind it)."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((HOST, port)) == 0
