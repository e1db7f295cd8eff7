"""The project's own secret rules: the shapes detect-secrets' plugins do not know.

Each rule finds spans to replace (its group `v` when it has one: the name or flag that gave a
value away is kept, `PASSWORD=<REDACTED_SECRET_ASSIGNMENT>`), optionally judged by a function
that tells a secret from code (secret_values.py). A placeholder is `<REDACTED_KIND>`: no `:` or
`@` in it for the basic-auth detector, angle brackets that detect-secrets' filters read as a
template, no run of base64 or hex characters for the entropy detectors, so scrubbing a scrubbed
text finds nothing. docs/release.md lists the rules with examples.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rollout_assets.release.secret_values import bare_value_is_secret, looks_random, quoted_value_is_secret, random_tail

# People and places are replaced by these (not secrets: the rules' kinds say which is which).
USER = "<USER>"
EMAIL = "<EMAIL>"
HOST = "<HOST>"


def placeholder(kind: str) -> str:
    return f"<REDACTED_{kind.upper().replace('-', '_')}>"


@dataclass(frozen=True)
class Finding:
    start: int
    end: int
    kind: str  # a rule's name, or a detect-secrets type
    replacement: str


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    accept: Callable[[re.Match[str]], bool] | None = None  # None: every match is a secret
    replacement: str | None = None  # None: the kind's placeholder
    # Every match holds one of `hints` (as written) or one of `lower_hints` (in lower case): a
    # text with none of them is skipped without running the pattern.
    hints: tuple[str, ...] = ()
    lower_hints: tuple[str, ...] = ()

    def find(self, text: str) -> Iterator[Finding]:
        for match in self.pattern.finditer(text):
            if self.accept is not None and not self.accept(match):
                continue
            span = match.span("v") if "v" in self.pattern.groupindex and match.group("v") is not None else match.span()
            if span[1] > span[0]:
                yield Finding(span[0], span[1], self.name, self.replacement or placeholder(self.name))


def _token(name: str, pattern: str, *hints: str) -> Rule:
    return Rule(name, re.compile(pattern), hints=hints)


# Key material: a block of base64 lines. A private key read in parts (`head`, `tail` of
# ~/.ssh/id_rsa) keeps its body in whichever message holds it, so the body is a secret beside
# either marker, and a run of full-width key lines is a secret alone. A key read by a tool that
# numbers its lines (Claude Code's Read, `cat -n`: spaces, the number, a tab or `→`) has that
# number before each of its lines.
_KEY_LINE = r"[A-Za-z0-9+/=]{16,}"
_ARMOR = r"(?:[A-Za-z-]+: [^\n]*\n)"  # Proc-Type:, DEK-Info:, Comment:, Version: lines
_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_END = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_NUMBER = r"(?:[ \t]*\d+(?:\t|→))?"
PRIVATE_KEY_RULES = (
    _token(
        "private-key",
        rf"{_BEGIN}[ \t]*\n?(?:{_NUMBER}(?:{_ARMOR}|[ \t]*\n|{_KEY_LINE}[ \t]*\n?))*(?:{_NUMBER}{_END})?",
        "PRIVATE KEY",
    ),
    _token(
        "private-key",
        rf"(?m)(?:^{_NUMBER}[ \t]*{_KEY_LINE}[ \t]*\n)+{_NUMBER}[ \t]*(?:=[A-Za-z0-9+/]{{4}}\n{_NUMBER})?{_END}",
        "PRIVATE KEY",
    ),
    # Four or more full lines of PEM (64) or OpenSSH and PGP (70, 76) armor, markers elsewhere.
    _token(
        "private-key",
        rf"(?m)(?:^{_NUMBER}[ \t]*(?:[A-Za-z0-9+/]{{64}}|[A-Za-z0-9+/]{{70}}|[A-Za-z0-9+/]{{76}})[ \t]*$\n?){{4,}}",
    ),
    _token("private-key", r"PuTTY-User-Key-File-\d+:[^\n]*\n(?:[A-Za-z-]+:[^\n]*\n|" + _KEY_LINE + r"\n?)*", "PuTTY"),
)

# Tokens recognised by their own shape.
TOKEN_RULES = (
    _token("jwt", r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*", "eyJ"),
    _token("anthropic-key", r"\bsk-ant-[A-Za-z0-9_-]{8,}", "sk-ant-"),
    _token("stripe-key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{8,}", "_live_", "_test_"),
    _token("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", "sk-"),
    _token(
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _token("gitlab-token", r"\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|oas|agent)-[A-Za-z0-9_-]{20,}", "gl"),
    _token("huggingface-token", r"\bhf_[A-Za-z0-9]{20,}", "hf_"),
    _token("slack-token", r"\b(?:xox[abposre]-[A-Za-z0-9-]{8,}|xapp-\d-[A-Za-z0-9-]{20,})", "xox", "xapp-"),
    _token(
        "slack-webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/-]{16,})",
        "hooks.slack.com",
    ),
    _token(
        "discord-webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/(?P<v>\d+/[A-Za-z0-9_-]{20,})",
        "discord",
    ),
    _token("google-api-key", r"\bAIza[0-9A-Za-z_-]{30,}", "AIza"),
    _token("google-oauth-token", r"\bya29\.[0-9A-Za-z_-]{20,}", "ya29."),
    _token("google-refresh-token", r"(?<![\w/])1//0[0-9A-Za-z_-]{30,}", "1//0"),
    _token("vault-token", r"\bhv[sbr]\.[A-Za-z0-9_-]{20,}", "hvs.", "hvb.", "hvr."),
    _token("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b", "npm_"),
    _token("pypi-token", r"\bpypi-[A-Za-z0-9_-]{50,}", "pypi-"),
    _token("sendgrid-key", r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", "SG."),
    _token("twilio-key", r"\b(?:AC|SK)[0-9a-fA-F]{32}\b", "AC", "SK"),
    _token("mailgun-key", r"\bkey-[0-9a-zA-Z]{32}\b", "key-"),
    _token("digitalocean-token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", "_v1_"),
    _token("shopify-token", r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b", "shp"),
    _token(
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ABIA|ACCA)[0-9A-Z]{16}\b",
        *("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ABIA", "ACCA"),
    ),
    _token("databricks-token", r"\bdapi[0-9a-f]{32}(?:-\d)?\b", "dapi"),
    _token("postman-key", r"\bPMAK-[0-9a-f]{24}-[0-9a-f]{34}\b", "PMAK-"),
    _token("atlassian-token", r"\bATATT3[A-Za-z0-9_=-]{50,}", "ATATT3"),
    _token("age-secret-key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}", "AGE-SECRET-KEY-"),
    _token("heroku-key", r"\bHRKU-[A-Za-z0-9_-]{20,}", "HRKU-"),
    _token("doppler-token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9._-]{30,}", "dp."),
    # A short lower-case vendor prefix and a long random tail (glsa_, lin_api_, whsec_,
    # xai-...): the shape most service tokens share. The tail must read as random, so a long
    # identifier (`test_theRoundTripOfEveryLedgerLineWorks`) is not one.
    Rule(
        "prefixed-token",
        re.compile(r"\b[a-z]{2,8}_(?:[a-z0-9]{1,8}_)?(?P<tail>[A-Za-z0-9]{30,})(?:_[A-Za-z0-9]{4,})?\b"),
        lambda match: random_tail(match["tail"]),
        hints=("_",),
    ),
    # With a dash, the tail must mix cases too, as a hex digest in a name (`build-9c1185a5...`)
    # does not, and must not run on into base64 (`sha512-...+/=`).
    Rule(
        "prefixed-token",
        re.compile(r"\b[a-z]{2,8}-(?:[a-z0-9]{1,8}-)?(?P<tail>[A-Za-z0-9]{32,})(?![A-Za-z0-9+/=_-])"),
        lambda match: random_tail(match["tail"]) and not match["tail"].islower() and not match["tail"].isupper(),
        hints=("-",),
    ),
)

# A value in quotes: any characters but the quote, spaces included.
_QUOTED = r"(?P<q>[\"'`])(?P<v>(?:(?!(?P=q))[^\n\\]|\\.)*)(?P=q)"
# A value without quotes ends at a space, quote, separator or bracket; a value followed by `(`,
# `[` or `.name` is an expression (a call, a subscript, an attribute).
_BARE = r"(?P<v>[^\s\"'`,;(){}\[\]\\<>|?]+)(?![(\[\w?])"

_NAME = (
    r"(?P<name>(?<![\w.-])[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|pass|pwd|secret|credentials?"
    r"|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|account[_-]?key|auth[_-]?key|secret[_-]?key"
    r"|[_.-]key|_?auth|authtoken|client-key-data|sharedaccesskey|sharedaccesssignature))"
)
_CLOSE = r"[\"'`]?\]?"  # the quote of a JSON key, the bracket of a subscript


def _quoted_accept(match: re.Match[str]) -> bool:
    return quoted_value_is_secret(match["name"], match["v"])


def _bare_accept(syntax: str) -> Callable[[re.Match[str]], bool]:
    return lambda match: bare_value_is_secret(match["name"], match["v"], syntax)


# The forms of an assignment, each judged by its own syntax, tried in this order at a name.
_ASSIGNMENT_FORMS = (
    # name = "value", "name": "value", name => 'value', name: `value`
    (re.compile(rf"{_NAME}{_CLOSE}\s*(?::=|=>|==?|:)\s*(?:[rbuf]{{0,2}})?{_QUOTED}", re.I), _quoted_accept),
    # NAME=value (no spaces: a shell or .env line, a keyword argument)
    (re.compile(rf"{_NAME}{_CLOSE}=(?![=\s]){_BARE}", re.I), _bare_accept("env")),
    # name: value (YAML, a header, a type hint)
    (re.compile(rf"{_NAME}{_CLOSE}:[ \t]+{_BARE}", re.I), _bare_accept("yaml")),
    # name = value (code, or an INI or properties line)
    (re.compile(rf"{_NAME}{_CLOSE}[ \t]+=[ \t]+{_BARE}", re.I), _bare_accept("spaced")),
)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class _AssignmentRule(Rule):
    """A value given to a secret-sounding name. The forms are tried only where a name's last
    word stands before `=` or `:`, found by one quick search: run from every word of a text,
    their patterns took most of a release's scrubbing time."""

    def find(self, text: str) -> Iterator[Finding]:
        name_starts = set()
        for word in self.pattern.finditer(text):
            start = word.start()
            while start > 0 and text[start - 1] in _NAME_CHARS:
                start -= 1
            name_starts.add(start)
        for start in sorted(name_starts):
            for form, accept in _ASSIGNMENT_FORMS:
                match = form.match(text, start)
                if match is not None and accept(match):
                    yield Finding(match.start("v"), match.end("v"), self.name, placeholder(self.name))
                    break


ASSIGNMENT_RULES = (
    _AssignmentRule(
        "secret-assignment",
        re.compile(
            r"(?:pass(?:word|wd|phrase)?|pwd|secret|credentials?|token|key|auth|key-data|sharedaccesssignature)"
            r"[\"'`]?\]?\s*(?::=|=>|=|:)",
            re.I,
        ),
    ),
)

_FLAG_VALUE = r"(?:(?P<q>[\"'])(?P<qv>[^\"'\n]+)(?P=q)|(?P<v>(?![-$<])[^\s\"'`;|&)]+))"


class _FlagRule(Rule):
    """A flag's value, quoted or not (the quoted one's group is `qv`)."""

    def find(self, text: str) -> Iterator[Finding]:
        for match in self.pattern.finditer(text):
            group = "qv" if match.group("qv") is not None else "v"
            value = match.group(group)
            if value and not value.startswith("<REDACTED_") and value.lower() not in {"stdin", "-"}:
                yield Finding(match.start(group), match.end(group), self.name, placeholder(self.name))


FLAG_RULES = (
    # --password X, --password=X, --token X, --api-key X (docker, helm, gh, wget, psql...)
    _FlagRule(
        "password-flag",
        re.compile(
            r"(?<![\w-])--(?:[a-z]+-)*(?:password|passwd|pass|token|secret|api-?key|access-key|secret-key|auth-token)"
            rf"(?:=|[ \t]+){_FLAG_VALUE}",
            re.I,
        ),
        hints=("--",),
    ),
    # docker login -p X, sshpass -p X, mysql -pX
    _FlagRule(
        "password-flag",
        re.compile(
            rf"\b(?:(?:docker|podman|nerdctl|buildah|skopeo|helm(?: registry)?|oras)\s+login\b[^\n]*?[ \t]-p[ \t]+"
            rf"|sshpass[ \t]+(?:-[a-z][ \t]+)*-p[ \t]*|\bmysql(?:dump|admin|sh|import)?\b[^\n|;]*?[ \t]-p(?=\S)){_FLAG_VALUE}",
        ),
        hints=("login", "sshpass", "mysql"),
    ),
    # curl -u user:password, wget --user=u --password=p (the user is kept)
    _FlagRule(
        "password-flag",
        re.compile(
            r"\b(?:curl|http|https|wget)\b[^\n|;]*?[ \t](?:-u|--user)(?:=|[ \t]+)[\"']?[^\s:\"']*:"
            rf"{_FLAG_VALUE.replace('(?![-$<])', '(?![$<])')}",
        ),
        hints=("curl", "http", "wget"),
    ),
)

CONTEXT_RULES = (
    Rule(
        "netrc-password",
        # ~/.netrc: machine HOST login USER password SECRET, on one line or several
        re.compile(r"\bmachine\s+\S+\s+(?:login\s+\S+\s+)?(?:password|passwd)\s+(?P<v>(?!<REDACTED_)\S+)"),
        hints=("machine",),
    ),
    Rule(
        "cookie",
        re.compile(
            r"\b(?:cookie|set-cookie)[\"']?:[^\n]*?\b(?:session|sessionid|sid|token|auth|jwt)[A-Za-z0-9_.-]*="
            r"(?P<v>(?!<REDACTED_)[^;\s\"']{8,})",
            re.I,
        ),
        lower_hints=("cookie",),
    ),
    Rule(
        "authorization",
        re.compile(
            r"(?:\b(?:Bearer|Basic|Token|Bot|Digest)[ \t]+|(?<![\"'])\b(?:x-[a-z-]*(?:key|token|secret|auth)[a-z-]*|api-?key"
            r"|private-token|x-auth)[\"']?:[ \t]*[\"']?)(?P<v>(?!<REDACTED_)[A-Za-z0-9._~+/=-]{8,})",
            re.I,
        ),
        lambda match: looks_random(match["v"]),
        lower_hints=("bearer", "basic", "token", "bot", "digest", "key", "auth"),
    ),
    Rule(
        "azure-key",
        re.compile(r"\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)=(?P<v>(?!<)[^;&\s\"'<]{8,})", re.I),
        lower_hints=("accountkey=", "sharedaccess"),
    ),
    Rule("azure-sas-signature", re.compile(r"[?&;]sig=(?P<v>(?!<)[A-Za-z0-9%+/=_-]{16,})"), hints=("sig=",)),
    Rule(
        "aws-secret-key",
        re.compile(
            r"(?:aws_?secret_?access_?key|aws_?secret|<REDACTED_AWS_ACCESS_KEY_ID>)[\"']?\s*[:=,]?\s*[\"']?"
            r"(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
            re.I,
        ),
        lower_hints=("aws", "<redacted_aws"),
    ),
    Rule(
        "url-credentials",
        # scheme://user:password@host, scheme://token@host, redis://:password@host; a password
        # may hold `/`. The scheme and the host are kept.
        re.compile(r"\b[a-z][a-z0-9+.-]*://(?P<v>(?!<REDACTED_)[^\s@/?#<>\"']*:[^\s@<>\"']+|[^\s@/?#:<>\"']{6,})@(?=[\w\[])", re.I),
        lambda match: not match["v"].startswith(("git@", "<")),
        hints=("://",),
    ),
)

PEOPLE_RULES = (
    Rule(
        "ls-owner",
        re.compile(r"(?m)^[-dlcbps][rwxsStT-]{9}[.+@]?\s+\d+\s+(?P<v>(?!<USER>)\S+\s+\S+)(?=\s+\d)"),
        replacement=f"{USER} {USER}",
    ),
    Rule("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), replacement=EMAIL, hints=("@",)),
    Rule(
        "home-path",
        re.compile(r"(?:/home/|/Users/|/tmp/pytest-of-)(?P<v>(?!<USER>)[^/\s\"'<>:;,()\\]+)"),
        replacement=USER,
        hints=("/home/", "/Users/", "/tmp/pytest-of-"),
    ),
    Rule(
        "home-path-dashed",
        re.compile(r"(?:-home-|-Users-)(?P<v>(?!<USER>)[A-Za-z0-9._]+)(?=-|$)"),
        replacement=USER,
        hints=("-home-", "-Users-"),
    ),
)

# The kinds that are people and places, not secrets.
PEOPLE_KINDS = frozenset({*(rule.name for rule in PEOPLE_RULES), "host-name"})

# In order: whole blocks, known shapes, context, people. When two findings overlap, the
# earlier rule names the kind.
SECRET_RULES: tuple[Rule, ...] = (*PRIVATE_KEY_RULES, *TOKEN_RULES, *FLAG_RULES, *CONTEXT_RULES, *ASSIGNMENT_RULES)
RULES: tuple[Rule, ...] = (*SECRET_RULES, *PEOPLE_RULES)


class RuleSet:
    """Rules in order, and which of them a text needs: one search for every rule's hints at
    once (as written, and in lower case) instead of a test per rule."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self._always = 0
        exact: dict[str, int] = {}
        lower: dict[str, int] = {}
        for index, rule in enumerate(rules):
            if not rule.hints and not rule.lower_hints:
                self._always |= 1 << index
            for hint in rule.hints:
                exact[hint] = exact.get(hint, 0) | 1 << index
            for hint in rule.lower_hints:
                lower[hint] = lower.get(hint, 0) | 1 << index
        self._exact = _HintFinder(exact)
        self._lower = _HintFinder(lower)

    def needed(self, text: str) -> list[Rule]:
        mask = self._always | self._exact.mask(text) | self._lower.mask(text.lower())
        return [rule for index, rule in enumerate(self.rules) if mask >> index & 1]


class _HintFinder:
    """Which hints a text holds, as the union of their rules' bits. The search looks ahead at
    every position, longest hint first, so a hint is missed only where a longer one starts at
    the same place; such a hint is a prefix of the longer one, and its bits are added with it."""

    def __init__(self, masks: dict[str, int]) -> None:
        hints = sorted(masks, key=len, reverse=True)
        self._masks = {
            hint: masks[hint] | _union(masks[other] for other in hints if hint.startswith(other)) for hint in hints
        }
        self._pattern = re.compile("(?=(" + "|".join(map(re.escape, hints)) + "))") if hints else None

    def mask(self, text: str) -> int:
        if self._pattern is None:
            return 0
        return _union(self._masks[hint] for hint in set(self._pattern.findall(text)))


def _union(masks: Iterator[int]) -> int:
    total = 0
    for mask in masks:
        total |= mask
    return total


def rule_names() -> list[str]:
    return list(dict.fromkeys(rule.name for rule in RULES))
