"""The accounting check of a dataset (`check_accounting`): every ledger line has exactly one
fate, the lines in rows are those the accounting keeps, a drop reason holds, and the dataset's
own rules hold.

The accounting file's fates and the rollout ids the rows hold go to tables beside the ledger's
facts (verify_facts.py, one SQLite file), and each comparison is a query, its results streamed
in the order the problems are told: no dict or Counter of every line.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Iterator
from typing import IO, Any

import orjson

from rollout_assets.training.files import TrainingFiles, parquet_rows
from rollout_assets.training.recount_identifiers import RowRecount
from rollout_assets.training.verify_facts import (
    FACT_COLUMNS,
    SAMPLE,
    Ledger,
    LedgerFacts,
    LedgerFactsTable,
    TrainingVerdict,
    fact_of,
    facts_of,
    id_key,
    id_of,
    opened,
    report_settings,
)

_BATCH = 2_000
# The reasons of a line alone, in the order the filter tests them (docs/training.md): a line is
# dropped for the first that holds, so an errored line is `error`, never `incomplete`.
_LINE_REASON_ORDER = ("gap", "role_excluded", "gated", "error", "incomplete", "truncated", "no_reward")
_PER_LINE_REASONS = set(_LINE_REASON_ORDER)

# Where a row names its lines: the accounting reads these columns only, not the transcripts.
_ID_COLUMNS = {"sft_rows": ["metadata"], "preference_pairs": ["metadata"], "grpo_groups": ["rollout_ids"]}

# Rollout ids are stored as `id_key` gives them. `entry`: the accounting file's entries as read,
# settled into `fate`: each rollout id the accounting names, with the place of its first entry
# (`n`), the fate of its last and how many entries name it (a dict filled in the file's order
# holds the same), written in the ids' order. `held`: each rollout id of a row, as often as rows
# hold it. `kept`: the (role, instance) and reward (0 when null) of each line accounted as a row,
# for the SFT cap.
_TABLES = """
DROP TABLE IF EXISTS entry; DROP TABLE IF EXISTS fate; DROP TABLE IF EXISTS held; DROP TABLE IF EXISTS kept;
CREATE TABLE entry (n INTEGER PRIMARY KEY, rollout_id NOT NULL, fate);
CREATE TABLE fate (rollout_id PRIMARY KEY, n INTEGER NOT NULL, fate, entries INTEGER NOT NULL DEFAULT 1) WITHOUT ROWID;
CREATE TABLE held (rollout_id);
"""
_DROP = "DROP TABLE IF EXISTS entry; DROP TABLE IF EXISTS fate; DROP TABLE IF EXISTS held; DROP TABLE IF EXISTS kept;"
_SETTLE_FATES = """
BEGIN;
INSERT INTO fate (rollout_id, n, fate) SELECT rollout_id, n, fate FROM entry WHERE true ORDER BY rollout_id, n
    ON CONFLICT (rollout_id) DO UPDATE SET fate = excluded.fate, entries = entries + 1;
DELETE FROM entry;
COMMIT;
"""
# The SQL twin of `_reason_holds`, for the query that passes over the lines whose fate is
# right beyond doubt; each line it lets through is judged by `_fate_problem`.
_REASON_SQL = {
    "gap": "f.has_gap",
    "role_excluded": "(f.role IS NULL OR f.role NOT IN ({roles}))",
    "gated": "f.gated",
    "error": "f.error",
    "incomplete": "NOT f.completed",
    "truncated": "f.truncated",
    "no_reward": "f.reward IS NULL",
}
_FIRST_REASON_SQL = "CASE " + " ".join(f"WHEN {_REASON_SQL[r]} THEN '{r}'" for r in _LINE_REASON_ORDER) + " END"
# A fate is right when it is `row`, a row holds the line and no reason of the line alone holds;
# or it is a reason, no row holds the line, and it is the first reason that holds (or, none
# holding, a reason of another kind).
_RIGHT_FATE_SQL = (
    "fate IS NOT NULL AND CASE WHEN fate = 'row' THEN held AND first IS NULL ELSE NOT held AND (fate = first OR"
    f" (first IS NULL AND fate NOT IN ({', '.join(repr(reason) for reason in _LINE_REASON_ORDER)}))) END"
)


def _lines_sql(roles: int) -> str:
    """Every ledger line whose fate may be wrong, with its fate (NULL: none) and whether a row
    holds it; in the ids' order, the order of the three tables, each read page after page. The
    parameters are the `roles` roles the rows were built from."""
    first = _FIRST_REASON_SQL.format(roles=", ".join("?" * roles))
    return (
        f"SELECT n, rollout_id, fate, held, {FACT_COLUMNS} FROM (SELECT f.*, a.fate AS fate,"
        f" EXISTS (SELECT 1 FROM held h WHERE h.rollout_id = f.rollout_id) AS held, {first} AS first"
        f" FROM facts f LEFT JOIN fate a ON a.rollout_id = f.rollout_id) WHERE NOT coalesce({_RIGHT_FATE_SQL}, 0)"
    )


_TOO_LONG = (
    "SELECT f.lineno, f.offset, f.length FROM facts f JOIN fate a ON a.rollout_id = f.rollout_id"
    " WHERE a.fate = 'too_long' ORDER BY f.n"
)
_NOT_LINES = (
    "SELECT a.rollout_id FROM fate a WHERE NOT EXISTS (SELECT 1 FROM facts f WHERE f.rollout_id = a.rollout_id)"
    " ORDER BY a.n"
)
_KEPT = """
CREATE TABLE kept AS SELECT f.role AS role, f.instance_id AS instance_id, coalesce(f.reward, 0.0) AS reward
    FROM fate a JOIN facts f ON f.rollout_id = a.rollout_id WHERE a.fate = 'row';
CREATE INDEX kept_key ON kept (role, instance_id, reward);
"""
_KEPT_PER_INSTANCE = "SELECT role, instance_id, count(*) FROM kept GROUP BY role, instance_id ORDER BY role, instance_id"
# Each line dropped by the cap, in the accounting's order, with the kept lines of its (role,
# instance) rewarded at least as well (all of them when its reward is null).
_CAPPED = (
    "SELECT a.rollout_id, f.lineno, f.role, f.instance_id, (SELECT count(*) FROM kept k"
    "  WHERE k.role IS f.role AND k.instance_id IS f.instance_id AND (f.reward IS NULL OR k.reward >= f.reward))"
    " FROM fate a JOIN facts f ON f.rollout_id = a.rollout_id WHERE a.fate = 'per_instance_cap' ORDER BY a.n"
)


def row_ids(dataset: str, row: dict[str, Any]) -> list[str]:
    """The rollout ids of the lines a row of `dataset` holds, in its order."""
    if dataset == "sft_rows":
        return [row["metadata"]["rollout_id"]]
    if dataset == "preference_pairs":
        return [row["metadata"]["chosen_rollout_id"], row["metadata"]["rejected_rollout_id"]]
    return row["rollout_ids"]


def check_accounting(
    ledger: Ledger,
    files: TrainingFiles,
    dataset: str,
    facts: LedgerFactsTable | None = None,
    settings: dict[str, Any] | None = None,
) -> TrainingVerdict:
    """Every ledger line has exactly one fate (a row, or a drop reason), kept + dropped =
    lines, the lines in rows are exactly those the accounting keeps, and a per-line drop
    reason is true of the line (`too_long` by the checks' own count of its normalized transcript)
    and is the first reason of the line alone that holds."""
    verdict = TrainingVerdict(True)
    with facts_of(ledger, facts) as facts:
        settings = settings if settings is not None else report_settings(files)
        recount = RowRecount(settings)
        with _accounting_tables(facts), open(files.accounting(dataset), "rb") as handle:
            entries = _read_fates(facts, handle)
            if entries > facts.query("SELECT count(*) FROM fate").fetchone()[0]:
                _accounted_twice(facts, handle, verdict)
            _read_held(facts, files, dataset)
            _lines_hold(ledger, facts, recount, set(settings.get("roles") or ()), verdict)
            _dataset_rules_hold(dataset, files, facts, settings, verdict)
            lines = len(facts)
            accounted, kept = facts.query("SELECT count(*), coalesce(sum(fate = 'row'), 0) FROM fate").fetchone()
    verdict.counts = {"lines": lines, "kept": kept, "dropped": accounted - kept}
    if kept + verdict.counts["dropped"] != lines:
        verdict.fail(f"kept {kept} + dropped {verdict.counts['dropped']} is not the ledger's {lines} lines")
    return verdict


@contextlib.contextmanager
def _accounting_tables(facts: LedgerFactsTable) -> Iterator[None]:
    """The accounting's tables beside the facts, for one dataset; dropped afterwards."""
    facts.flush()
    facts.connection.executescript(_TABLES)
    try:
        yield
    finally:
        facts.connection.executescript(_DROP)


def _write(facts: LedgerFactsTable, sql: str, pending: list[tuple[Any, ...]]) -> None:
    if pending:
        facts.connection.execute("BEGIN")
        facts.connection.executemany(sql, pending)
        facts.connection.execute("COMMIT")
        pending.clear()


def _read_fates(facts: LedgerFactsTable, handle: IO[bytes]) -> int:
    """The accounting file's fates into `fate`; how many entries it has."""
    pending: list[tuple[Any, ...]] = []
    entries = 0
    for entries, raw in enumerate(handle, start=1):
        entry = orjson.loads(raw)
        pending.append((entries, id_key(entry["rollout_id"]), entry["fate"]))
        if len(pending) >= _BATCH:
            _write(facts, "INSERT INTO entry (n, rollout_id, fate) VALUES (?, ?, ?)", pending)
    _write(facts, "INSERT INTO entry (n, rollout_id, fate) VALUES (?, ?, ?)", pending)
    facts.connection.executescript(_SETTLE_FATES)
    return entries


def _accounted_twice(facts: LedgerFactsTable, handle: IO[bytes], verdict: TrainingVerdict) -> None:
    """Each entry whose rollout id an earlier entry names, in the file's order (read again:
    only when `fate` holds fewer ids than the file has entries)."""
    handle.seek(0)
    for number, raw in enumerate(handle, start=1):
        entry = orjson.loads(raw)
        (first,) = facts.query("SELECT n FROM fate WHERE rollout_id = ?", (id_key(entry["rollout_id"]),)).fetchone()
        if first < number:
            verdict.fail(f"line {entry['line']} ({entry['rollout_id']}) is accounted for twice")


def _read_held(facts: LedgerFactsTable, files: TrainingFiles, dataset: str) -> None:
    """The rollout ids the rows hold into `held`, indexed once written."""
    pending: list[tuple[Any, ...]] = []
    for row in parquet_rows(files.parquet(dataset), _ID_COLUMNS[dataset]):
        pending.extend((id_key(rollout_id),) for rollout_id in row_ids(dataset, row))
        if len(pending) >= _BATCH:
            _write(facts, "INSERT INTO held (rollout_id) VALUES (?)", pending)
    _write(facts, "INSERT INTO held (rollout_id) VALUES (?)", pending)
    facts.connection.execute("CREATE INDEX held_id ON held (rollout_id)")


def _lines_hold(
    ledger: Ledger, facts: LedgerFactsTable, recount: RowRecount, roles: set[str], verdict: TrainingVerdict
) -> None:
    """Each ledger line's fate against the rows and the line itself, in ledger order; then each
    line dropped as too_long recounted; then each rollout id the accounting names beyond them."""
    # The problems as the ledger orders them: the first SAMPLE are all a verdict keeps.
    for _, problem in heapq.nsmallest(SAMPLE, _line_problems(facts, roles)):
        verdict.fail(problem)
    with opened(ledger) as snapshot:
        for lineno, offset, length in facts.query(_TOO_LONG):
            if not recount.too_long(orjson.loads(snapshot.read(offset, length))):
                verdict.fail(f"ledger line {lineno} is dropped as too_long, which it is not")
    path = getattr(ledger, "path", ledger)
    for (rollout_id,) in facts.query(_NOT_LINES):
        verdict.fail(f"the accounting names {id_of(rollout_id)}, which is not a line of {path}")


def _line_problems(facts: LedgerFactsTable, roles: set[str]) -> Iterator[tuple[int, str]]:
    """(place in the ledger, problem) of each line whose fate is wrong, in no order: each line
    the query lets through judged here."""
    for n, rollout_id, fate, held, *row in facts.query(_lines_sql(len(roles)), roles):
        fact = fact_of(row)
        if (problem := _fate_problem(fate, bool(held), fact, roles)) is not None:
            yield n, f"ledger line {fact.lineno} ({id_of(rollout_id)}) {problem}"


def _fate_problem(fate: Any, held: bool, fact: LedgerFacts, roles: set[str]) -> str | None:
    """What is wrong with a line's fate (None: no fate), given whether a row holds it."""
    if fate is None:
        return "is neither in a row nor dropped"
    if fate == "row" and not held:
        return "is accounted as a row but no row holds it"
    if fate != "row" and held:
        return f"is dropped as {fate} but a row holds it"
    if fate in _PER_LINE_REASONS and not _reason_holds(fate, fact, roles):
        return f"is dropped as {fate}, which it is not"
    if (first := _first_line_reason(fact, roles)) is not None and fate != first:
        return f"is {fate}, but {first} holds first"
    return None


def _dataset_rules_hold(
    dataset: str, files: TrainingFiles, facts: LedgerFactsTable, settings: dict[str, Any], verdict: TrainingVerdict
) -> None:
    """The rules of each dataset, recounted from the rows and the ledger's facts: a GRPO group
    holds two lines or more; SFT rows per (role, instance) are at most the cap, and a line
    dropped by the cap has that many kept lines of its (role, instance) rewarded at least as
    well."""
    if dataset == "grpo_groups":
        for number, row in enumerate(parquet_rows(files.parquet(dataset), ["rollout_ids"]), start=1):
            if len(row["rollout_ids"]) < 2:
                verdict.fail(f"group {number} holds {len(row['rollout_ids'])} line(s); a group needs two or more")
    if dataset != "sft_rows" or settings.get("per_instance_cap") is None:
        return
    cap = settings["per_instance_cap"]
    facts.connection.executescript(_KEPT)
    for role, instance, rows in facts.query(_KEPT_PER_INSTANCE):
        if rows > cap:
            verdict.fail(f"{rows} SFT rows of {role} on {instance}, above the cap of {cap}")
    for rollout_id, lineno, role, instance, better in facts.query(_CAPPED):
        if better < cap:
            verdict.fail(
                f"ledger line {lineno} ({id_of(rollout_id)}) is dropped by the cap, but only {better} kept "
                f"rows of {role} on {instance} are rewarded as well"
            )


def _first_line_reason(fact: LedgerFacts, roles: set[str]) -> str | None:
    return next((reason for reason in _LINE_REASON_ORDER if _reason_holds(reason, fact, roles)), None)


def _reason_holds(reason: str, fact: LedgerFacts, roles: set[str]) -> bool:
    return {
        "gap": fact.has_gap,
        "role_excluded": fact.role not in roles,
        "gated": fact.gated,
        "error": fact.error,
        "incomplete": not fact.completed,
        "truncated": fact.truncated,
        "no_reward": fact.reward is None,
    }[reason]
