"""The ledger file API: validate every line, write atomically, read back loudly.

Owns the JSONL file of `tangle.rollout.v1` lines: UTF-8, one compact JSON object per line,
`\\n` after every line. Does not own what goes into a line (backfill/) nor what a valid
line is (ledger/schema.py).

Lines are plain dicts produced elsewhere. The writer validates each one and writes the
dict itself, key order included: it never rewrites a line through the model.
"""

import contextlib
import fcntl
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self

import orjson
from pydantic import ValidationError

from rollout_assets.errors import RoundError
from rollout_assets.file_copy import copy_range
from rollout_assets.ledger.schema import PARSED_FROM_JSON, ROLLOUT_SCHEMA, RolloutLine

StrPath = str | os.PathLike[str]


class LedgerValidationError(ValueError):
    """A line handed to the writer is not a valid `tangle.rollout.v1` line."""


class LedgerReadError(ValueError):
    """A ledger file is corrupt; the message starts with `path:lineno:`."""


def _rollout_id_of(line: Any) -> str:
    if isinstance(line, dict) and isinstance(line.get("rollout_id"), str):
        return repr(line["rollout_id"])
    return "<no rollout_id>"


def validate_line(line: dict[str, Any]) -> None:
    """Raise LedgerValidationError, naming the rollout, unless `line` is a valid tangle.rollout.v1 line."""
    _validate(line)


def _validate(line: dict[str, Any]) -> None:
    try:
        RolloutLine.model_validate(line)
    except ValidationError as error:
        raise LedgerValidationError(
            f"rollout {_rollout_id_of(line)} is not a valid {ROLLOUT_SCHEMA} line: {error}"
        ) from error


def _encode_record(record: dict[str, Any]) -> bytes:
    """One JSONL line (newline included): compact UTF-8 JSON of the dict, key order kept.

    orjson writes it (several times faster than the standard module). What orjson refuses,
    the standard module writes: integers beyond 64 bits, and a lone UTF-16 surrogate (a
    truncated emoji escape in a tool output), which has no UTF-8 form and is written as an
    escape, as JavaScript's JSON.stringify does; the JSON value is the same. NaN and
    Infinity never reach here: strict parsing refuses them in inputs, validation in lines.
    """
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        # The model accepts a few non-JSON Python values (a model instance, a tuple of
        # messages); the file must hold plain JSON only.
        raise LedgerValidationError(f"rollout {_rollout_id_of(record)} is not plain JSON: {error}") from error
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def decode_record(raw: bytes) -> Any:
    """A line this module wrote, parsed back: by orjson, or by the standard module where orjson
    refuses what `_encode_record` writes (a lone surrogate's escape). For files this project
    wrote itself (stage files); a file from elsewhere goes through `iter_jsonl`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def serialize_line(line: dict[str, Any]) -> str:
    """Validate one line and return its compact JSON, without the trailing newline."""
    _validate(line)
    return _encode_record(line)[:-1].decode("utf-8")


class WriterBusyError(RoundError, RuntimeError):
    """Another process is writing the same file right now."""


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _acquire_lock(path: Path) -> int:
    """An exclusive lock on `.<basename>.lock`; WriterBusyError when another writer holds it.

    The lock file is removed again on release. A writer that opened it just before that
    removal would lock a file no longer in the folder, so after locking, the descriptor
    must still be the file at the lock path; otherwise try again with the new one.
    """
    lock_path = _lock_path(path)
    while True:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise WriterBusyError(
                f"{path} is being written by another process right now (lock {lock_path}); "
                "not writing it twice at once"
            ) from None
        try:
            same_file = os.stat(lock_path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            return descriptor
        os.close(descriptor)


def _release_lock(path: Path, descriptor: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_lock_path(path))
    os.close(descriptor)  # closing the descriptor releases the lock


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Hold the lock every writer of `path` takes (`.<basename>.lock` beside it, removed
    afterwards): WriterBusyError at once when another process holds it."""
    descriptor = _acquire_lock(path)
    try:
        yield
    finally:
        _release_lock(path, descriptor)


def _temp_path(path: Path) -> Path:
    """A new temp file name for a write of `path`: `.<basename>.<16 hex digits>.tmp`."""
    return path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"


def segment_prefix(path: Path) -> str:
    """The start of the names of one run's segment files beside `path` (worker processes'
    parts of it, backfill/parallel.py): each is `<prefix><6 or more digits>.tmp`. A token per
    run, so no stray process of an earlier run can write one of this run's segments."""
    return f".{path.name}.segment-{secrets.token_hex(4)}-"


def _own_temp_name(path: Path) -> re.Pattern[str]:
    """The names of the temp and segment files of writes of `path`, and of no other path.

    A prefix is not enough: `.ledger.jsonl.` also starts the temp files of a concurrent writer
    of `ledger.jsonl.1`, which holds another lock and must not lose its file. The token's exact
    shape makes each name belong to one path only.
    """
    return re.compile(re.escape(f".{path.name}.") + r"(?:[0-9a-f]{16}|segment-[0-9a-f]{8}-[0-9]{6,})\.tmp")


def _remove_stale_temp_files(path: Path) -> None:
    """Temp files of this path left by a killed writer (only called while holding the lock)."""
    own = _own_temp_name(path)
    for name in os.listdir(path.parent):
        if own.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.parent / name)


class AtomicJsonlWriter:
    """Streams JSON records into a JSONL file that appears at `path` only once it is complete.

    Lines go to `.<basename>.<16 hex digits>.tmp` in the same folder (so the final rename stays on
    one filesystem and is atomic). A clean exit fsyncs the file, renames it onto `path`
    and fsyncs the folder; any exception deletes the temp file and leaves an existing
    ledger at `path` byte-identical. Readers never see a half-written ledger.

    Two writers of one path never run at once: the writer holds an exclusive lock on
    `.<basename>.lock` (beside the file, removed on release) from start to rename, and a second
    writer fails at once with WriterBusyError. Holding the lock also makes it safe to
    delete temp files a killed writer left behind, which every writer does on start.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        self.count = 0
        self._temp_path: Path | None = None
        self._file: BinaryIO | None = None
        self._lock: int | None = None

    def __enter__(self) -> Self:
        if self._file is not None:
            raise RuntimeError(f"{type(self).__name__} for {self.path} is already open")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _acquire_lock(self.path)
        try:
            _remove_stale_temp_files(self.path)
            # Named before it exists: an interrupt (Ctrl-C) right after the file is created
            # must still find it to delete.
            self._temp_path = _temp_path(self.path)
            # O_EXCL: never share a temp file with a concurrent writer. Mode 0o666 under the
            # umask, so the ledger gets ordinary permissions (mkstemp would make it 0600).
            descriptor = os.open(self._temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            self._file = os.fdopen(descriptor, "wb")
        except BaseException:
            # __exit__ does not run when __enter__ raises: no temp or lock file may stay behind.
            try:
                self._discard()
            finally:
                _release_lock(self.path, self._lock)
                self._lock = None
            raise
        self.count = 0
        return self

    def encode(self, record: dict[str, Any]) -> bytes:
        """One line of JSON (no validation: a stage file of this project's own rows)."""
        return _encode_record(record)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record; a record that cannot be written raises before anything is appended."""
        if self._file is None:
            raise RuntimeError(f"{type(self).__name__}.write called outside its `with` block")
        self._file.write(self.encode(record))
        self.count += 1

    def write_encoded(self, encoded: bytes) -> None:
        """Append one line already encoded by this writer's `encode` (newline included)."""
        if self._file is None:
            raise RuntimeError(f"{type(self).__name__}.write_encoded called outside its `with` block")
        self._file.write(encoded)
        self.count += 1

    def append_file(self, path: StrPath, lines: int) -> None:
        """Append a file of `lines` lines already encoded by this writer's `encode` (a segment
        written by a worker process)."""
        with open(path, "rb") as segment:
            self.append_range(segment, 0, os.fstat(segment.fileno()).st_size, lines)

    def append_range(self, source: BinaryIO, offset: int, length: int, lines: int) -> None:
        """Append `length` bytes of `source` from `offset`: `lines` whole lines already encoded
        by this writer's `encode`. The kernel copies them (no pass through Python's buffers);
        `source`'s own position is left where it was."""
        if self._file is None:
            raise RuntimeError(f"{type(self).__name__}.append_range called outside its `with` block")
        # What was written before goes first. The kernel writes at, and advances, the file's
        # offset, where the buffered file object's next flush writes too.
        self._file.flush()
        copied = copy_range(source.fileno(), self._file.fileno(), offset, length)
        if copied != length:
            raise ValueError(
                f"{getattr(source, 'name', source)}: {length} bytes expected from offset {offset}, "
                f"only {copied} there"
            )
        self.count += lines

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc_type is not None:
                self._discard()
                return
            try:
                self._commit()
            except BaseException:
                self._discard()
                raise
        finally:
            if self._lock is not None:
                _release_lock(self.path, self._lock)
                self._lock = None

    def _commit(self) -> None:
        assert self._file is not None and self._temp_path is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._temp_path, self.path)
        self._temp_path = None
        # The rename is durable only once the folder entry itself is on disk.
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def _discard(self) -> None:
        """Delete the temp file, whatever else fails: the lines in it are being thrown away."""
        file, self._file = self._file, None
        temp_path, self._temp_path = self._temp_path, None
        try:
            if temp_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    temp_path.unlink()
        finally:
            if file is not None:
                # Closing flushes the buffer, which fails again on a full disk. The descriptor is
                # closed anyway, and that error must not hide the one that made us discard.
                with contextlib.suppress(OSError):
                    file.close()


class LedgerWriter(AtomicJsonlWriter):
    """An atomic JSONL writer of `tangle.rollout.v1` lines: every line is validated first.

    A bad line raises LedgerValidationError and, through the `with` block, discards the
    whole file: an existing ledger at `path` stays byte-identical.
    """

    def encode(self, record: dict[str, Any]) -> bytes:
        _validate(record)
        return _encode_record(record)


def write_ledger(path: StrPath, lines: Iterable[dict[str, Any]]) -> int:
    """Write `lines` as the ledger at `path`, all or nothing; returns the line count."""
    with LedgerWriter(path) as writer:
        for line in lines:
            writer.write(line)
    return writer.count


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_line(raw: bytes, path: StrPath, lineno: int) -> dict[str, Any]:
    """Decode one raw line (newline included) into a JSON object, or say what is wrong."""
    if not raw.endswith(b"\n"):
        raise LedgerReadError(f"{path}:{lineno}: missing final newline (the last line is cut off)")
    if not raw.strip():
        raise LedgerReadError(f"{path}:{lineno}: blank line")
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass  # say exactly what is wrong below (or accept what only orjson refuses)
    else:
        if isinstance(line, dict):
            return line
    try:
        text = raw[:-1].decode("utf-8")
    except UnicodeDecodeError as error:
        raise LedgerReadError(f"{path}:{lineno}: invalid UTF-8: {error}") from error
    try:
        line = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        # json's own "line 1" would contradict our line number; the column is what helps.
        raise LedgerReadError(
            f"{path}:{lineno}: invalid JSON: {error.msg} at column {error.colno}"
        ) from error
    except ValueError as error:  # NaN / Infinity from _reject_constant, oversized ints
        raise LedgerReadError(f"{path}:{lineno}: invalid JSON: {error}") from error
    if not isinstance(line, dict):
        raise LedgerReadError(f"{path}:{lineno}: a line must be a JSON object, not {type(line).__name__}")
    return line


# Where pydantic names the member of a union that refused a value (`outcome.reward.int`): not a
# field of the line, so left out of the path a reader is shown.
_UNION_MEMBER_TAGS = {"int", "float", "str", "bool", "none", "dict", "list"}


def line_problem(error: ValidationError) -> str:
    """The first thing wrong with a line, in one clause: `outcome.reward: Input should be a valid
    integer or a valid number, not '0.9'`."""
    errors = error.errors(include_url=False)
    first = errors[0]
    loc = list(first["loc"])
    if loc and str(loc[-1]) in _UNION_MEMBER_TAGS:
        loc = loc[:-1]
    messages = [first["msg"]]
    for other in errors[1:]:  # the other members of the same union
        if list(other["loc"][:-1]) == loc and str(other["loc"][-1]) in _UNION_MEMBER_TAGS:
            messages.append(other["msg"].removeprefix("Input should be "))
    where = ".".join(str(part) for part in loc)
    found = "" if first["type"] == "missing" else f", not {_shown(first['input'])}"
    return f"{where + ': ' if where else ''}{' or '.join(messages)}{found}"


def _shown(value: Any, limit: int = 60) -> str:
    """A value as the line holds it (JSON), cut to `limit` characters."""
    try:
        text = orjson.dumps(value).decode("utf-8")
    except TypeError:  # what orjson refuses (a lone surrogate, a huge integer)
        text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_valid_line(raw: bytes, path: StrPath, lineno: int) -> dict[str, Any]:
    """One raw ledger line (newline included), read strictly and validated: its plain dict, or
    LedgerReadError naming `path:lineno` and the first thing wrong with it."""
    line = _parse_line(raw, path, lineno)
    try:
        # Its free-form values are plain JSON: _parse_line's parsers refuse NaN and Infinity.
        RolloutLine.model_validate(line, context=PARSED_FROM_JSON)
    except ValidationError as error:
        raise LedgerReadError(
            f"{path}:{lineno}: rollout {_rollout_id_of(line)} is not a valid {ROLLOUT_SCHEMA} line "
            f"({line_problem(error)})"
        ) from error
    return line


def _read_validated(path: StrPath) -> Iterator[tuple[dict[str, Any], RolloutLine]]:
    # Binary iteration streams one line at a time and lets us see a missing last newline.
    with open(path, "rb") as ledger_file:
        for lineno, raw in enumerate(ledger_file, start=1):
            line = _parse_line(raw, path, lineno)
            try:
                rollout = RolloutLine.model_validate(line)
            except ValidationError as error:
                raise LedgerReadError(
                    f"{path}:{lineno}: rollout {_rollout_id_of(line)} is not a valid "
                    f"{ROLLOUT_SCHEMA} line: {error}"
                ) from error
            yield line, rollout


def read_ledger(path: StrPath) -> Iterator[RolloutLine]:
    """Yield the validated lines of a ledger as models, failing at the first bad line."""
    for _, rollout in _read_validated(path):
        yield rollout


def read_ledger_dicts(path: StrPath) -> Iterator[dict[str, Any]]:
    """Yield the validated lines of a ledger as the plain dicts stored in the file."""
    for line, _ in _read_validated(path):
        yield line


def iter_jsonl(path: StrPath) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file without schema validation (stage files).

    Damage is still loud: a cut-off, non-UTF-8 or non-JSON line raises LedgerReadError
    naming `path:lineno`.
    """
    with open(path, "rb") as jsonl_file:
        for lineno, raw in enumerate(jsonl_file, start=1):
            yield _parse_line(raw, path, lineno)
