"""The readings of one string that secrets hide behind, each mapped back to the string itself.

A tool call's arguments are JSON text, and a command inside them may hold JSON again: a token
written `{"env": "{\\"TOKEN\\": \\"...\\"}"}` is escaped twice, and a private key inside a
service account file reads `-----BEGIN PRIVATE KEY-----\\nMIIE...`. The secret finders read the
string as written and as unescaped up to three times (`\\"` becomes `"`, `\\n` a line break), and
each span they find in an unescaped reading is mapped back to the characters of the string it
came from, so exactly those characters are replaced and the escaping around them is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

# JSON's one-character escapes; `\uXXXX` is read apart.
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")

# How many times a string is unescaped: a JSON file (a service account's key, `\\n` in a JSON string)
# printed inside a JSON string inside the arguments.
MAX_UNESCAPES = 3


@dataclass(frozen=True)
class View:
    """One reading of a string: `text`, and where each of its characters came from in the
    original (character i is original[starts[i]:ends[i]])."""

    text: str
    starts: tuple[int, ...] | None  # None: the original itself
    ends: tuple[int, ...] | None

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The original's characters behind this reading's [start, end)."""
        if self.starts is None or self.ends is None:
            return start, end
        if start >= end:
            position = self.starts[start] if start < len(self.starts) else (self.ends[-1] if self.ends else 0)
            return position, position
        return self.starts[start], self.ends[end - 1]


def _unescape(view: View) -> View | None:
    """The view with one level of JSON escapes read, or None when it has none."""
    text = view.text
    if "\\" not in text:
        return None
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    index, changed = 0, False
    while index < len(text):
        char = text[index]
        width = 1
        if char == "\\" and index + 1 < len(text):
            follower = text[index + 1]
            if follower in _SIMPLE_ESCAPES:
                char, width = _SIMPLE_ESCAPES[follower], 2
            elif follower == "u" and index + 6 <= len(text) and set(text[index + 2 : index + 6]) <= _HEX:
                char, width = chr(int(text[index + 2 : index + 6], 16)), 6
        changed = changed or width > 1
        begin, finish = view.original_span(index, index + width)
        chars.append(char)
        starts.append(begin)
        ends.append(finish)
        index += width
    if not changed:
        return None
    return View("".join(chars), tuple(starts), tuple(ends))


def views_of(text: str) -> list[View]:
    """The string as written, then unescaped once and twice where that changes it."""
    views = [View(text, None, None)]
    for _ in range(MAX_UNESCAPES):
        unescaped = _unescape(views[-1])
        if unescaped is None:
            break
        views.append(unescaped)
    return views
