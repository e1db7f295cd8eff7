"""Is this value a secret, or code? The judgement behind the assignment and flag rules.

`self.password = password`, `api_key: Optional[str]`, `sort_key=lambda r: r[0]`,
`SECRET_KEY = settings.SECRET_KEY` and `os.environ['API_KEY']` name secrets without holding
one; `PASSWORD="correct horse battery staple"`, `DB_PASS=postgres` and
`token: 9f8e7d6c5b4a39281706f5e4` hold one. The difference is the value: a literal is a secret
(quoted, or unquoted where the syntax makes it a literal: an environment assignment, a YAML
value, a command-line flag), an expression (a name, an attribute, a call, a subscript, a type,
a reference to a variable) is code.
"""

from __future__ import annotations

import re

# Names whose value is a secret whatever it looks like, once it is a literal.
STRONG_NAME = re.compile(r"(?:password|passwd|passphrase|pass|pwd|secret|credentials?)$", re.I)

# Values that are code or a stand-in, never a secret: language words, types, empty markers.
_CODE_WORDS = frozenset(
    """none null nil true false yes no on off lambda self this cls undefined str string int integer
    bytes bool boolean float number any object dict list optional secretstr required
    env environ getenv process secrets settings config""".split()
)
# A name, a dotted attribute path, or a type (`Optional[str]`, `str | None`).
_EXPRESSION = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")
# Stand-ins people write for a secret they do not show.
_STAND_IN = re.compile(r"\*+|x+|\.\.\.|…|<[^<>]*>|\{\{?[^{}]*\}\}?|\$\{[^}]*\}|%\([^)]*\)s|%s|\?+", re.I)
# Names made of words: snake_case, kebab-case, CONSTANT_CASE, camelCase, PascalCase, dotted.
_WORDS = re.compile(
    r"(?:[a-z]+|[A-Z]+|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*)(?:[._-](?:[a-z]+|[A-Z]+|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*))*"
)
_REFERENCE_START = ("$", "%", "@", "&", "*", "(", "[", "{", "<", "!")
# The shell's working folders: `pwd` in their names is "print working directory", and every
# `env` listing an agent runs holds them.
_WORKING_FOLDER_NAMES = frozenset({"pwd", "oldpwd"})


def is_stand_in(value: str) -> bool:
    return bool(_STAND_IN.fullmatch(value)) or value.startswith(_REFERENCE_START) or "REDACTED_" in value


def looks_random(value: str) -> bool:
    """A value that reads like a key or token, not like words: long enough, with no spaces,
    not a name made of words (snake_case, CONSTANT_CASE, camelCase, a dotted path), mixing
    kinds of characters."""
    if len(value) < 8 or " " in value or _WORDS.fullmatch(value):
        return False
    classes = sum(bool(re.search(pattern, value)) for pattern in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    return classes >= 2 and (any(char.isdigit() for char in value) or len(value) >= 16)


def random_tail(tail: str) -> bool:
    """The tail of a vendor token (after `glsa_`, `xai-`): letters and digits that are not a
    name made of words, with a digit, or with both cases in no word pattern."""
    if _WORDS.fullmatch(tail) or not any(char.isalpha() for char in tail):
        return False
    return any(char.isdigit() for char in tail) or not (tail.islower() or tail.isupper())


def quoted_value_is_secret(name: str, value: str) -> bool:
    """A quoted literal given to a secret-sounding name (`password = "..."`, `"apiKey": "..."`)."""
    value = value.strip()
    if not value or is_stand_in(value) or name.lower() in _WORKING_FOLDER_NAMES:
        return False
    if STRONG_NAME.search(name):
        # A password may be any words, but a short word ("wrong", "admin" in a test) is a
        # fixture; the name itself, or a type word, is a placeholder.
        if value.lower() in _CODE_WORDS or value.lower() == name.lower():
            return False
        return len(value) >= 8 or (len(value) >= 6 and bool(re.search(r"[^A-Za-z]", value)))
    return looks_random(value)


def bare_value_is_secret(name: str, value: str, syntax: str) -> bool:
    """An unquoted value: `syntax` is "env" (NAME=value, no spaces: a shell or .env literal, or a
    keyword argument), "yaml" (name: value) or "spaced" (name = value: code, or an INI line)."""
    if not value or is_stand_in(value) or value.lower() in _CODE_WORDS or name.lower() in _WORKING_FOLDER_NAMES:
        return False
    if value.lower() == name.lower().rsplit(".", 1)[-1].lstrip("_-"):  # password=password
        return False
    if syntax == "env":
        # An upper-case name is an environment variable, whose value is a literal; a lower-case
        # one is a keyword argument unless its value cannot be an expression.
        if name.lstrip("_-") == name.lstrip("_-").upper() and re.search(r"[A-Za-z]", name):
            return not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value)  # settings.SECRET_KEY
        return looks_random(value)
    if syntax == "yaml":
        if STRONG_NAME.search(name) and not _EXPRESSION.fullmatch(value):
            return len(value) >= 4
        if STRONG_NAME.search(name) and value.islower() and "." not in value and len(value) >= 4:
            return True  # `password: correcthorse` (a type would be `str`, in _CODE_WORDS)
        return looks_random(value)
    return looks_random(value)
