"""What the training checks keep of each ledger line (`LedgerFacts`: where it lies, reward,
flags), in a SQLite file of a temporary folder rather than a dict: one Python record per line
made the checks' memory grow with the ledger (about 700 bytes a line with the accounting's
tables). The checks look a line up by its rollout id (an indexed query), and the accounting
joins its own tables to these facts in SQL (verify_accounting.py).

A rollout id on two lines is one fact, the later line's, at the place of the first: what a
dict built in ledger order holds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import orjson

from rollout_assets.scratch_sqlite import close_scratch, scratch_connection
from rollout_assets.ledger.snapshot import LedgerSnapshot
from rollout_assets.training.files import TrainingFiles

# A ledger as the checks take it: a path they open, or a snapshot the caller already read from
# (`rollout-assets export` checks the very bytes its rows were built from).
Ledger = Path | LedgerSnapshot

SAMPLE = 5
_BATCH = 2_000
_MANY = 500  # rollout ids a query of `get_many` asks for (SQLite takes up to 32,766 parameters)


@dataclass
class TrainingVerdict:
    passed: bool
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.passed = False
        if len(self.problems) < SAMPLE:
            self.problems.append(problem)


@dataclass(frozen=True, slots=True)
class LedgerFacts:
    lineno: int
    offset: int
    length: int
    reward: float | None
    gated: bool
    role: str
    has_gap: bool
    error: bool
    completed: bool
    truncated: bool
    instance_id: str = ""


# `line`: the lines as read, in ledger order (`n`), until they are settled into `facts`, one row
# per rollout id keyed by it: sorted by id first, so that the keyed table is written page after
# page rather than at random (a ledger's ids are in no order). The values taken from the JSON
# (`rollout_id`, `reward`, `role`) have no type: stored as the line gave them (an int reward
# stays an int), compared as SQLite compares them (numbers as numbers).
FACT_COLUMNS = "lineno, offset, length, reward, gated, role, has_gap, error, completed, truncated, instance_id"
_SCHEMA = f"""
CREATE TABLE line (n INTEGER PRIMARY KEY, rollout_id NOT NULL, {FACT_COLUMNS});
CREATE TABLE facts (rollout_id PRIMARY KEY, n INTEGER NOT NULL, {FACT_COLUMNS}) WITHOUT ROWID;
"""
_STAGE = f"INSERT INTO line (n, rollout_id, {FACT_COLUMNS}) VALUES ({', '.join('?' * 13)})"
# A rollout id on two lines: the first line's place, the last line's facts.
_SETTLE = f"""
INSERT INTO facts (rollout_id, n, {FACT_COLUMNS})
    SELECT rollout_id, n, {FACT_COLUMNS} FROM line WHERE true ORDER BY rollout_id, n
    ON CONFLICT (rollout_id) DO UPDATE SET {', '.join(f'{column} = excluded.{column}' for column in FACT_COLUMNS.split(', '))};
DELETE FROM line;
"""


# A rollout id as the tables hold it: a JSON null as a value that no string or number equals
# but itself (SQLite's NULL equals nothing, where a dict's None key is one key).
_NULL_ID = b"null"


def id_key(rollout_id: Any) -> Any:
    return _NULL_ID if rollout_id is None else rollout_id


def id_of(key: Any) -> Any:
    """The rollout id an `id_key` stands for."""
    return None if key == _NULL_ID else key


def fact_of(row: Iterable[Any]) -> LedgerFacts:
    """The facts of a row of `FACT_COLUMNS`."""
    lineno, offset, length, reward, gated, role, has_gap, error, completed, truncated, instance_id = row
    return LedgerFacts(
        lineno, offset, length, reward, bool(gated), role, bool(has_gap), bool(error), bool(completed),
        bool(truncated), instance_id,
    )  # fmt: skip


class LedgerFactsTable:
    """rollout_id -> LedgerFacts of a ledger's lines, on disk; removed when closed or dropped.
    The accounting adds tables of its own to the same file (`connection`), to join them."""

    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="rollout-training-checks-")
        self.path = Path(self._folder, "facts.sqlite")
        self.connection = scratch_connection(self.path)
        # Pages for the lookups by rollout id and the accounting's sorts; beyond them SQLite
        # reads the file again (from the system's page cache) and sorts in temporary files.
        self.connection.execute("PRAGMA cache_size=-4096")
        # The file is this connection's alone: locked once, not for each of the many small
        # queries (each lookup would otherwise lock, read the file's header and unlock).
        self.connection.execute("PRAGMA locking_mode=EXCLUSIVE")
        self.connection.executescript(_SCHEMA)
        self._pending: list[tuple[Any, ...]] = []
        self._lines = 0
        self._staged = False  # lines written to `line`, not yet settled into `facts`
        self._finalizer = weakref.finalize(self, close_scratch, self.connection, self._folder)

    def add(self, rollout_id: str, fact: LedgerFacts) -> None:
        """The facts of the next ledger line (replacing those of an earlier line of the same id)."""
        self._lines += 1
        self._pending.append((
            self._lines, id_key(rollout_id), fact.lineno, fact.offset, fact.length, fact.reward, fact.gated,
            fact.role, fact.has_gap, fact.error, fact.completed, fact.truncated, fact.instance_id,
        ))  # fmt: skip
        if len(self._pending) >= _BATCH:
            self._stage()

    def _stage(self) -> None:
        # One transaction a batch, not one a line.
        self.connection.execute("BEGIN")
        self.connection.executemany(_STAGE, self._pending)
        self.connection.execute("COMMIT")
        self._pending.clear()
        self._staged = True

    def flush(self) -> None:
        """Every line added, in `facts`."""
        if self._pending:
            self._stage()
        if self._staged:
            self.connection.executescript(f"BEGIN; {_SETTLE} COMMIT;")
            self._staged = False

    def query(self, sql: str, parameters: Iterable[Any] = ()) -> sqlite3.Cursor:
        """`sql` on the facts added so far (and any table the caller made beside them)."""
        self.flush()
        return self.connection.execute(sql, tuple(parameters))

    def get(self, rollout_id: str, default: LedgerFacts | None = None) -> LedgerFacts | None:
        found = self.query(f"SELECT {FACT_COLUMNS} FROM facts WHERE rollout_id = ?", (id_key(rollout_id),)).fetchone()
        return default if found is None else fact_of(found)

    def get_many(self, rollout_ids: Iterable[Any]) -> dict[Any, LedgerFacts]:
        """rollout_id -> facts of each of `rollout_ids` that is a line: the lines of a batch of
        rows found by a query for every few hundred ids, not one an id."""
        keys = list(dict.fromkeys(id_key(rollout_id) for rollout_id in rollout_ids))
        found = {}
        for start in range(0, len(keys), _MANY):
            part = keys[start : start + _MANY]
            sql = f"SELECT rollout_id, {FACT_COLUMNS} FROM facts WHERE rollout_id IN ({', '.join('?' * len(part))})"
            for rollout_id, *row in self.query(sql, part):
                found[id_of(rollout_id)] = fact_of(row)
        return found

    def __contains__(self, rollout_id: object) -> bool:
        return self.query("SELECT 1 FROM facts WHERE rollout_id = ?", (id_key(rollout_id),)).fetchone() is not None

    def __len__(self) -> int:
        return self.query("SELECT count(*) FROM facts").fetchone()[0]

    def items(self) -> Iterator[tuple[str, LedgerFacts]]:
        """(rollout_id, facts) of every line, in the order of their first lines."""
        for rollout_id, *row in self.query(f"SELECT rollout_id, {FACT_COLUMNS} FROM facts ORDER BY n"):
            yield id_of(rollout_id), fact_of(row)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@contextlib.contextmanager
def opened(ledger: Ledger) -> Iterator[LedgerSnapshot]:
    if isinstance(ledger, LedgerSnapshot):
        yield ledger
    else:
        with LedgerSnapshot(ledger) as snapshot:
            yield snapshot


def ledger_facts(ledger: Ledger) -> LedgerFactsTable:
    """rollout_id -> what the checks need of that line, read straight from the ledger file, on
    disk (the caller closes it)."""
    table = LedgerFactsTable()
    try:
        with opened(ledger) as snapshot:
            for lineno, (offset, raw) in enumerate(snapshot.lines(), start=1):
                line = orjson.loads(raw)
                outcome = line["outcome"]
                fact = LedgerFacts(
                    lineno,
                    offset,
                    len(raw),
                    outcome["reward"],
                    outcome["realness_gated"] is True,
                    line["role"],
                    not line["messages"] or line["provenance"].get("gap") is not None,
                    outcome["error"] is not None,
                    outcome["is_completed"] is True,
                    outcome["is_truncated"] is True,
                    str((line.get("task") or {}).get("instance_id")),
                )
                table.add(line["rollout_id"], fact)
        table.flush()
    except BaseException:
        table.close()
        raise
    return table


@contextlib.contextmanager
def facts_of(ledger: Ledger, facts: LedgerFactsTable | None) -> Iterator[LedgerFactsTable]:
    """`facts` when given (the caller's to close), else the ledger's, closed afterwards."""
    if facts is not None:
        yield facts
        return
    with ledger_facts(ledger) as made:
        yield made


def report_settings(files: TrainingFiles) -> dict[str, Any]:
    """The settings the rows were built with, as the export's report records them."""
    return orjson.loads(files.report_json.read_bytes())["filter"]
