"""Where a round's training files live, and a Parquet file that appears only once complete."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from rollout_assets.training.arrow_rows import record_batch

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# pyarrow is imported where a file is written or read, not with this module: the Dagster
# definitions import it, and every run of the project (most never touch a Parquet file) would
# otherwise hold pyarrow's ~40 MiB.

# Transcripts per Parquet row group: a batch of about a thousand transcripts (a few MB in Arrow) is in
# memory only while it is written, and few row groups keep the writer's metadata small (it
# holds each row group's, tens of KB for the nested message columns, until the file closes:
# at 128 a group, 40 MB at 120,000 lines). An SFT row holds one, a pair two, a GRPO group one
# per completion (a row group of groups holds a few rows).
ROWS_PER_GROUP = 1024
# Rows wait as Python dicts until this many transcripts, then as Arrow until the row group is
# full: a transcript as dicts takes several times its Arrow size, and the pairs and the groups
# are written side by side (1,024 of each as dicts were 130 MiB of the export's peak).
TRANSCRIPTS_AS_DICTS = 128

DATASETS = ("sft_rows", "preference_pairs", "grpo_groups")
_STEMS = {"sft_rows": "sft", "preference_pairs": "preference-pairs", "grpo_groups": "grpo-groups"}


@dataclass(frozen=True)
class TrainingFiles:
    """The files of one round's training data, under `<ledger root>/<round>/training/`."""

    folder: Path

    def parquet(self, dataset: str) -> Path:
        return self.folder / f"{_STEMS[dataset]}.parquet"

    def accounting(self, dataset: str) -> Path:
        """One JSON line per ledger line: its rollout_id, line number and fate (`row` or a reason)."""
        return self.folder / f"{_STEMS[dataset]}.accounting.jsonl"

    @property
    def sft_jsonl(self) -> Path:
        return self.folder / "sft.jsonl"

    @property
    def report_json(self) -> Path:
        return self.folder / "training-report.json"

    @property
    def report_markdown(self) -> Path:
        return self.folder / "training-report.md"

    def all_files(self) -> list[Path]:
        """Every file an export writes into the folder."""
        per_dataset = [path for dataset in DATASETS for path in (self.parquet(dataset), self.accounting(dataset))]
        return [*per_dataset, self.sft_jsonl, self.report_json, self.report_markdown]


class AtomicParquetWriter:
    """Row groups written to a temporary file beside `path`, renamed onto it on a clean exit;
    on an error the temporary file is removed and an earlier file at `path` stays as it was."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema = path, schema
        self.rows = 0
        self._pending: list[dict[str, Any]] = []
        self._pending_weight = 0
        self._batches: list[pa.RecordBatch] = []  # the row group's rows already in Arrow
        self._group_weight = 0
        self._temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> Self:
        import pyarrow.parquet as pq

        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Row groups carry no statistics: min/max of transcript text helps no reader, and the
        # writer holds every row group's metadata until the file closes.
        self._writer = pq.ParquetWriter(self._temp, self.schema, compression="zstd", write_statistics=False)
        return self

    def write(self, row: dict[str, Any], transcripts: int = 1) -> None:
        self._pending.append(row)
        self.rows += 1
        self._pending_weight += transcripts
        self._group_weight += transcripts
        if self._group_weight >= ROWS_PER_GROUP:
            self._flush()
        elif self._pending_weight >= TRANSCRIPTS_AS_DICTS:
            self._to_arrow()

    def _to_arrow(self) -> None:
        if self._pending:
            self._batches.append(record_batch(self._pending, self.schema))
            self._pending, self._pending_weight = [], 0

    def _flush(self) -> None:
        """The rows waiting, written as one row group."""
        import pyarrow as pa

        self._to_arrow()
        if self._batches and self._writer is not None:
            # One chunk, as a table made from the dicts at once: the same pages, the same bytes.
            table = pa.Table.from_batches(self._batches, schema=self.schema).combine_chunks()
            self._writer.write_table(table, row_group_size=table.num_rows)
            self._batches, self._group_weight = [], 0

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                self._flush()
            if self._writer is not None:
                self._writer.close()
            if kind is None:
                os.replace(self._temp, self.path)
        finally:
            if self._temp.exists():
                self._temp.unlink()


def parquet_rows(path: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet file as dicts (of `columns` only, when given), a few at a time
    (never the whole file): a GRPO group's row holds every transcript of its group, and a batch
    of 64 such rows, decoded and made dicts, would hold more than all the rest of the training
    checks. Read without pre-buffering (which reads a whole row group ahead, and kept about 90
    MiB of a large GRPO file in Arrow's buffers) and on this thread (the reader's threads left
    their allocator arenas behind: 250 MiB resident against 141 for the same rows); see
    docs/training.md."""
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(path, pre_buffer=False)
    for batch in reader.iter_batches(batch_size=8, columns=columns, use_threads=False):
        yield from batch.to_pylist()
