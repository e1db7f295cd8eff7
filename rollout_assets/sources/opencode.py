"""The opencode store reader: worker sessions and their transcripts (docs/input-formats.md §4).

Owns: opening the store's snapshot read-only, finding the sessions of worker directories, and
reading a session's messages and parts (turned into chat messages by
sources/opencode_transcript.py). Does not own: which cwds to look up (the round) or the ledger
line built around a session (the join).

The store is read from the round's private snapshot of it (sources/opencode_store.py), so
nothing is ever written to it or beside it. A store that is missing, cannot be opened or fails
its first read is "no store" (`None`), never an exception: the round still completes, with
labeled gap lines saying why. A store another process keeps locked fails the round instead.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from rollout_assets.io import NotJson, is_number, is_record, parse_json
from rollout_assets.sources.opencode_store import (
    OpencodeStoreBusy as OpencodeStoreBusy,  # raised by open(), for its callers
    OpencodeStoreError,
    StoreUnavailable,
    record_problem,
    round_snapshot,
    sqlite_uri,
)
from rollout_assets.sources.opencode_transcript import SessionTranscript, session_transcript

DEFAULT_OPENCODE_DB = os.path.join(os.path.expanduser("~"), ".local", "share", "opencode", "opencode.db")

# Cost and token columns arrived in later opencode versions; an older store lacks them,
# and a missing column reads as null (unmeasured), never as 0.
_SESSION_COLUMNS = (
    "id",
    "parent_id",
    "directory",
    "agent",
    "model",
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
    "time_created",
    "time_updated",
)
_REQUIRED_SESSION_COLUMNS = {"id", "directory"}

# Directories per session query. `session.directory` has no index in opencode's schema, so each
# query scans the whole session table: the fewer queries, the less a large store costs (one per
# 256 cells, a cost that grew with the square of the round at 500). SQLite allows 32766 host
# parameters since 3.32, 999 before.
_DIRECTORY_BATCH = 32_000 if sqlite3.sqlite_version_info >= (3, 32, 0) else 900


@dataclass(frozen=True)
class OpencodeSession:
    """One row of the `session` table, with the model JSON unpacked."""

    id: str
    parent_id: str | None
    directory: str
    agent: str | None
    model_id: str | None
    provider_id: str | None
    cost_usd: int | float | None
    tokens_input: int | float | None
    tokens_output: int | float | None
    tokens_reasoning: int | float | None
    tokens_cache_read: int | float | None
    tokens_cache_write: int | float | None
    time_created: int | float | None
    time_updated: int | float | None


class OpencodeStoreChanged(OpencodeStoreError):
    """The store was readable when a round started and is not any more: its ledger would mix
    joined sessions with "store unavailable" gaps, so it is not written."""


class OpencodeStore:
    """A read-only connection to one opencode database."""

    def __init__(self, path: Path, connection: sqlite3.Connection, session_columns: set[str], encoding: str):
        self.path = path
        self._connection = connection
        self._session_columns = session_columns
        self._directory_indexed = False
        # The JSON columns are read as the stored bytes when those are UTF-8 (no decoded copy
        # of a huge part). A store created as UTF-16 holds UTF-16 bytes: its text is read as
        # text, which SQLite hands over as UTF-8.
        data = "CAST({} AS BLOB)" if encoding == "UTF-8" else "{}"
        self._messages_query = (
            f"SELECT id, {data.format('data')} FROM message WHERE session_id = ? ORDER BY time_created, id"
        )
        self._parts_query = (
            f"SELECT p.message_id, {data.format('p.data')} FROM part AS p JOIN message AS m ON m.id = p.message_id "
            "WHERE m.session_id = ? ORDER BY p.id"
        )

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> OpencodeStore | None:
        """The store as this round reads it: its snapshot (sources/opencode_store.py), opened
        read-only. None when the store cannot be read, missing, unreadable or corrupt
        (`opencode_store.last_problem()` says why); OpencodeStoreBusy when another process
        kept it locked longer than the round waits."""
        path = Path(path)
        try:
            snapshot = round_snapshot(path)
        except StoreUnavailable:
            return None
        # Immutable: nobody writes the private copy, so SQLite takes no lock and creates no file.
        uri = sqlite_uri(snapshot.path, mode="ro", immutable="1")
        try:
            connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except sqlite3.Error as error:
            record_problem(f"{path}: {error}")
            return None
        # SQLite stores TEXT unchecked: invalid UTF-8 in one value (a tool output cut mid
        # character) would fail the whole session's read. Decoded with replacement instead,
        # as the seed's JavaScript reads it. (The JSON `data` columns are read as bytes, which
        # the JSON parser decodes the same way without a second copy of a huge part.)
        connection.text_factory = _decode_text
        try:
            # The first read proves the file is a database with a session table:
            # corrupt stores exist in the wild and fail right here.
            columns = {row[1] for row in connection.execute("PRAGMA table_info(session)")}
            encoding = connection.execute("PRAGMA encoding").fetchone()[0]
            connection.execute("SELECT 1 FROM message LIMIT 1").fetchall()
            connection.execute("SELECT 1 FROM part LIMIT 1").fetchall()
            if _REQUIRED_SESSION_COLUMNS <= columns:
                # Every session lookup walks the session table: a damaged page there would
                # fail the round half-way, so the whole table is read once now (10-25 ms
                # for 96,000 sessions). Damage in a message or part page costs only the
                # sessions it holds (see session_messages).
                connection.execute("SELECT count(directory) FROM session").fetchall()
        except sqlite3.Error as error:
            connection.close()
            record_problem(f"{path}: {error}")
            return None
        if not _REQUIRED_SESSION_COLUMNS <= columns:
            connection.close()
            record_problem(f"{path}: not an opencode store (its session table has no id and directory)")
            return None
        return cls(path, connection, columns, encoding)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def index_directories(self) -> None:
        """Index the sessions by directory, once, for a connection that will serve many lookups.

        opencode's schema has no index on `session.directory`, so every `sessions_by_directory`
        query scans the whole session table: a backfill of N units costs N scans, a cost that
        grows with the square of the round. One scan here builds an index in the connection's
        own temp database; the store file itself is never written. Where the temp database
        cannot be written, lookups go on scanning.
        """
        if self._directory_indexed:
            return
        try:
            self._connection.execute(
                "CREATE TEMP TABLE session_directory AS SELECT directory, id FROM session"
            )
            self._connection.execute(
                "CREATE INDEX temp.session_directory_by_directory ON session_directory (directory)"
            )
        except sqlite3.Error:
            return
        self._directory_indexed = True

    def sessions_by_directory(self, directories: Iterable[str]) -> dict[str, list[OpencodeSession]]:
        """Sessions whose `directory` is one of `directories`, oldest first per directory.

        One query per batch of directories, not one per worker: an index lookup once
        `index_directories` has run, else a scan of the session table.
        """
        # A directory holding a lone surrogate cannot be bound as SQL text, and no stored
        # directory can equal it (stored text is decoded with replacement characters).
        wanted = [directory for directory in dict.fromkeys(directories) if _is_utf8_text(directory)]
        found: dict[str, list[OpencodeSession]] = {}
        select = ", ".join(
            column if column in self._session_columns else f"NULL AS {column}" for column in _SESSION_COLUMNS
        )
        for start in range(0, len(wanted), _DIRECTORY_BATCH):
            batch = wanted[start : start + _DIRECTORY_BATCH]
            placeholders = ", ".join("?" for _ in batch)
            if self._directory_indexed:
                where = f"id IN (SELECT id FROM temp.session_directory WHERE directory IN ({placeholders}))"
            else:
                where = f"directory IN ({placeholders})"
            rows = self._connection.execute(
                f"SELECT {select} FROM session WHERE {where} ORDER BY time_created, id", batch
            )
            for row in rows:
                session = _session_from_row(row)
                if session is not None:
                    found.setdefault(session.directory, []).append(session)
        return found

    def session_transcript(self, session_id: str) -> SessionTranscript:
        """The session as the model saw it (sources/opencode_transcript.py); no messages when
        nothing readable is left.

        A read that fails half-way (a damaged page of the snapshot) yields no messages too: the
        join labels that session "no readable message parts" instead of losing the round.
        """
        try:
            rows = self._connection.execute(self._messages_query, (session_id,)).fetchall()
            parts: dict[Any, list[Any]] = {}
            for message_id, data in self._connection.execute(self._parts_query, (session_id,)):
                parts.setdefault(message_id, []).append(data)
        except sqlite3.Error:
            return SessionTranscript()
        messages = []
        for message_id, data in rows:
            message = _json_object(data)
            if message is None:
                continue  # a malformed message is skipped; the rest is kept
            part_records = [p for p in (_json_object(d) for d in parts.get(message_id, [])) if p is not None]
            messages.append((message, part_records))
        return session_transcript(messages)

    def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        """The session's transcript as chat messages; [] when nothing readable is left."""
        return self.session_transcript(session_id).messages


def _is_utf8_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _number(value: Any) -> int | float | None:
    # SQLite REAL columns can hold Infinity and NaN (JSON cannot): those read as unknown.
    return value if is_number(value) and math.isfinite(value) else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _session_from_row(row: tuple[Any, ...]) -> OpencodeSession | None:
    values = dict(zip(_SESSION_COLUMNS, row))
    if not isinstance(values["id"], str) or not isinstance(values["directory"], str):
        return None
    model = _json_object(values["model"]) or {}
    return OpencodeSession(
        id=values["id"],
        # SQLite types values per row, not per column: a BLOB or REAL here is no id or name.
        parent_id=_string(values["parent_id"]),
        directory=values["directory"],
        agent=_string(values["agent"]),
        # policy.model/provider are strings or null: a non-string id is an unknown model.
        model_id=_string(model.get("id")),
        provider_id=_string(model.get("providerID")),
        cost_usd=_number(values["cost"]),
        tokens_input=_number(values["tokens_input"]),
        tokens_output=_number(values["tokens_output"]),
        tokens_reasoning=_number(values["tokens_reasoning"]),
        tokens_cache_read=_number(values["tokens_cache_read"]),
        tokens_cache_write=_number(values["tokens_cache_write"]),
        time_created=_number(values["time_created"]),
        time_updated=_number(values["time_updated"]),
    )


def _json_object(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, (str, bytes)):
        return None
    try:
        value = parse_json(data, max_nesting=None)  # its values reach a line as text only
    except NotJson:
        return None
    return value if is_record(value) else None
