"""The one scrubber every string of a release passes through, and the finder it shares with
the release's scan.

Transcripts of coding agents carry what the agents saw: keys in environment dumps, tokens in
`git remote -v`, private keys in files they read, home folders and host names. A string's
secrets are found by the project's rules (secret_rules.py) and by every text plugin of
detect-secrets (detectors.py), in the string as written, unescaped once and twice (views.py),
and inside base64 runs that decode to text; the spans found are merged and each is replaced
by a placeholder naming its kind. Values a person has checked (an allowlist of their hashes)
are left as they are. Scrubbing a scrubbed string finds nothing and changes nothing.
docs/release.md lists the rules and the plugins.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rollout_assets.release.detectors import detect, plugin_types
from rollout_assets.release.secret_rules import (
    HOST,
    PEOPLE_KINDS,
    RULES,
    SECRET_RULES,
    Finding,
    Rule,
    RuleSet,
    placeholder,
)
from rollout_assets.release.views import views_of

# A run of base64 long enough to hide a token; what it decodes to is searched too.
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{24,}={0,2}(?![A-Za-z0-9+/=_-])")
BASE64_KIND = "base64-encoded-secret"
_SECRET_RULES = RuleSet(SECRET_RULES)


def value_hash(value: str) -> str:
    """A finding's hash, as a person puts it in an allowlist: `sha1:` and the SHA-1 of the
    value (the hash detect-secrets records in a baseline)."""
    return "sha1:" + hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Secret:
    """A span of a string to replace, the kind that names it, and the hashes of the values
    found in it (one each for overlapping findings: the span is kept only when all are allowed)."""

    start: int
    end: int
    kind: str
    replacement: str
    hashes: tuple[str, ...]


def _decoded_text(run: str) -> str | None:
    """What a base64 run decodes to, when that is text (not the bytes of a digest)."""
    padded = run + "=" * (-len(run) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            text = decode(padded).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if text and all(char.isprintable() or char in "\n\r\t" for char in text):
            return text
    return None


def _detections(text: str) -> Iterator[Finding]:
    for detection in detect(text):
        kind = _kind_slug(detection.kind)
        yield Finding(detection.start, detection.end, kind, placeholder(kind))


def _kind_slug(kind: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")


def _rule_findings(text: str, rules: RuleSet) -> Iterator[Finding]:
    for rule in rules.needed(text):
        yield from rule.find(text)


def _holds_secret(text: str) -> bool:
    return any(True for _ in _rule_findings(text, _SECRET_RULES)) or any(True for _ in _detections(text))


def _findings(text: str, rules: RuleSet) -> Iterator[Finding]:
    yield from _rule_findings(text, rules)
    yield from _detections(text)
    for match in _BASE64_RUN.finditer(text):
        decoded = _decoded_text(match.group())
        if decoded is not None and _holds_secret(decoded):
            yield Finding(match.start(), match.end(), BASE64_KIND, placeholder(BASE64_KIND))


# What each memo holds at most, in characters of its keys and results.
_MEMO_CHARS = 32 * 2**20
# A string up to this long is its own key; a longer one is keyed by its digest.
_KEY_CHARS = 256


def _key(text: str) -> str | bytes:
    if len(text) <= _KEY_CHARS:
        return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Memo:
    """A dict from digests to results, emptied whole when its results pass `limit` units: a
    bound on memory that costs nothing per lookup."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.entries: dict[bytes, Any] = {}

    def get(self, key: bytes) -> Any:
        return self.entries.get(key)

    def put(self, key: bytes, value: Any, size: int) -> None:
        if self.size + size > self.limit:
            self.entries.clear()
            self.size = 0
        self.entries[key] = value
        self.size += size


@dataclass
class Scrubber:
    """Finds and replaces secrets, people and places; counts what each kind replaced and
    which allowed values were kept. `host_names` are replaced literally by <HOST>."""

    host_names: tuple[str, ...] = ()
    allowed: frozenset[str] = frozenset()  # value hashes (value_hash) a person has checked
    counts: Counter[str] = field(default_factory=Counter)
    allowed_kept: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if isinstance(self.host_names, str):  # a str is iterable: its characters are no host names
            raise TypeError("host_names is a list of host names, not one string")
        names = sorted({name for name in self.host_names if name}, key=len, reverse=True)
        hosts = [Rule("host-name", re.compile("|".join(re.escape(name) for name in names)), replacement=HOST)]
        self._rules = RuleSet(RULES + tuple(hosts if names else ()))
        # Pairs and groups repeat the SFT rows' messages, and prompts repeat across rows: each
        # distinct string is searched once (docs/performance.md, The release).
        self._scrubbed = _Memo(_MEMO_CHARS)
        self._clean = _Memo(_MEMO_CHARS)

    def secrets(self, text: str) -> list[Secret]:
        """The merged spans to replace in `text`, in order, allowed values left out."""
        key = _key(text)
        if self._clean.get(key):
            return []
        secrets, kept = self._search(text)
        self.allowed_kept.update(kept)
        if not secrets and not kept:
            self._clean.put(key, True, min(len(text), _KEY_CHARS))
        return secrets

    def _search(self, text: str) -> tuple[list[Secret], list[str]]:
        """(the merged spans to replace, the hashes of the allowed values kept)."""
        found: list[tuple[int, int, int, str, str, str]] = []  # start, end, priority, kind, replacement, hash
        kept: set[tuple[int, int, str]] = set()  # allowed values, each place once whatever found it
        for view in views_of(text):
            for priority, finding in enumerate(_findings(view.text, self._rules)):
                digest = value_hash(view.text[finding.start : finding.end])
                start, end = view.original_span(finding.start, finding.end)
                if digest in self.allowed:
                    kept.add((start, end, digest))
                    continue
                found.append((start, end, priority, finding.kind, finding.replacement, digest))
        return _merged(found), [digest for _, _, digest in kept]

    def scrub(self, text: str) -> str:
        if not text:
            return text
        key = _key(text)
        remembered = self._scrubbed.get(key)
        if remembered is None:
            remembered = self._replace(text)
            self._scrubbed.put(key, remembered, min(len(text), _KEY_CHARS) + len(remembered[0]))
        scrubbed, kinds, kept = remembered
        if kinds:
            self.counts.update(kinds)
        if kept:
            self.allowed_kept.update(kept)
        return scrubbed

    def _replace(self, text: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """(the scrubbed text, the kind of each replacement, the allowed hashes kept); counts
        nothing itself, so a remembered result is counted like a new one."""
        secrets, kept = self._search(text)
        if not secrets and not kept:
            return text, (), ()
        for secret in reversed(secrets):
            text = text[: secret.start] + secret.replacement + text[secret.end :]
        return text, tuple(secret.kind for secret in secrets), tuple(kept)

    def scrub_value(self, value: Any) -> Any:
        """Every string inside a row (messages, arguments, metadata), at any depth."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {key: self.scrub_value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrub_value(item) for item in value]
        return value


def _merged(found: list[tuple[int, int, int, str, str, str]]) -> list[Secret]:
    """Overlapping secrets become one span (a secret is never cut short); the earliest rule,
    then the detectors, names it. A person or place overlapping a secret is inside what is
    replaced already and is dropped: an e-mail-like `token@github.com` of a URL credential
    must not take the host with it."""
    secrets = _union([item for item in found if item[3] not in PEOPLE_KINDS])
    taken = [(secret.start, secret.end) for secret in secrets]
    people = [
        item for item in found
        if item[3] in PEOPLE_KINDS and not any(item[0] < end and start < item[1] for start, end in taken)
    ]
    return sorted(secrets + _union(people), key=lambda secret: secret.start)


def _union(found: list[tuple[int, int, int, str, str, str]]) -> list[Secret]:
    merged: list[Secret] = []
    group: list[tuple[int, int, int, str, str, str]] = []
    group_end = -1
    for item in sorted(found, key=lambda item: (item[0], -item[1])):
        if group and item[0] < group_end:
            group.append(item)
            group_end = max(group_end, item[1])
            continue
        if group:
            merged.append(_one(group, group_end))
        group, group_end = [item], item[1]
    if group:
        merged.append(_one(group, group_end))
    return merged


def _one(group: list[tuple[int, int, int, str, str, str]], end: int) -> Secret:
    first = min(group, key=lambda item: item[2])
    return Secret(group[0][0], end, first[3], first[4], tuple(dict.fromkeys(item[5] for item in group)))


def kind_names(extra: Iterable[str] = ("host-name",)) -> list[str]:
    """Every kind a scrub report can count: the rules', the plugins', base64 and the hosts."""
    from rollout_assets.release.secret_rules import rule_names

    return [*rule_names(), *(_kind_slug(name) for name in plugin_types()), BASE64_KIND, *extra]
