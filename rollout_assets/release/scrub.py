"""The one scrubber every string of a release passes through.

Transcripts of coding agents carry what the agents saw: keys in environment dumps, tokens in
`git remote -v`, private keys in files they read, home folders and host names. Each rule
replaces what it finds with a placeholder that keeps the kind (`<SECRET:github-token>`,
`/home/<USER>`, `<EMAIL>`, `<HOST>`) and that no rule matches again, so scrubbing twice
changes nothing. Rules run in the order of RULES: whole blocks (PEM keys) first, then known
key shapes, then the looser context rules (assignments, authorization headers), then people
and places. docs/release.md lists the rules with examples.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

USER = "<USER>"


def _secret(kind: str) -> str:
    return f"<SECRET:{kind}>"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    replace: str | Callable[[re.Match[str]], str]


def _keep_prefix(kind: str) -> Callable[[re.Match[str]], str]:
    """Keep group 1 (the name or header that gave the secret away), replace the value."""
    return lambda match: match[1] + _secret(kind)


# A value already scrubbed is never a value again.
_NOT_A_PLACEHOLDER = r"(?!<SECRET:|<USER>|<EMAIL>|<HOST>)"

RULES: tuple[Rule, ...] = (
    Rule(
        "private-key",
        re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.S),
        _secret("private-key"),
    ),
    Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), _secret("jwt")),
    Rule("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{8,}"), _secret("anthropic-key")),
    Rule("stripe-key", re.compile(r"\b(?:sk|rk|pk)_live_[A-Za-z0-9]{8,}"), _secret("stripe-key")),
    Rule("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), _secret("openai-key")),
    Rule("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), _secret("github-token")),
    Rule("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), _secret("huggingface-token")),
    Rule("slack-token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{8,}"), _secret("slack-token")),
    Rule("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), _secret("google-api-key")),
    Rule("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), _secret("aws-access-key-id")),
    Rule(
        "aws-secret-key",
        # 40 characters of base64 beside an AWS name (aws_secret_access_key=..., or after a key id).
        re.compile(
            r"((?:aws_?secret_?access_?key|aws_?secret|<SECRET:aws-access-key-id>)[\"']?\s*[:=,]?\s*[\"']?)"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
            re.I,
        ),
        _keep_prefix("aws-secret-key"),
    ),
    Rule(
        "authorization",
        re.compile(r"(\b(?:Bearer|Basic|Token)\s+)" + _NOT_A_PLACEHOLDER + r"[A-Za-z0-9._~+/=-]{8,}"),
        _keep_prefix("authorization"),
    ),
    Rule(
        "url-credentials",
        # https://user:token@host or https://token@github.com (git remote -v)
        re.compile(r"(\b[a-z][a-z0-9+.-]*://)" + _NOT_A_PLACEHOLDER + r"[^\s/@:]+(?::[^\s/@]+)?@"),
        lambda match: match[1] + _secret("url-credentials") + "@",
    ),
    Rule(
        "secret-assignment",
        # KEY and TOKEN only with a prefix (API_KEY, GITHUB_TOKEN): alone they are everyday
        # code (`sorted(key=...)`). A value that is a call (`token = next(...)`) is code too.
        re.compile(
            r"((?<![<A-Za-z0-9_.-])(?:[A-Za-z0-9_.-]*(?:PASSWORD|PASSWD|SECRET|CREDENTIALS?)"
            r"|[A-Za-z0-9_.-]*[A-Za-z0-9][_.-](?:KEY|TOKEN))[\"']?\s*(?:=|:|=>)\s*[\"']?)"
            + _NOT_A_PLACEHOLDER
            + r"[^\s\"',;(){}\[\]]{4,}+(?!\()",
            re.I,
        ),
        _keep_prefix("secret-assignment"),
    ),
    Rule(
        "ls-owner",
        re.compile(r"(?m)^([-dlcbps][rwxsStT-]{9}[.+@]?\s+\d+\s+)(?!<USER>)\S+\s+\S+(?=\s+\d)"),
        lambda match: match[1] + f"{USER} {USER}",
    ),
    Rule("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), "<EMAIL>"),
    Rule("home-path", re.compile(r"(/home/|/Users/|/tmp/pytest-of-)(?!<USER>)[^/\s\"'<>:]+"), lambda m: m[1] + USER),
    Rule("home-path-dashed", re.compile(r"(-home-|-Users-)(?!<USER>)[A-Za-z0-9._]+(?=-|$)"), lambda m: m[1] + USER),
)


@dataclass
class Scrubber:
    """Scrubs strings and counts what each rule replaced. `host_names` are replaced literally."""

    host_names: tuple[str, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        names = sorted({name for name in self.host_names if name}, key=len, reverse=True)
        self._hosts = re.compile("|".join(re.escape(name) for name in names)) if names else None

    def scrub(self, text: str) -> str:
        for rule in RULES:
            text, replaced = rule.pattern.subn(rule.replace, text)
            if replaced:
                self.counts[rule.name] += replaced
        if self._hosts is not None:
            text, replaced = self._hosts.subn("<HOST>", text)
            if replaced:
                self.counts["host-name"] += replaced
        return text

    def scrub_value(self, value: Any) -> Any:
        """Every string inside a row (messages, arguments, metadata), at any depth."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {key: self.scrub_value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrub_value(item) for item in value]
        return value


def rule_names(extra: Iterable[str] = ("host-name",)) -> list[str]:
    return [rule.name for rule in RULES] + list(extra)
