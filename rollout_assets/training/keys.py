"""The scan's keys (LineKey), one row per ledger line in a SQLite file of a temporary
folder rather than a list of objects: about 800 bytes a line in memory made the export grow
with the ledger.

The decisions read the keys back in the three orders they walk: ledger order (every line's
line reason, the accounting), best reward first (the SFT rows), and bucket after bucket (the
preference pairs and the GRPO groups: one (role, instance[, prompt]) bucket in memory at a
time). The writer looks up where the lines it writes lie, by their index.

Strings are stored as their UTF-8 bytes with lone surrogates kept (`surrogatepass`): a ledger
line's ids may hold one, and two ids are one bucket exactly when their bytes are equal.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from rollout_assets.scratch_sqlite import close_scratch, scratch_connection

_BATCH = 2_000


@dataclass(frozen=True, slots=True)
class LineKey:
    """What the decisions know of one ledger line, and where it lies in the file."""

    index: int  # 0-based line number in the ledger
    offset: int
    length: int
    rollout_id: str
    role: str
    instance_id: str
    reward: float | None
    reason: str | None  # the filter's line reason (too_long included), None when trainable
    digest: bytes  # of the whole normalized transcript
    prompt_digest: bytes  # of the messages before the first assistant turn
    has_completion: bool  # an assistant turn exists


# `reward` has no type: stored as the line gave it (an int stays an int), compared as a number.
_SCHEMA = """
CREATE TABLE line (
    idx INTEGER PRIMARY KEY, start INTEGER NOT NULL, size INTEGER NOT NULL,
    rollout_id BLOB NOT NULL, role BLOB NOT NULL, instance_id BLOB NOT NULL, reward, reason TEXT,
    digest BLOB NOT NULL, prompt_digest BLOB NOT NULL, has_completion INTEGER NOT NULL
)
"""
_COLUMNS = "idx, start, size, rollout_id, role, instance_id, reward, reason, digest, prompt_digest, has_completion"

# The lines that join a pair's or a group's bucket, in the order the walk gives them: bucket
# after bucket in the order of their first lines, each bucket's lines in ledger order, each
# with the first line of its bucket and the number of such lines of its (role, instance).
# Sorted as indexes alone into a table of their own (rows inserted from an ordered SELECT take
# their rowids in that order), then joined to their keys by index.
_BUCKET_TABLE = """
CREATE TABLE {table} (n INTEGER PRIMARY KEY, first INTEGER NOT NULL, instance_lines INTEGER NOT NULL, idx INTEGER NOT NULL);
INSERT INTO {table} (first, instance_lines, idx)
SELECT first, instance_lines, idx FROM (
    SELECT idx,
        min(idx) OVER (PARTITION BY role, instance_id{prompt}) AS first,
        count(*) OVER (PARTITION BY role, instance_id) AS instance_lines
    FROM line WHERE reason IS NULL AND has_completion
) ORDER BY first, idx;
"""
_LINE_COLUMNS = ", ".join(f"line.{column}" for column in _COLUMNS.split(", "))


def _blob(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _text(blob: bytes) -> str:
    return blob.decode("utf-8", "surrogatepass")


def _row(key: LineKey) -> tuple[Any, ...]:
    return (
        key.index, key.offset, key.length, _blob(key.rollout_id), _blob(key.role), _blob(key.instance_id),
        key.reward, key.reason, key.digest, key.prompt_digest, key.has_completion,
    )  # fmt: skip


def _keys(rows: Iterable[tuple[Any, ...]]) -> Iterator[LineKey]:
    """The keys of rows of `_COLUMNS`; the roles and instances decoded once a walk, and shared."""
    names: dict[bytes, str] = {}
    for index, start, size, rollout_id, role, instance_id, reward, reason, digest, prompt_digest, completion in rows:
        if role not in names:
            names[role] = _text(role)
        if instance_id not in names:
            names[instance_id] = _text(instance_id)
        yield LineKey(
            index, start, size, _text(rollout_id), names[role], names[instance_id],
            reward, reason, digest, prompt_digest, bool(completion),
        )  # fmt: skip


class SpilledKeys:
    """The keys of a ledger's lines, appended in ledger order (index 0, 1, ...) and read back
    as LineKey; on disk, removed when closed or dropped."""

    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="rollout-training-keys-")
        self.path = Path(self._folder, "keys.sqlite")
        self._connection = scratch_connection(self.path)
        # Pages for the sorts of the bucket walk; beyond them SQLite sorts in temporary files.
        self._connection.execute("PRAGMA cache_size=-4096")
        self._connection.execute(_SCHEMA)
        self._pending: list[tuple[Any, ...]] = []
        self._count = 0
        self._sorted: set[str] = set()  # the bucket tables made
        self._finalizer = weakref.finalize(self, close_scratch, self._connection, self._folder)

    @classmethod
    def of(cls, keys: Iterable[LineKey]) -> SpilledKeys:
        made = cls()
        for key in keys:
            made.append(key)
        return made

    def append(self, key: LineKey) -> None:
        self._pending.append(_row(key))
        self._count += 1
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            if self._sorted:
                raise RuntimeError("keys appended after their buckets were sorted")
            self._connection.execute("BEGIN")
            self._connection.executemany(f"INSERT INTO line ({_COLUMNS}) VALUES ({', '.join('?' * 11)})", self._pending)
            self._connection.execute("COMMIT")
            self._pending.clear()

    def _query(self, sql: str, parameters: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        self._flush()
        return self._connection.execute(sql, parameters)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[LineKey]:
        """Every key, in ledger order."""
        return _keys(self._query(f"SELECT {_COLUMNS} FROM line ORDER BY idx"))

    def __getitem__(self, index: int) -> LineKey:
        found = self._query(f"SELECT {_COLUMNS} FROM line WHERE idx = ?", (index,)).fetchall()
        if not found:
            raise IndexError(f"no ledger line {index}")
        return next(_keys(found))

    def places(self, indexes: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Where the lines of `indexes` lie in the ledger: their offset and length by index."""
        found: dict[int, tuple[int, int]] = {}
        for first in range(0, len(indexes), _BATCH):
            part = tuple(indexes[first : first + _BATCH])
            rows = self._query(f"SELECT idx, start, size FROM line WHERE idx IN ({', '.join('?' * len(part))})", part)
            found.update((index, (start, size)) for index, start, size in rows)
        missing = [index for index in indexes if index not in found]
        if missing:
            raise IndexError(f"no ledger line {missing[0]}")
        return found

    def line_reasons(self) -> Iterator[tuple[int, str | None, Any, bool]]:
        """Each line's index, line reason, reward and whether it has a completion, in ledger
        order: what the decisions' first walk asks of every line, without its key."""
        for index, reason, reward, completion in self._query(
            "SELECT idx, reason, reward, has_completion FROM line ORDER BY idx"
        ):
            yield index, reason, reward, bool(completion)

    def rollout_ids(self) -> Iterator[tuple[int, str]]:
        """Each line's index and rollout id, in ledger order."""
        for index, rollout_id in self._query("SELECT idx, rollout_id FROM line ORDER BY idx"):
            yield index, _text(rollout_id)

    def best_first(self) -> Iterator[LineKey]:
        """The lines without a line reason, best reward first, then in ledger order."""
        return _keys(self._query(f"SELECT {_COLUMNS} FROM line WHERE reason IS NULL ORDER BY reward DESC, idx"))

    def buckets(self, by_prompt: bool) -> Iterator[tuple[list[LineKey], int]]:
        """The lines without a line reason and with a completion, bucket after bucket: per
        (role, instance, prompt digest), or per (role, instance) unless `by_prompt`. Each
        bucket comes with the number of such lines of its (role, instance)."""
        table = "bucket_by_prompt" if by_prompt else "bucket_by_instance"
        if table not in self._sorted:  # the pairs and the groups walk the same buckets
            self._flush()
            self._connection.executescript(_BUCKET_TABLE.format(table=table, prompt=", prompt_digest" * by_prompt))
            self._sorted.add(table)
        rows = self._query(
            f"SELECT b.first, b.instance_lines, {_LINE_COLUMNS} FROM {table} AS b"
            " JOIN line ON line.idx = b.idx ORDER BY b.n"
        )
        for _, bucket in itertools.groupby(rows, key=lambda row: row[0]):
            lines = list(bucket)
            yield list(_keys(row[2:] for row in lines)), lines[0][1]

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@contextlib.contextmanager
def key_store(keys: Iterable[LineKey]) -> Iterator[SpilledKeys]:
    """`keys` as SpilledKeys: themselves, or (a list, say) copied into one for the walk."""
    if isinstance(keys, SpilledKeys):
        yield keys
        return
    with SpilledKeys.of(keys) as store:
        yield store
