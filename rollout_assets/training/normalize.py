"""Replacing a line's per-invocation identifiers by stable placeholders, in every text of its
transcript: message contents, reasoning, tool-call arguments and tool outputs.

The rules, the same in every text, so a tool call and its output still name the same path:

- an identifier is found as it is, and as JSON writes it inside a string (tool-call arguments
  and non-string tool outputs are JSON text): non-ASCII as `\\uXXXX`, `/` as `\\/`; the
  placeholder is written the same way;
- at each place the longest identifier that fits wins (a worker's clone inside its run folder
  is the working folder, not the run folder plus a rest), reading each text from its start;
- only whole names are replaced: not after a letter, digit, `_`, `-`, `.`, `~` or `/` (unless
  that ends a JSON escape: `\\n`, `\\t`, `\\r`, `\\b`, `\\f`, `\\uXXXX`), not before a letter,
  digit, `_`, `-`, or a `.` followed by one of those. So `/w/clone-7` is left alone in
  `/w/clone-77`, `/w/clone-7.bak` and `/x/w/clone-7`, and replaced in `/w/clone-7/src`,
  `"/w/clone-7"` and `/w/clone-7.`;
- a path below a replaced folder keeps its rest: `/workspace/src/app.py`.

How: the transcript is serialized once with orjson and the identifiers are replaced in those
bytes, as orjson escapes them, with the rules above read through the escaping (a match may not
begin inside an escape). That is one search per spelling over the whole transcript instead of
one per text; the checks (training/recount_identifiers.py) recount the same rules text
by text.

The ledger is never changed: this is applied to the training rows only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import orjson

from rollout_assets.training.identifiers import KINDS, PLACEHOLDERS, Identifier

# A JSON escape the match may follow: it stands for a character that is no part of a name.
_ESCAPE_BEFORE = re.compile(rb"\\(?:[ntrbf]|u[0-9A-Fa-f]{4})\Z")
_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_NOT_BEFORE = _NAME_BYTES | frozenset(b".~/")
_BACKSLASH, _DOT = ord("\\"), ord(".")


def _escaped(text: str) -> bytes:
    """`text` as orjson writes it inside a string, for text without quotes or control
    characters (identifiers.py admits no other): only its backslashes are doubled."""
    return text.encode().replace(b"\\", b"\\\\")


class Normalizer:
    """The replacements of one line's identifiers, applied to its serialized messages."""

    def __init__(self, identifiers: list[Identifier]) -> None:
        self._identifiers = identifiers
        self._targets_by_slashes: dict[bool, dict[bytes, tuple[str, bytes]]] = {}

    def _targets(self, data: bytes) -> dict[bytes, tuple[str, bytes]]:
        """Escaped spelling -> (kind, the escaped placeholder spelled alike: `\\/` for `\\/`).
        The spellings with `\\/` are left out of text that has none: most lines."""
        escaped_slashes = b"\\\\/" in data
        targets = self._targets_by_slashes.get(escaped_slashes)
        if targets is None:
            targets = self._targets_by_slashes[escaped_slashes] = {}
            for identifier in self._identifiers:
                literal, placeholder = identifier.literal, identifier.placeholder
                forms = [literal] if literal.isascii() else [literal, json.dumps(literal)[1:-1]]
                for form in forms:
                    targets.setdefault(_escaped(form), (identifier.kind, _escaped(placeholder)))
                    if escaped_slashes and "/" in form:
                        slashed = (identifier.kind, _escaped(placeholder.replace("/", "\\/")))
                        targets.setdefault(_escaped(form.replace("/", "\\/")), slashed)
        return targets

    def serialized(self, messages: list[dict[str, Any]], option: int = 0) -> tuple[bytes, Counter[str]]:
        """The messages as orjson writes them (with `option`), identifiers replaced; the counts by kind."""
        counts: Counter[str] = Counter()
        data = orjson.dumps(messages, option=option)
        if not self._identifiers:
            return data, counts
        targets = self._targets(data)
        found = []
        for spelling in targets:
            start = data.find(spelling)
            while start != -1:
                found.append((start, -len(spelling), spelling))
                start = data.find(spelling, start + 1)
        if not found:
            return data, counts
        # Leftmost first; of two at one place, the longer. One inside a replacement is passed
        # over before its boundaries are looked at (a worker's name inside its clone's path).
        found.sort()
        pieces, position = [], 0
        for start, negative_length, spelling in found:
            end = start - negative_length
            if start < position or not (_starts_a_name(data, start) and _ends_a_name(data, end)):
                continue
            kind, placeholder = targets[spelling]
            counts[kind] += 1
            pieces += [data[position:start], placeholder]
            position = end
        if not pieces:
            return data, counts
        pieces.append(data[position:])
        return b"".join(pieces), counts

    def messages(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The messages with their identifiers replaced, and the counts by kind."""
        if not self._identifiers:
            return messages, Counter()
        data, counts = self.serialized(messages)
        return (orjson.loads(data) if counts else messages), counts


def _starts_a_name(data: bytes, start: int) -> bool:
    if start == 0:
        return True
    backslashes = 0
    while backslashes < start and data[start - 1 - backslashes] == _BACKSLASH:
        backslashes += 1
    if backslashes % 2:
        return False  # inside an escape: not where a character of the text begins
    before = data[start - 1]
    if before >= 0x80:
        return not _character_before(data, start).isalnum()
    if before not in _NOT_BEFORE:
        return True
    return _ESCAPE_BEFORE.search(data, max(0, start - 6), start) is not None


def _ends_a_name(data: bytes, end: int) -> bool:
    if end == len(data):
        return True
    after = data[end]
    if after >= 0x80:
        return not _character_at(data, end).isalnum()
    if after in _NAME_BYTES:
        return False
    if after != _DOT or end + 1 == len(data):
        return True
    following = data[end + 1]
    if following >= 0x80:
        return not _character_at(data, end + 1).isalnum()
    return following not in _NAME_BYTES


def _character_before(data: bytes, end: int) -> str:
    start = end - 1
    while start > 0 and 0x80 <= data[start] < 0xC0:
        start -= 1
    return data[start:end].decode("utf-8", "replace")[:1]


def _character_at(data: bytes, start: int) -> str:
    return data[start : start + 4].decode("utf-8", "ignore")[:1]


def replacements(counts: Counter[str]) -> list[dict[str, Any]]:
    """A row's record of what was replaced: kind, placeholder and count, in a fixed order."""
    return [{"kind": kind, "placeholder": PLACEHOLDERS[kind], "count": counts[kind]} for kind in KINDS if counts[kind]]
