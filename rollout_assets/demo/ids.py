"""The demo's ids: hashes of round-relative names, so the same specs give the same ids."""

from __future__ import annotations

import hashlib


def digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def commit_sha(*parts: object) -> str:
    return hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()


def uuid_of(*parts: object) -> str:
    """A version-4-shaped uuid made from a hash: deterministic, unlike uuid4."""
    h = digest(*parts)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


_SUFFIX_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_SUFFIXES = 36**6
# Odd and not a multiple of 3, so coprime with 36**6: n -> (n * _STRIDE + offset) mod 36**6 is a
# bijection, and every counter value below 36**6 gets a suffix of its own. About 0.618 x 36**6,
# so that consecutive counters differ in every letter.
_STRIDE = 1_345_300_001


def temp_suffix(counter: int, *salt: object) -> str:
    """Six lower-case letters and digits, as mkdtemp appends: random-looking, yet distinct for
    distinct counters (below 36**6) under one salt."""
    value = (counter * _STRIDE + int(digest("suffix", *salt)[:12], 16)) % _SUFFIXES
    letters = []
    for _ in range(6):
        value, digit = divmod(value, 36)
        letters.append(_SUFFIX_DIGITS[digit])
    return "".join(letters)
