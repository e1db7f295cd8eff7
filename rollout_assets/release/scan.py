"""The scan of a written release: every rule and every detect-secrets plugin the scrubber
uses, run again over every string of every data file, the card, the manifest and the scrub
report. The scrubber replaced what it found, so anything found here is a secret that appeared
in the writing (a card line, a manifest value) or a fault of the scrubber; either way the
release is refused. Values on the release's allowlist (recorded in its scrub report) pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_assets.release.scrub import Scrubber
from rollout_assets.training.files import parquet_rows

TEXT_FILES = ("README.md", "manifest.json", "scrub-report.json")


@dataclass(frozen=True)
class Finding:
    file: str
    row: int | None  # None for a text file (the card, the manifest)
    field: str
    rule: str
    hashes: tuple[str, ...]  # of each value found at this place (scrub.Secret)

    def __str__(self) -> str:
        where = f"row {self.row}, {self.field}" if self.row is not None else f"line {self.field}"
        return f"{self.file}: {where}: {self.rule} ({', '.join(self.hashes)})"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def allowed_hashes(release: Path) -> frozenset[str]:
    """The allowlist the release was built with, from its scrub report (none when absent)."""
    path = release / "scrub-report.json"
    if not path.is_file():
        return frozenset()
    report = json.loads(path.read_text(encoding="utf-8"))
    return frozenset(report.get("allowed", {}))


def scan_release(release: Path) -> list[Finding]:
    """Every finding in the release's data files, card, manifest and scrub report."""
    finder = Scrubber(allowed=allowed_hashes(release))
    findings = []
    for path in sorted(release.rglob("*.parquet")):
        relative = str(path.relative_to(release))
        for number, row in enumerate(parquet_rows(path), start=1):
            for field, text in _strings(row, ""):
                findings += [Finding(relative, number, field, s.kind, s.hashes) for s in finder.secrets(text)]
    for name in TEXT_FILES:
        if (release / name).is_file():
            for lineno, line in enumerate((release / name).read_text(encoding="utf-8").splitlines(), start=1):
                findings += [Finding(name, None, str(lineno), s.kind, s.hashes) for s in finder.secrets(line)]
    return findings
