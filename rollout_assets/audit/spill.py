"""Per-line records of a recount kept on disk, not in memory (`SpilledRows`): a round's lines
are read in one pass and compared in another, and holding one Python tuple per line between
the two made the checks' memory grow with the round.

Each record is a tuple of JSON-like values (None, bools, numbers, strings, tuples), stored
with `marshal` (exact: 1, 1.0 and True stay apart) in a SQLite file of a temporary folder,
with its key (a rollout id) and two labels beside it for the queries that need no record
(`keys_counted_twice`, `orphans`). The folder is removed when the rows are dropped.
"""

from __future__ import annotations

import marshal
import sqlite3
import tempfile
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rollout_assets.scratch_sqlite import close_scratch, scratch_connection

_BATCH = 2_000

# The labels a row may carry beside its record, for `orphans`: its role and its parent.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    n INTEGER PRIMARY KEY, key TEXT, label TEXT, parent TEXT, record BLOB NOT NULL
)
"""


def plain(*fields: Any) -> tuple[Any, ...]:
    """A record as the plain tuple it was appended as."""
    return fields


# Records between two clearings of the shared values: enough for the lines of many cells.
_SHARED_WINDOW = 4_096


def _shared(value: Any, seen: dict[Any, Any]) -> Any:
    """`value`, or an equal one of the same types met since the last clearing of `seen`."""
    if isinstance(value, str):
        return seen.setdefault(value, value)
    if isinstance(value, tuple):
        value = tuple(_shared(item, seen) for item in value)
        # Keyed by their encoding: as dict keys, (1,), (1.0,) and (True,) would be one.
        return seen.setdefault(marshal.dumps(value), value)
    return value


def tally_key(value: Any) -> bytes:
    """The `key` of a tally's row, for `SpilledRows.tally_counts`: equal for two values exactly
    when a Counter counts them as one (1, 1.0 and True alike; "1" apart), for what a JSON
    line or an input can hold as a key (None, bools, numbers, strings, tuples of them).
    Not marshal: its bytes for one string change with the string's reference count."""
    if value is None:
        return b"n"
    if isinstance(value, str):
        encoded = value.encode("utf-8", "surrogatepass")
        return b"s%d:%s" % (len(encoded), encoded)
    if isinstance(value, (bool, int)):
        return b"i%d;" % value
    if isinstance(value, float):
        return b"i%d;" % value if value.is_integer() else b"f%r;" % value
    if isinstance(value, tuple):
        return b"t%d:%s" % (len(value), b"".join(tally_key(item) for item in value))
    raise TypeError(f"{type(value).__name__} is no tally key")


class SpilledRows:
    """An append-only sequence of records in a temporary SQLite file, iterated in order as
    `make(*record)` (a NamedTuple class, say).

    `path` given: the file is the caller's to remove (a forked part of a recount writes its
    rows there for the parent to `extend` with); otherwise the rows own a temporary folder.
    Pickled, the rows travel as that path and are opened again, read-only in intent."""

    def __init__(self, make: Callable[..., Any] = plain, path: Path | None = None) -> None:
        self.make = make
        folder = None
        if path is None:
            folder = tempfile.mkdtemp(prefix="rollout-audit-")
            path = Path(folder, "rows.sqlite")
        self.path = path
        self._connection = scratch_connection(path, check_same_thread=False)
        # Rows are written and read in order: a small page cache does (the default is 2 MB,
        # and a recount holds several of these files in each of its processes).
        self._connection.execute("PRAGMA cache_size=-256")
        self._connection.execute(_SCHEMA)
        self._pending: list[tuple[Any, ...]] = []
        self._count = self._connection.execute("SELECT count(*) FROM rows").fetchone()[0]
        self._indexed = False
        self._finalizer = weakref.finalize(self, close_scratch, self._connection, folder)

    # Writing

    def append(
        self,
        record: tuple[Any, ...],
        key: str | bytes | None = None,
        label: str | None = None,
        parent: Any = None,
    ) -> None:
        """Add a record; `key` (a rollout id, or a tally's `tally_key`), `label` and `parent`
        (kept when it is a string) for the queries."""
        parent = parent if isinstance(parent, str) else None
        self._pending.append((key, label, parent, marshal.dumps(tuple(record))))
        self._count += 1
        if len(self._pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Write the pending records (a reader does this first)."""
        if self._pending:
            # One transaction a batch: in autocommit each row would be a transaction of its own,
            # with its own lock and unlock of the file (16 us a row instead of about 1).
            self._connection.execute("BEGIN")
            self._connection.executemany(
                "INSERT INTO rows (key, label, parent, record) VALUES (?, ?, ?, ?)", self._pending
            )
            self._connection.execute("COMMIT")
            self._pending.clear()
            self._indexed = False

    def extend(self, later: SpilledRows) -> None:
        """Append the rows of `later` (another file), in their order, without reading them here."""
        later.flush()
        self.flush()
        self._connection.execute("ATTACH DATABASE ? AS later", (str(later.path),))
        try:
            self._connection.execute(
                "INSERT INTO rows (key, label, parent, record)"
                " SELECT key, label, parent, record FROM later.rows ORDER BY n"
            )
        finally:
            self._connection.execute("DETACH DATABASE later")
        self._count += len(later)
        self._indexed = False

    def close(self) -> None:
        """Write what is pending and let go of the file (its folder, if owned, is removed)."""
        self.flush()
        self._finalizer()

    # Reading

    def _query(self, sql: str, parameters: Iterable[Any] = (), *, by_key: bool = True) -> sqlite3.Cursor:
        """`sql` on the rows written so far; the key index is built first unless the query does
        not look rows up by key (`by_key` False: building it sorts every row)."""
        self.flush()
        if by_key and not self._indexed:
            self._connection.execute("CREATE INDEX IF NOT EXISTS rows_key ON rows (key)")
            self._connection.execute("ANALYZE")
            self._indexed = True
        return self._connection.execute(sql, tuple(parameters))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        """The records in order, the equal strings and tuples of nearby records shared, so that
        records a reader keeps cost about what they held in a list (the lines of one cell share
        their coordinates, a worker's parent is its supervisor's id). Not `sys.intern`: its
        table would keep a slot for every id of the round for the rest of the process."""
        make, seen = self.make, {}
        for count, (record,) in enumerate(self._query("SELECT record FROM rows ORDER BY n"), 1):
            yield make(*(_shared(value, seen) for value in marshal.loads(record)))
            if count % _SHARED_WINDOW == 0:
                seen.clear()

    def stream(self) -> Iterator[Any]:
        """The records in order, each its own: for a reader that keeps none of them (sharing
        equal values costs more than the records it would save)."""
        make = self.make
        for (record,) in self._query("SELECT record FROM rows ORDER BY n"):
            yield make(*marshal.loads(record))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SpilledRows, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpilledRows({self._count} rows in {self.path})"

    def last_with_key(self, key: str) -> Any | None:
        """The last record appended with `key` (as a dict built in order would hold it), or None."""
        last = "SELECT record FROM rows WHERE key = ? ORDER BY n DESC LIMIT 1"
        found = self._query(last, (key,)).fetchone()
        return None if found is None else self.make(*marshal.loads(found[0]))

    def keys(self, *, skip_label: str | None = None) -> Iterator[str]:
        """The rows' keys in order (those labeled `skip_label` left out)."""
        for (key,) in self._query("SELECT key FROM rows WHERE label IS NOT ? ORDER BY n", (skip_label,)):
            yield key

    def counted(self, label: str) -> Counter[Any]:
        """The one-value records of the rows labeled `label`, each value as often as appended."""
        counts: Counter[Any] = Counter()
        for (record,) in self._query("SELECT record FROM rows WHERE label IS ?", (label,), by_key=False):
            (value,) = marshal.loads(record)
            counts[value] += 1
        return counts

    def tally_counts(self, label: str, other: SpilledRows, other_label: str) -> Iterator[tuple[Any, int, int]]:
        """Two tallies side by side, without a Counter of either: each value of the one-value
        records labeled `label` here or `other_label` in `other`, once, with how often each
        side holds it. Values are told apart by the `key` both appenders gave their rows
        (`tally_key`), grouped in SQL; the value shown is the group's first here, else there,
        as a Counter keeps the first of equal keys."""
        other.flush()
        self._query("ATTACH DATABASE ? AS other", (str(other.path),), by_key=False)
        try:
            rows = self._connection.execute(
                # The bare `record` is the row's with the least (side, n): SQLite's rule for
                # a query with one min() aggregate.
                "SELECT record, min((side << 40) + n), sum(side = 0), sum(side = 1) FROM ("
                " SELECT key, record, n, 0 AS side FROM main.rows WHERE label IS ?"
                " UNION ALL SELECT key, record, n, 1 FROM other.rows WHERE label IS ?"
                ") GROUP BY key",
                (label, other_label),
            )
            for record, _, here, there in rows:
                (value,) = marshal.loads(record)
                yield value, here, there
        finally:
            self._connection.execute("DETACH DATABASE other")

    def keys_counted_twice(self) -> list[str]:
        """Every key on more than one row, in the order of their first row."""
        return [
            key
            for (key,) in self._query(
                "SELECT key FROM rows WHERE key IS NOT NULL GROUP BY key HAVING count(*) > 1 ORDER BY min(n)"
            )
        ]

    def orphans(self, child_label_is: bool, label: str, parent_label: str) -> Iterator[tuple[Any, ...]]:
        """The records of the rows whose label is `label` (or, with `child_label_is` False, any
        other) whose parent is no key of a row labeled `parent_label`, in order. A row without
        a parent is one of them when its label is `label` (it must have one), never otherwise."""
        wanted = "label IS ?" if child_label_is else "label IS NOT ?"
        for (record,) in self._query(
            f"SELECT record FROM rows WHERE {wanted} AND ((? AND parent IS NULL) OR parent NOT IN"
            " (SELECT key FROM rows WHERE label IS ? AND key IS NOT NULL)) ORDER BY n",
            (label, child_label_is, parent_label),
        ):
            yield marshal.loads(record)

    def keys_apart(self, other: SpilledRows, *, skip_label: str | None = None) -> int:
        """How many keys one multiset of keys holds beyond the other, both ways: the rows of
        `other` (those labeled `skip_label` left out) against these."""
        other.flush()
        self._query("SELECT 1")
        self._connection.execute("ATTACH DATABASE ? AS other", (str(other.path),))
        try:
            (apart,) = self._connection.execute(
                "SELECT coalesce(sum(abs(mine - theirs)), 0) FROM ("
                " SELECT key, sum(mine) AS mine, sum(theirs) AS theirs FROM ("
                "  SELECT key, 1 AS mine, 0 AS theirs FROM main.rows"
                "  UNION ALL SELECT key, 0, 1 FROM other.rows WHERE label IS NOT ?"
                " ) GROUP BY key)",
                (skip_label,),
            ).fetchone()
        finally:
            self._connection.execute("DETACH DATABASE other")
        return int(apart)

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        return {"make": self.make, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["make"], state["path"])  # type: ignore[misc]


class SpilledMapping:
    """A mapping from string keys to records, on disk like `SpilledRows`; a key set twice
    maps to its last record, as a dict's would."""

    def __init__(self) -> None:
        self.rows = SpilledRows()

    def __setitem__(self, key: str, value: tuple[Any, ...]) -> None:
        self.rows.append((key, value), key=key)

    def get(self, key: str, default: Any = None) -> Any:
        found = self.rows.last_with_key(key)
        return default if found is None else found[1]

    def __getitem__(self, key: str) -> Any:
        found = self.rows.last_with_key(key)
        if found is None:
            raise KeyError(key)
        return found[1]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.rows.last_with_key(key) is not None

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(dict(iter(self.rows)).items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpilledMapping):
            return dict(self.items()) == dict(other.items())
        if isinstance(other, dict):
            return dict(self.items()) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
