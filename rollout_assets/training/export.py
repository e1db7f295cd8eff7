"""Writing a round's training data: one scan of the ledger, then each dataset's rows, its
accounting (the fate of every ledger line) and the report.

The ledger is read from one open file for both passes, and the files are written into a folder
beside their place that replaces it whole (rollout_assets/folder_swap.py): a ledger replaced
while it is read, a failure or Ctrl-C leave the earlier training files as they were."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout_assets.folder_swap import built_in_place
from rollout_assets.ledger import AtomicJsonlWriter
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.training.files import DATASETS, TrainingFiles
from rollout_assets.training.filter import DROP_REASONS, TrainingFilter
from rollout_assets.training.out_dir import export_folder, refuse_unless_replaceable
from rollout_assets.training.rows import RowBuilder
from rollout_assets.training.keys import SpilledKeys
from rollout_assets.training.scan import TrainingInputError, scan_ledger
from rollout_assets.training.select import Selection, select_groups, select_pairs, select_sft
from rollout_assets.training.write import write_rows

_SELECTORS = {"sft_rows": select_sft, "preference_pairs": select_pairs, "grpo_groups": select_groups}


@dataclass
class DatasetReport:
    """What one dataset took from the ledger: rows written, lines used, drops by reason."""

    dataset: str
    lines: int
    rows: int
    lines_in_rows: int
    drops: dict[str, int] = field(default_factory=dict)
    tokens: int | None = None  # SFT only: the sum of the rows' estimates

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "lines": self.lines,
            "rows": self.rows,
            "lines_in_rows": self.lines_in_rows,
            "dropped": sum(self.drops.values()),
            "drops": self.drops,
            **({"tokens": self.tokens} if self.tokens is not None else {}),
        }


@dataclass
class TrainingExport:
    round: str
    settings: TrainingFilter
    files: TrainingFiles
    reports: dict[str, DatasetReport]
    ledger_sha256: str = ""  # of the bytes the rows were built from

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "ledger": {"sha256": self.ledger_sha256},
            "filter": self.settings.to_json(),
            "datasets": {name: report.to_json() for name, report in self.reports.items()},
        }


def export_training(
    ledger: Path | LedgerSnapshot, folder: Path, round_key: str, settings: TrainingFilter | None = None
) -> TrainingExport:
    """Write the SFT rows, preference pairs and GRPO groups of the ledger at `ledger` (a path,
    or a snapshot the caller keeps open for more passes) into `folder`, with each dataset's
    accounting and the report (JSON and Markdown). `folder` is replaced whole, and only when it
    holds nothing but training files (TrainingOutputRefused otherwise)."""
    settings = settings or TrainingFilter()
    with contextlib.ExitStack() as stack:
        snapshot = ledger if isinstance(ledger, LedgerSnapshot) else stack.enter_context(LedgerSnapshot(ledger))
        target = export_folder(folder)
        with built_in_place(target, lambda place: refuse_unless_replaceable(place, snapshot.path)) as built:
            export = _export(snapshot, TrainingFiles(built), round_key, settings)
            snapshot.check_unchanged()
    export.files = TrainingFiles(target)
    return export


def _export(snapshot: LedgerSnapshot, files: TrainingFiles, round_key: str, settings: TrainingFilter) -> TrainingExport:
    rows = RowBuilder(round_key, settings)  # loads a tokenizer before the scan needs it
    scan = scan_ledger(snapshot, settings)
    with scan.keys:  # on disk (keys.py), removed when the export is written or fails
        selections = {dataset: _SELECTORS[dataset](scan.keys, settings) for dataset in DATASETS}
        sft_tokens = write_rows(selections, scan.keys, snapshot, files, rows)
        reports = {dataset: _account(dataset, selections[dataset], scan.keys, files) for dataset in DATASETS}
    reports["sft_rows"].tokens = sft_tokens
    export = TrainingExport(round_key, settings, files, reports, scan.sha256)
    write_report(export)
    return export


def _account(dataset: str, selection: Selection, keys: SpilledKeys, files: TrainingFiles) -> DatasetReport:
    """The fate of every ledger line in `dataset`, written to its accounting; the report's counts."""
    report = DatasetReport(dataset, lines=len(keys), rows=len(selection.rows), lines_in_rows=0)
    drops: Counter[str] = Counter()
    with AtomicJsonlWriter(files.accounting(dataset)) as accounting:
        for index, rollout_id in keys.rollout_ids():
            fate = selection.outcome[index]
            accounting.write({"rollout_id": rollout_id, "line": index + 1, "fate": fate})
            if fate == "row":
                report.lines_in_rows += 1
            else:
                drops[fate] += 1
    report.drops = {reason: drops[reason] for reason in DROP_REASONS if drops[reason]}
    return report


def write_report(export: TrainingExport) -> None:
    """The report as JSON (the numbers) and as a Markdown table (rows and drops per dataset)."""
    files = export.files
    files.folder.mkdir(parents=True, exist_ok=True)
    _replace_text(files.report_json, json.dumps(export.to_json(), indent=2) + "\n")
    _replace_text(files.report_markdown, report_markdown(export))


def _replace_text(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def report_markdown(export: TrainingExport) -> str:
    reasons = [r for r in DROP_REASONS if any(r in rep.drops for rep in export.reports.values())]
    header = "| dataset | lines | rows | lines in rows | " + " | ".join(reasons) + " |"
    rule = "|---" * (4 + len(reasons)) + "|"
    body = [
        f"| {name} | {rep.lines} | {rep.rows} | {rep.lines_in_rows} | "
        + " | ".join(str(rep.drops.get(reason, 0)) for reason in reasons)
        + " |"
        for name, rep in export.reports.items()
    ]
    return "\n".join([f"Training data of round {export.round}", "", header, rule, *body]) + "\n"


def read_report(folder: Path) -> tuple[dict[str, Any], str]:
    """The report of the training data in `folder`: (its JSON, its Markdown)."""
    files = TrainingFiles(folder)
    try:
        return json.loads(files.report_json.read_text(encoding="utf-8")), files.report_markdown.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        raise TrainingInputError(
            f"{files.report_json}: the training report cannot be read ({error}); materialize the training datasets first"
        ) from error
