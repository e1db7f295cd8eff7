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
