"""Building one release: data files, scrub report, manifest and card, swapped in whole."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rollout_assets.folder_swap import built_in_place
from rollout_assets.release.build import (
    KINDS,
    SPLITS,
    ReleaseCounts,
    RoundInput,
    write_release_data,
)
from rollout_assets.release.card import dataset_card
from rollout_assets.release.config import ReleaseConfig, ReleaseError
from rollout_assets.release.data_files import name_by_content
from rollout_assets.release.target import RELEASE_FORMAT, refuse_among_ledgers, refuse_unless_replaceable


def _sha256(path: Path) -> str:
    """`sha256:` and the file's digest: the form OCI images use, which no entropy detector
    reads as a secret (a bare quoted hex string is one to them)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReleaseError(f"{path}: cannot be read as JSON ({error})") from error


def _round_facts(round_input: RoundInput) -> tuple[dict[str, Any], dict[str, Any], float]:
    """(the round's entry in the manifest, its training report, its recorded cost)."""
    report = _json(round_input.training.report_json)
    stats_path = round_input.ledger.with_name("rollout-stats.json")
    stats = _json(stats_path) if stats_path.is_file() else {}
    cost = sum(entry.get("usd") or 0 for entry in (stats.get("costUsdByRole") or {}).values())
    lines = next(iter(report["datasets"].values()))["lines"]
    # The digest of the bytes the rows were read from, as the export recorded it (the ledger may
    # have been rebuilt since); a report written before exports recorded it: the file's.
    recorded = (report.get("ledger") or {}).get("sha256")
    ledger_sha256 = "sha256:" + recorded if recorded else _sha256(round_input.ledger)
    return {"round": round_input.key, "ledger_sha256": ledger_sha256, "lines": lines}, report, cost


def _manifest(rounds: list[RoundInput], config: ReleaseConfig, counts: ReleaseCounts, folder: Path) -> dict[str, Any]:
    entries, drops, filters, cost = [], {}, set(), 0.0
    for round_input in rounds:
        entry, report, round_cost = _round_facts(round_input)
        entries.append(entry)
        cost += round_cost
        filters.add(json.dumps(report["filter"], sort_keys=True))
        for name, dataset in report["datasets"].items():
            total = drops.setdefault(name, {"lines": 0, "rows": 0, "dropped": 0, "drops": {}})
            for key in ("lines", "rows", "dropped"):
                total[key] += dataset[key]
            for reason, count in dataset["drops"].items():
                total["drops"][reason] = total["drops"].get(reason, 0) + count
    files = {}
    for kind in KINDS:
        for split in SPLITS:
            for path in sorted((folder / "data" / kind).glob(f"{split}-*.parquet")):  # none without rows
                files[str(path.relative_to(folder))] = {"rows": counts.rows[kind][split], "sha256": _sha256(path)}
    return {
        "format": RELEASE_FORMAT,
        "name": config.name,
        "license": config.license,
        "config": config.to_json(),
        "rounds": entries,
        "rows": counts.rows,
        "duplicates_skipped": counts.duplicates,
        "instances": {split: len(counts.instances[split]) for split in SPLITS},
        "sft_tokens": counts.sft_tokens,
        "models": sorted(counts.models),
        "cost_usd": round(cost, 6),
        "filter": " | ".join(sorted(filters)),
        "drops": drops,
        "scrubbed": dict(sorted(counts.scrubbed.items())),
        "files": files,
    }


def build_release(
    rounds: list[RoundInput], release: Path, config: ReleaseConfig, verify: bool = False
) -> dict[str, Any]:
    """Build the release of `rounds` at `release` (a folder, replaced whole, and only when it is
    an earlier release: anything else there is refused, as is a place in a round's folder) and
    return its manifest. With `verify`, the release checks run on the built folder first, and a release
    that fails one is not put in place (ReleaseCheckFailed says which and why)."""
    if not rounds:
        raise ReleaseError("a release needs at least one round")
    round_folders = [round_input.ledger.parent for round_input in rounds]

    def refuse(place: Path) -> None:
        refuse_among_ledgers(place, None, round_folders)
        refuse_unless_replaceable(place)

    with built_in_place(release, refuse) as folder:
        ordered = sorted(rounds, key=lambda r: r.key)
        counts = write_release_data(ordered, folder, config)
        name_by_content(folder, counts.rows)
        manifest = _manifest(ordered, config, counts, folder)
        scrub_report = {
            "replacements": manifest["scrubbed"],
            "total": sum(manifest["scrubbed"].values()),
            "allowed": dict(sorted(counts.allowed_kept.items())),
        }
        (folder / "scrub-report.json").write_text(json.dumps(scrub_report, indent=2) + "\n", encoding="utf-8")
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        (folder / "README.md").write_text(dataset_card(manifest), encoding="utf-8")
        if verify:
            _verify(folder, release)
    return manifest


class ReleaseCheckFailed(ReleaseError):
    """A built release failed a check and was not put in place."""


def _verify(folder: Path, release: Path) -> None:
    from rollout_assets.release.verify import RELEASE_CHECKS

    failed = []
    for name, check in RELEASE_CHECKS.items():
        verdict = check(folder)
        if not verdict.passed:
            failed.append(f"{name}: " + "; ".join(verdict.problems))
    if failed:
        raise ReleaseCheckFailed(f"release {release} not written: " + " | ".join(failed))
