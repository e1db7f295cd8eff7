"""Writing the rows of a round's three datasets, each ledger line read and normalized as few
times as the rows allow.

The preference pairs and the GRPO groups are cut from the same buckets, in the same order: the
lines of a bucket's pairs are lines of its group. So the groups and the pairs are written in
one walk: each group's transcripts are prepared once, for the group row and for the pair rows
of its bucket, and dropped before the next group. Each file still gets its rows in its own
order (selection order), and memory holds one group's transcripts at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from rollout_assets.ledger import AtomicJsonlWriter
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.training.arrow import schemas
from rollout_assets.training.files import AtomicParquetWriter, TrainingFiles
from rollout_assets.training.prepare import RowTranscript
from rollout_assets.training.rows import RowBuilder
from rollout_assets.training.keys import SpilledKeys
from rollout_assets.training.scan import read_line_at
from rollout_assets.training.select import Selection


class _Lines:
    """The ledger lines of a round as row transcripts, read from the snapshot on demand."""

    def __init__(self, snapshot: LedgerSnapshot, keys: SpilledKeys, rows: RowBuilder) -> None:
        self._snapshot, self._keys, self._rows = snapshot, keys, rows

    def transcripts(self, indexes: Sequence[int]) -> dict[int, RowTranscript]:
        """The transcripts of the lines of `indexes` by index (their places looked up at once)."""
        places = self._keys.places(indexes)
        return {index: self._rows.transcript(read_line_at(self._snapshot, *places[index])) for index in indexes}

    def transcript(self, index: int) -> RowTranscript:
        return self.transcripts([index])[index]


def write_rows(
    selections: dict[str, Selection], keys: SpilledKeys, snapshot: LedgerSnapshot, files: TrainingFiles, rows: RowBuilder
) -> int:
    """Write the Parquet files of the three datasets and `sft.jsonl`; the SFT rows' tokens."""
    lines = _Lines(snapshot, keys, rows)
    tokens = _write_sft(selections["sft_rows"], lines, files, rows)
    _write_groups_and_pairs(selections["grpo_groups"], selections["preference_pairs"], lines, files, rows)
    return tokens


def _write_sft(selection: Selection, lines: _Lines, files: TrainingFiles, rows: RowBuilder) -> int:
    tokens = 0
    with AtomicParquetWriter(files.parquet("sft_rows"), schemas()["sft_rows"]) as parquet, AtomicJsonlWriter(
        files.sft_jsonl
    ) as jsonl:
        for (index,) in selection.rows:
            row = rows.sft_row(lines.transcript(index))
            parquet.write(row)
            jsonl.write(row)
            tokens += row["tokens"]
    return tokens


def _write_groups_and_pairs(
    groups: Selection, pairs: Selection, lines: _Lines, files: TrainingFiles, rows: RowBuilder
) -> None:
    pending = iter(pairs.rows)
    pair = next(pending, None)  # the next pair row to write
    with contextlib.ExitStack() as stack:
        group_file = stack.enter_context(AtomicParquetWriter(files.parquet("grpo_groups"), schemas()["grpo_groups"]))
        pair_file = stack.enter_context(
            AtomicParquetWriter(files.parquet("preference_pairs"), schemas()["preference_pairs"])
        )
        for indexes in groups.rows:
            prepared = lines.transcripts(indexes)
            group_file.write(rows.group_row([prepared[index] for index in indexes]), transcripts=len(indexes))
            # The pair rows of this group's bucket come next in the pairs' order.
            while pair is not None and all(index in prepared for index in pair):
                chosen, rejected = pair
                pair_file.write(rows.pair_row(prepared[chosen], prepared[rejected]), transcripts=2)
                pair = next(pending, None)
        while pair is not None:  # pairs of no group: none while both cut the same buckets
            chosen, rejected = pair
            pair_file.write(rows.pair_row(lines.transcript(chosen), lines.transcript(rejected)), transcripts=2)
            pair = next(pending, None)
