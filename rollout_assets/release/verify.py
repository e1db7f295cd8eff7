"""The release checks' recount, from the written files alone."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from rollout_assets.release.data_files import content_name
from rollout_assets.release.file_counts import FileCounts, card_numbers, count_files
from rollout_assets.release.scan import Finding, scan_release
from rollout_assets.release.split import split_key

SAMPLE = 5


@dataclass
class ReleaseVerdict:
    passed: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.passed = False
        if len(self.problems) < SAMPLE:
            self.problems.append(problem)


def _data_files(release: Path) -> list[Path]:
    return sorted((release / "data").rglob("*.parquet"))


def check_split_overlap(release: Path) -> ReleaseVerdict:
    """No instance (or repository, as the release was split) is in both train and test."""
    import pyarrow.parquet as pq  # here, not with the module: see training/files.py

    unit = json.loads((release / "manifest.json").read_text())["config"]["split_unit"]
    seen: dict[str, dict[str, str]] = {"train": {}, "test": {}}
    verdict = ReleaseVerdict()
    for path in _data_files(release):
        split = path.name.split("-", 1)[0]
        column = pq.read_table(path, columns=["metadata"]).column("metadata").to_pylist()
        for row in column:
            seen[split].setdefault(split_key(row["instance_id"], unit), str(path.relative_to(release)))
    shared = sorted(set(seen["train"]) & set(seen["test"]))
    for key in shared:
        verdict.fail(f"{unit} {key} is in train ({seen['train'][key]}) and in test ({seen['test'][key]})")
    verdict.counts = {"train": len(seen["train"]), "test": len(seen["test"]), "shared": len(shared)}
    return verdict


def check_no_secrets(release: Path) -> ReleaseVerdict:
    """No rule or detect-secrets plugin finds anything in the data files, the card, the
    manifest or the scrub report, but the values the release allows. One problem per distinct
    value (its first place, how many more), so the hashes a person checks are all in view."""
    findings = scan_release(release)
    by_value: dict[tuple[str, ...], list[Finding]] = {}
    for finding in findings:
        by_value.setdefault(finding.hashes, []).append(finding)
    verdict = ReleaseVerdict(counts={"findings": len(findings), "values": len(by_value)})
    for places in by_value.values():
        more = f" and {len(places) - 1} more place(s)" if len(places) > 1 else ""
        verdict.fail(f"{places[0]}{more}")
    return verdict


def check_card_matches_files(release: Path) -> ReleaseVerdict:
    """The manifest's rows and digests are the files', each file is named by its digest and holds
    rows, the card's configs name every file, and the card states the same rows."""
    import pyarrow.parquet as pq

    manifest = json.loads((release / "manifest.json").read_text())
    card = (release / "README.md").read_text()
    verdict = ReleaseVerdict()
    recorded = manifest["files"]
    actual = {str(path.relative_to(release)) for path in _data_files(release)}
    for name in sorted(actual ^ set(recorded)):
        verdict.fail(f"{name}: in the {'files' if name in actual else 'manifest'} only")
    for name in sorted(actual & set(recorded)):
        path = release / name
        rows = pq.ParquetFile(path).metadata.num_rows
        kind, split = path.parent.name, path.name.split("-", 1)[0]
        if rows != recorded[name]["rows"] or rows != manifest["rows"][kind][split]:
            verdict.fail(f"{name}: {rows} rows, the manifest says {recorded[name]['rows']}")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if "sha256:" + digest != recorded[name]["sha256"]:
            verdict.fail(f"{name}: its sha256 is not the manifest's")
        if path.name != content_name(split, digest):
            verdict.fail(f"{name}: its name does not carry its digest, so a `datasets` cache could serve stale rows")
        if rows == 0:
            verdict.fail(f"{name}: holds no rows, and `datasets` cannot load an empty split")
        if f"    path: {name}\n" not in card:
            verdict.fail(f"README.md's configs do not name {name}")
    _card_states_the_files(card, count_files(release), verdict)
    if f"license: {manifest['license']}" not in card:
        verdict.fail("README.md does not state the manifest's license")
    verdict.counts = {"files": len(actual)}
    return verdict


def _card_states_the_files(card: str, counts: FileCounts, verdict: ReleaseVerdict) -> None:
    """The card's numbers, read from its text, against the files' own: its rows per kind and
    split, its instances per split, its SFT tokens per split. Neither side comes from the code
    that wrote the card, so a card and manifest that agree on a wrong number still fail."""
    stated = card_numbers(card)
    for (kind, split), rows in sorted(counts.rows.items()):
        said = stated.rows.get((kind, split))
        if said != rows:
            verdict.fail(f"README.md states {said} {kind} rows in {split}, the files hold {rows}")
    for (kind, split), said in sorted(stated.rows.items()):
        if (kind, split) not in counts.rows and said != 0:  # a split without rows has no file
            verdict.fail(f"README.md states {said} {kind} rows in {split}, a kind and split of no file")
    for name, said, actual in (("instances", stated.instances, counts.instances), ("SFT tokens", stated.sft_tokens,
                                                                                    counts.sft_tokens)):
        if said != actual:
            verdict.fail(f"README.md states {name} {said}, the files hold {actual}")


def check_rows_are_distinct(release: Path) -> ReleaseVerdict:
    """No two rows of a kind are the same apart from their metadata: an exact duplicate across
    rounds is written once. Compared by the checks' own digest of each row's content."""
    counts = count_files(release)
    verdict = ReleaseVerdict(counts={"rows": sum(counts.rows.values()), "duplicates": len(counts.duplicates)})
    for first, second in counts.duplicates:
        verdict.fail(f"{second} is {first} again (the same content, other metadata)")
    return verdict


# The blocking checks of a release, by name (docs/release.md, Checks).
RELEASE_CHECKS = {
    "release_splits_do_not_overlap": check_split_overlap,
    "release_has_no_secrets": check_no_secrets,
    "release_card_matches_files": check_card_matches_files,
    "release_rows_are_distinct": check_rows_are_distinct,
}
