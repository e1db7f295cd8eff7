"""Building a release from the training rows of several rounds.

Rows are read round by round in batches, written once (an exact duplicate of an earlier
round's row is skipped), scrubbed, and sent to train or test by their instance, into a fresh
folder that release.py swaps in whole. docs/release.md describes the layout.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollout_assets.release.config import ReleaseConfig, ReleaseError
from rollout_assets.release.data_files import staged_data_file
from rollout_assets.release.scrub import Scrubber
from rollout_assets.release.split import split_of
from rollout_assets.training.arrow import schemas
from rollout_assets.training.files import AtomicParquetWriter, TrainingFiles, parquet_rows

# Release kind -> the training dataset it is built from, and its Arrow schema.
# The release's kind of data, and the training dataset it is built from.
KINDS = {"sft": "sft_rows", "preference_pairs": "preference_pairs", "grpo_groups": "grpo_groups"}
SPLITS = ("train", "test")


@dataclass(frozen=True)
class RoundInput:
    """One round of the release: its key and where its ledger and training files are."""

    key: str
    ledger: Path
    training: TrainingFiles


@dataclass
class ReleaseCounts:
    rows: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {s: 0 for s in SPLITS} for k in KINDS})
    duplicates: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
    scrubbed: Counter[str] = field(default_factory=Counter)
    allowed_kept: Counter[str] = field(default_factory=Counter)  # allowlisted hash -> values kept
    sft_tokens: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SPLITS})
    models: set[str] = field(default_factory=set)
    instances: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SPLITS})



def _content_digest(row: dict[str, Any]) -> bytes:
    """Exact duplicates: the same row apart from where it came from (its metadata)."""
    content = {key: value for key, value in row.items() if key != "metadata"}
    return hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).digest()


def write_release_data(rounds: list[RoundInput], folder: Path, config: ReleaseConfig) -> ReleaseCounts:
    """The data files of the release, into `folder` (a fresh folder)."""
    counts = ReleaseCounts()
    scrubber = Scrubber(host_names=config.host_names, allowed=config.allowed)
    for kind, dataset in KINDS.items():
        schema = schemas()[dataset]
        seen: set[bytes] = set()
        with (
            AtomicParquetWriter(staged_data_file(folder, kind, "train"), schema) as train,
            AtomicParquetWriter(staged_data_file(folder, kind, "test"), schema) as test,
        ):
            writers = {"train": train, "test": test}
            for round_input in rounds:
                source = round_input.training.parquet(dataset)
                if not source.is_file():
                    raise ReleaseError(f"round {round_input.key}: {source} does not exist; build its training rows first")
                for row in parquet_rows(source):
                    digest = _content_digest(row)
                    if digest in seen:
                        counts.duplicates[kind] += 1
                        continue
                    seen.add(digest)
                    split = split_of(row["metadata"]["instance_id"], config.split_unit, config.test_fraction)
                    clean = scrubber.scrub_value(row)
                    writers[split].write(clean)
                    counts.rows[kind][split] += 1
                    counts.instances[split].add(clean["metadata"]["instance_id"])
                    if kind == "sft":
                        counts.sft_tokens[split] += row["tokens"]
                        if row["metadata"]["model"]:
                            counts.models.add(clean["metadata"]["model"])
    counts.scrubbed = scrubber.counts
    counts.allowed_kept = Counter({digest: scrubber.allowed_kept[digest] for digest in config.allowed})
    return counts
