"""JSON reading with the seed's semantics, shared by every reader; and the small file helpers
of the outputs (atomic JSON documents, file identities, a file of lines read as byte ranges).

The seed parses with JavaScript's `JSON.parse`, which rejects `NaN` and `Infinity`
(Python's `json` accepts them) and decodes invalid UTF-8 as U+FFFD instead of failing.
Both rules are mirrored here, so an input parses in exactly the cases the seed's did.
A number beyond the range of a double (`1e400`) reads as null: `JSON.parse` makes it
Infinity, which the seed's `JSON.stringify` writes as null, and a ledger line may not carry a
non-finite number.

Parsing is most of a backfill's work, so it goes through orjson (about 4x the standard
module here). orjson is stricter than JavaScript in three places: invalid UTF-8 bytes, lone
surrogate escapes and numbers beyond a double. A document it refuses is parsed again by the
standard module with the seed's rules, and with orjson's reading of integers (exact within 64
bits, a double beyond), so the answer is the same, only slower.

A document nested deeper than MAX_NESTING levels of arrays and objects is not read at all
(`NotJson`), whichever parser took it: orjson reads 1,024 levels and the standard module about
990, but neither writes back what it read that deep (orjson stops at 254 levels, the standard
module's encoder at the interpreter's recursion limit), so a value accepted here must stay
shallow enough for every writer and reader downstream (ledger, stage files, manifest.json).
Transcript records (opencode messages and parts, Claude transcript lines) are read without
that limit (`max_nesting=None`), up to what the parsers read: nothing of theirs reaches a line
as structure, a deep tool input becomes JSON text (`to_json_text`), so a deep value costs
nothing downstream and dropping its record would lose a tool call.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Self

import orjson


class NotJson(ValueError):
    """Raised when text is not strict JSON (as JavaScript's JSON.parse sees it)."""


# Levels of nested arrays/objects a document may have (see the module docstring).
MAX_NESTING = 512


def _reject_constant(name: str) -> Any:
    raise NotJson(f"{name} is not valid JSON")


def _finite_float_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _integer_as_orjson_reads_it(text: str) -> int | float | None:
    """An integer as orjson reads one, so a document means the same whichever parser took it:
    exact within 64 bits, a double beyond (as JavaScript reads every number), and null when
    even a double cannot hold it."""
    value = int(text)
    if -(2**63) <= value < 2**64:
        return value
    try:
        return float(value)
    except OverflowError:
        return None


# One decoder, built once: json.loads(..., parse_constant=...) would build one per call.
# orjson refuses a number that overflows a double, so such documents always come here.
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=_finite_float_or_none,
    parse_int=_integer_as_orjson_reads_it,
)
# Compact and non-ASCII kept, like JSON.stringify.
_COMPACT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def parse_json(text: str | bytes, *, max_nesting: int | None = MAX_NESTING) -> Any:
    """Parse strict JSON. Bytes are decoded as UTF-8 with replacement, like Node's readFile(…, 'utf8').

    `max_nesting=None`: as deep as the parsers read (see the module docstring)."""
    try:
        return _not_too_deep(orjson.loads(text), text, max_nesting)
    except orjson.JSONDecodeError:
        pass  # not JSON, or one of the cases where orjson is stricter than JavaScript
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        return _not_too_deep(_STRICT_DECODER.decode(text), text, max_nesting)
    except NotJson:
        raise
    except RecursionError as error:
        raise NotJson("nested deeper than the parser reads") from error
    except ValueError as error:
        raise NotJson(str(error)) from error


def _not_too_deep(value: Any, text: str | bytes, max_nesting: int | None) -> Any:
    """`value`, unless it nests more than `max_nesting` arrays/objects deep (NotJson then).

    A document cannot nest deeper than it has brackets, and counting them runs at memory
    speed: only a document with more than `max_nesting` of them is walked (iteratively). Each
    level takes two characters, so a short document (most message parts) needs no count.
    """
    if max_nesting is None or len(text) <= 2 * max_nesting:
        return value
    if isinstance(text, bytes):
        brackets = text.count(b"[") + text.count(b"{")
    else:
        brackets = text.count("[") + text.count("{")
    if brackets <= max_nesting:
        return value
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > max_nesting:
            raise NotJson(f"nested deeper than {max_nesting} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return value


class NotARegularFile(OSError):
    """An input path that is a FIFO, a socket, a device or a folder, not a file."""


def open_regular_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open an input file for reading; NotARegularFile when it is anything but a regular file.

    Opened without blocking, then checked: opening a FIFO to read would wait for a writer for
    ever (and hang the round, or the sensor's tick), and a device could be read for ever.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = "it is a folder" if stat.S_ISDIR(mode) else "it is not a regular file"
            raise NotARegularFile(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, kind, os.fsdecode(path))
        # O_NONBLOCK means nothing to a regular file's reads.
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of an input file; OSError (NotARegularFile included) when it cannot be read."""
    with open_regular_file(path) as handle:
        return handle.read()


def read_json_or_none(path: str | Path) -> Any:
    """The seed's `readJson`: the parsed value, or None when the file is missing, unreadable
    (a FIFO or a folder included) or not JSON."""
    try:
        raw = read_regular_file(path)
    except (OSError, ValueError):  # ValueError: a path no file name can hold (a lone surrogate, a NUL)
        return None
    try:
        return parse_json(raw)
    except NotJson:
        return None


# Enough for the deepest value orjson reads (1,024 levels) on top of the caller's frames.
_ENCODER_RECURSION_LIMIT = 4_096

# A UTF-16 surrogate code point: in text decoded from JSON, always a lone one (the parsers
# join an escaped pair into one character).
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json_text(value: Any) -> str:
    """Compact JSON as JavaScript's JSON.stringify writes it (no spaces, non-ASCII kept).

    A lone surrogate is written as its escape (`\\ud83d`), as JSON.stringify has written it
    since ES2019: the text then holds none itself, so the line it goes into (a tool call's
    `arguments`) stays readable by parsers that refuse lone surrogates, as the seed's does.
    """
    try:
        return orjson.dumps(value).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        # Lone surrogates, integers beyond 64 bits and values deeper than orjson's 254 levels
        # (a transcript's tool input, read up to 1,024): the standard module writes them. Its
        # encoder counts each level against the recursion limit, raised for the call.
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, _ENCODER_RECURSION_LIMIT))
        try:
            text = _COMPACT_ENCODER.encode(value)
        finally:
            sys.setrecursionlimit(limit)
    return _SURROGATE.sub(lambda surrogate: f"\\u{ord(surrogate[0]):04x}", text)


def to_indented_json(value: Any, *, allow_nan: bool = True) -> str:
    """Indented JSON (2 spaces) for people and files, non-ASCII kept; with ASCII escapes when it
    holds a lone surrogate (a torn escape in an input), which UTF-8 cannot carry. The JSON
    value is the same either way, and the text always encodes as UTF-8."""
    text = json.dumps(value, indent=2, ensure_ascii=False, allow_nan=allow_nan)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, indent=2, allow_nan=allow_nan)
    return text


def is_record(value: Any) -> bool:
    return isinstance(value, dict)


def is_number(value: Any) -> bool:
    """A JSON number: int or float, never a bool (Python's bool is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_or_none(value: float | None) -> int | float | None:
    """A sum as JSON writes it: finite numbers inputs can overflow to Infinity, which JSON
    has no word for (the seed's `JSON.stringify` writes null). A sum of nothing (None) stays null."""
    return value if value is None or isinstance(value, int) or math.isfinite(value) else None


def string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def number_or_none(value: Any) -> int | float | None:
    return value if is_number(value) else None


def integer_or_none(value: Any) -> int | None:
    """An integral JSON number within 64 bits as int (2.0 → 2); anything else None. Beyond 64
    bits a number is no longer exact for JavaScript or for orjson, which reads it back as a
    double: a line holding it would not read back as the integer it says."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    return None


def round_half_up(value: float) -> int:
    """JavaScript's Math.round: halves round towards +infinity (2.5 → 3, -2.5 → -2).

    Not floor(value + 0.5): that sum rounds, so 0.49999999999999994 would give 1 and
    4503599627370497.0 would give 4503599627370498. A double's distance to its floor is exact.
    """
    floor = math.floor(value)
    return floor + 1 if value - floor >= 0.5 else floor


# ---------------------------------------------------------------------------
# Files this project writes: JSON documents replaced atomically, file identities, and a
# file of lines read as byte ranges
# ---------------------------------------------------------------------------


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """The file `write` writes into a temp file beside `path`, synced, then renamed over `path`:
    a reader sees the old file or the whole new one, and a failure leaves no temp file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        with open(temp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_json_atomic(path: Path, value: Any) -> None:
    """One JSON document, replaced atomically (temp file + rename) like every other output.

    Non-ASCII text is kept, unless the document holds a lone surrogate (a torn escape in an
    input): UTF-8 cannot carry one, so that document is written with ASCII escapes, as a
    ledger line is. The JSON value is the same either way.
    """
    data = to_indented_json(value, allow_nan=False).encode("utf-8")
    write_atomically(path, lambda handle: handle.write(data + b"\n"))


def read_json_file(path: Path) -> Any:
    """A JSON document this project wrote (write_json_atomic), read by the standard module:
    not an input, so not the seed's rules. OSError when it cannot be read, ValueError when it
    is not JSON."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def file_identity(path: Path) -> list[int]:
    """Which file is at `path` now: a rewritten file has another inode, size or mtime."""
    found = os.stat(path)
    return [found.st_ino, found.st_size, found.st_mtime_ns]


class LineRuns:
    """A file of lines, handed out a run of whole lines at a time, as byte ranges.

    Line ends are searched in blocks read one after the other, so neither the lines nor the
    file become Python objects (nor pages of this process: a memory map of the file would
    count in its resident memory); the caller then copies the ranges file to file.
    """

    BLOCK = 1 << 20

    def __init__(self, path: Path):
        self.path = path
        self.position = 0  # where the next line starts
        self._block, self._block_start = b"", 0

    def __enter__(self) -> Self:
        self.file = open(self.path, "rb")
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def _line_end(self, at: int) -> int:
        """Offset of the first newline at or after `at`; -1 when the file has none."""
        if not self._block_start <= at <= self._block_start + len(self._block):
            self._block, self._block_start = b"", at
        searched_from = at - self._block_start
        while True:
            found = self._block.find(b"\n", searched_from)
            if found >= 0:
                return self._block_start + found
            # No line end from `at` to the end of the block: read the next one.
            self._block_start += len(self._block)
            self._block, searched_from = os.pread(self.file.fileno(), self.BLOCK, self._block_start), 0
            if not self._block:
                return -1

    def next_lines(self, count: int) -> tuple[int, int]:
        """(start, stop) of the next `count` lines; stop is -1 when the file ends before them."""
        start = stop = self.position
        for _ in range(count):
            end = self._line_end(stop)
            if end < 0:
                return start, -1
            stop = end + 1
        self.position = stop
        return start, stop

    def at_end(self) -> bool:
        return self.position == os.fstat(self.file.fileno()).st_size
