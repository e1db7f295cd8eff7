"""detect-secrets' plugins as finders of spans in a line of text.

Every plugin of detect-secrets that reads text is used, with its own limits and its heuristic
filters, as its scanner would use them on a file of no known type: the keyword detector in its
quotes-required form (the form that leaves code alone: `password = password` is a name, not a
secret), the entropy detectors on quoted strings at their default limits (4.5 for base64, 3.0
for hex). Two things differ from `detect_secrets.core.scan.scan_line`, which is meant for
one-off strings: that function reads every word of a line as a candidate for the entropy
detectors (its eager search), and it reports a regex detector's first group, which for some
of them is only the prefix of the token (`ghp`); here each finding is the span of the whole
secret, which is what must be replaced.

Left out, with the reason: `IPPublicDetector`, since an IP address is not a credential, and
its pattern takes `0.0.0.0` and four-part version numbers, which code and logs are full of.
docs/release.md lists the plugins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

LEFT_OUT = frozenset({"IPPublicDetector"})

# The file name the line-scoped plugins are given: no extension, so the keyword detector uses
# its quotes-required patterns, and no filter skips it as a lock or binary file.
_FILE_NAME = "release-text"

# Characters some regex detectors take around the token (`(?:\s|=|:|"|^)AKC...(?:\s|"|$)`).
_DELIMITERS = " \t=:\"'"

# A name and `=` at the start of a detector's match (`AccountKey=`).
_NAME_PREFIX = re.compile(r"[A-Za-z_]\w*=")

# A group shorter than this is a prefix of the token (`(ghp|gho|...)_...`), not its value.
_VALUE_GROUP_LENGTH = 8

# Quick tests that let a line skip a plugin that cannot find anything in it.
_KEYWORD_HINT = re.compile(r"key|pass|pwd|secret|contras", re.I)
# The slowest regex plugins try their name patterns at every word; each of their patterns
# needs one of these words (in lower case), so a text without any is passed over. Derived from
# the patterns of detect-secrets 1.5; a test pins those patterns (PINNED_PATTERNS_SHA256), so a
# release of detect-secrets that changes them fails it until the words are checked again.
PLUGIN_HINTS = {
    "CloudantDetector": ("key", "pw", "pass", "token", "cloudant"),
    "IbmCloudIamDetector": ("key", "pwd", "pass", "token"),
    "IbmCosHmacDetector": ("key",),
    "SoftlayerDetector": ("key", "pwd", "pass", "token", "softlayer"),
    "MailchimpDetector": ("-us",),
}


@dataclass(frozen=True)
class Detection:
    start: int
    end: int
    kind: str  # detect-secrets' secret type, e.g. "Secret Keyword"


@dataclass(frozen=True)
class _Plugins:
    regex_based: tuple[Any, ...]
    keyword: Any
    entropy: tuple[Any, ...]
    least_lengths: tuple[int, ...]  # of a string each entropy plugin can find (_least_length)
    filters: tuple[Any, ...]


@cache
def _plugins() -> _Plugins:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.filters import heuristic
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
    from detect_secrets.plugins.keyword import KeywordDetector

    regex_based, entropy, keyword = [], [], None
    for plugin_class in sorted(get_mapping_from_secret_type_to_class().values(), key=lambda c: c.__name__):
        if plugin_class.__name__ in LEFT_OUT:
            continue
        plugin = plugin_class()  # each with its default settings and limits
        if isinstance(plugin, KeywordDetector):
            keyword = plugin
        elif isinstance(plugin, HighEntropyStringsPlugin):
            entropy.append(plugin)
        elif isinstance(plugin, RegexBasedDetector):
            regex_based.append(plugin)
        else:  # a plugin of a kind this module does not know would be silently unused
            raise RuntimeError(f"detect-secrets plugin {plugin_class.__name__} is of an unknown kind")
    # The heuristic filters detect-secrets applies by default to what a plugin found.
    filters = (
        heuristic.is_sequential_string,
        heuristic.is_potential_uuid,
        heuristic.is_templated_secret,
        heuristic.is_prefixed_with_dollar_sign,
        heuristic.is_not_alphanumeric_string,
    )
    least = tuple(_least_length(plugin) for plugin in entropy)
    return _Plugins(tuple(regex_based), keyword, tuple(entropy), least, filters)


def plugin_names() -> list[str]:
    """The class names of the plugins used."""
    plugins = _plugins()
    return sorted(type(p).__name__ for p in (*plugins.regex_based, plugins.keyword, *plugins.entropy))


def plugin_types() -> list[str]:
    """The secret types the plugins used report (`Secret Keyword`, `GitHub Token`, ...)."""
    plugins = _plugins()
    return sorted({p.secret_type for p in (*plugins.regex_based, plugins.keyword, *plugins.entropy)})


def _filtered(secret: str, line: str, plugin: Any) -> bool:
    from detect_secrets.filters import heuristic

    plugins = _plugins()
    if any(check(secret) for check in plugins.filters):
        return True
    return heuristic.is_likely_id_string(secret, line, plugin) or heuristic.is_indirect_reference(line)


def _match_span(match: re.Match[str], line: str) -> tuple[int, int]:
    """The secret in a regex detector's match: its widest group when that is a value, else the
    whole match without the delimiters some patterns take around it."""
    groups = [index for index in range(1, (match.re.groups or 0) + 1) if match.group(index)]
    if groups:
        widest = max(groups, key=lambda index: match.end(index) - match.start(index))
        if match.end(widest) - match.start(widest) >= _VALUE_GROUP_LENGTH:
            return match.span(widest)
    start, end = match.span()
    name = _NAME_PREFIX.match(line, start, end)  # AccountKey=...: the name stays
    if name:
        start = name.end()
    while start < end and line[start] in _DELIMITERS:
        start += 1
    while end > start and line[end - 1] in _DELIMITERS:
        end -= 1
    return start, end


def _value_spans(line: str, value: str) -> Iterator[tuple[int, int]]:
    """Where a plugin's reported value stands in the line (every occurrence)."""
    start = line.find(value)
    while start != -1 and value:
        yield start, start + len(value)
        start = line.find(value, start + len(value))


def _line_around(text: str, start: int, end: int) -> tuple[int, str]:
    """The line of `text` holding [start, end): its offset and its text."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return first, text[first : last if last != -1 else len(text)]


def _least_length(plugin: Any) -> int:
    """The shortest string whose entropy can pass the plugin's limit: n characters have at
    most log2(n) bits each, so shorter strings are skipped without computing anything."""
    length = 1
    while math.log2(length) <= plugin.entropy_limit:
        length += 1
    return length


def detect(text: str) -> Iterator[Detection]:
    """Every secret detect-secrets' plugins find in `text`, each as a span of `text`. The
    plugins read a line at a time, as their scanner does: a regex plugin's pattern and the
    entropy plugins' quoted strings cannot cross a line break, so they run over the whole text
    at once; the keyword plugin runs on the lines that hold one of its words."""
    plugins = _plugins()
    lower = text.lower()
    for plugin in plugins.regex_based:
        hints = PLUGIN_HINTS.get(type(plugin).__name__)
        if hints is not None and not any(map(lower.__contains__, hints)):
            continue
        for pattern in plugin.denylist:
            for match in pattern.finditer(text):
                offset, line = _line_around(text, *match.span())
                start, end = _match_span(match, text)
                if end > start and not _filtered(text[start:end], line, None):
                    yield Detection(start, end, plugin.secret_type)
    for plugin, least in zip(plugins.entropy, plugins.least_lengths):
        for match in plugin.regex.finditer(text):
            value = match.group(2)
            if len(value) >= least and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit:
                offset, line = _line_around(text, *match.span(2))
                if not _filtered(value, line, plugin):
                    yield Detection(match.start(2), match.end(2), plugin.secret_type)
    seen_lines: set[int] = set()
    for hint in _KEYWORD_HINT.finditer(text):
        offset, line = _line_around(text, *hint.span())
        if offset in seen_lines:
            continue
        seen_lines.add(offset)
        for value in plugins.keyword.analyze_string(line):
            if not _filtered(value, line, plugins.keyword):
                for start, end in _value_spans(line, value):
                    yield Detection(offset + start, offset + end, plugins.keyword.secret_type)
