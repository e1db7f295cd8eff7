"""Where a ledger's logs go, which folder may be replaced by them, and the record of the ledger
they were written from (which tells logs that are stale).

A round's ledger `<round>/rollout-ledger.jsonl` has its logs in `<round>/inspect-logs/`; any
other ledger file `L.jsonl` in `L.inspect-logs/` beside it. The folder holds the `.eval` logs
and `built-from.json`: the ledger's path and identity (device, inode, size, modification time),
this writer's layout version and each log's counts. The logs are stale when that record is
missing or unreadable, names another ledger file or version, or a log it lists is gone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.errors import RoundError
from rollout_assets.folder_swap import OutputFolder
from rollout_assets.folder_swap import refuse_unless_replaceable as check_replaceable
from rollout_assets.inspect_logs.tally import LogTally
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.paths import real_path
from rollout_assets.stages.layout import RoundOutputs

RECORD_FILE = "built-from.json"
LOG_SUFFIX = ".eval"
# Raised whenever what a ledger line becomes in the logs changes: older logs are then stale.
LAYOUT_VERSION = 1


class InspectLogsRefused(RoundError, ValueError):
    """A folder the logs may not replace (it holds other files, or the ledger itself)."""


def logs_folder_for(ledger: Path) -> Path:
    """Where the logs of `ledger` go: `inspect-logs/` beside a round's ledger, else
    `<ledger stem>.inspect-logs/` beside the file."""
    round_outputs = RoundOutputs(ledger.parent)
    if ledger.name == round_outputs.ledger.name:
        return round_outputs.inspect_logs
    return ledger.parent / f"{ledger.stem}.inspect-logs"


def _is_own(name: str) -> bool:
    """A log or the record."""
    return name == RECORD_FILE or (name.endswith(LOG_SUFFIX) and not name.startswith("."))


_LOGS = OutputFolder(
    outputs="the Inspect logs",
    another="folder",
    foreign="that are no Inspect logs of a ledger",
    earlier="one these logs were written into",
    refused=InspectLogsRefused,
)


def refuse_unless_replaceable(folder: Path, ledger: Path) -> None:
    """InspectLogsRefused unless `folder` may be replaced by the logs of `ledger`: the ledger is
    not inside it, and it is missing or a folder holding only logs and their record."""
    check_replaceable(folder, ledger, _LOGS, _is_own)


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns]


@dataclass(frozen=True)
class LogsRecord:
    ledger: str
    identity: list[int]
    logs: list[dict[str, Any]]
    layout: int = LAYOUT_VERSION

    @classmethod
    def of(cls, snapshot: LedgerSnapshot, tallies: list[LogTally]) -> LogsRecord:
        return cls(
            ledger=str(real_path(snapshot.path)),
            identity=_identity(os.fstat(snapshot.file.fileno())),
            logs=[tally.to_json() for tally in tallies],
        )

    @property
    def ledger_mtime_ns(self) -> int:
        return self.identity[3]

    def to_json(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "identity": self.identity, "layout": self.layout, "logs": self.logs}


def list_in_ledger_order(folder: Path, file_names: list[str], ledger_mtime_ns: int) -> None:
    """Date the logs so that the viewer, which lists the newest first, lists them in ledger order:
    the first log at the ledger's own time, each next one a millisecond earlier."""
    for index, name in enumerate(file_names):
        moment = ledger_mtime_ns - index * 1_000_000
        os.utime(folder / name, ns=(moment, moment))


def write_record(folder: Path, record: LogsRecord) -> None:
    (folder / RECORD_FILE).write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")


def read_record(folder: Path) -> LogsRecord | None:
    """The record of the logs in `folder`, or None when there is none that reads."""
    try:
        data = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
        return LogsRecord(ledger=data["ledger"], identity=data["identity"], logs=data["logs"], layout=data["layout"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stale_reason(ledger: Path, folder: Path) -> str | None:
    """Why the logs in `folder` do not show `ledger` as it is now, or None when they do."""
    record = read_record(folder)
    if record is None:
        return "no logs written yet" if not folder.exists() else f"{folder / RECORD_FILE} is missing or unreadable"
    if record.layout != LAYOUT_VERSION:
        return "they were written by another version of this writer"
    if record.ledger != str(real_path(ledger)):
        return f"they were written from another ledger ({record.ledger})"
    try:
        now = _identity(os.stat(ledger))
    except OSError as error:
        return f"the ledger cannot be read ({error.strerror})"
    if now != record.identity:
        return "the ledger changed since they were written"
    missing = [log["file"] for log in record.logs if not (folder / log["file"]).is_file()]
    if missing:
        return f"{missing[0]} is missing"
    return None
