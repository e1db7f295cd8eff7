"""The allowlist: values a person has checked and found not to be secrets.

A release that its scan refuses names each finding with its hash (`sha1:` and the SHA-1 of
the value, the hash detect-secrets records in a baseline). A person who has looked at the
value and found it harmless (a test fixture's fake key, a public hash the dataset needs) puts
the hash in a file, one a line, and builds again with `--allow FILE`: the scrubber keeps that
value and the scan accepts it. Nothing is allowed by default, and the release's scrub report
records every allowed hash and how often it was kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from rollout_assets.release.config import ReleaseError

_HASH = re.compile(r"(?:sha1:)?([0-9a-f]{40})")


def read_allowlist(path: Path) -> frozenset[str]:
    """The hashes in an allowlist file: `sha1:<40 hex>` (or the 40 hex digits alone) a line;
    blank lines and `#` comments are ignored, anything else is refused naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ReleaseError(f"{path}: the allowlist cannot be read ({getattr(error, 'strerror', None) or error})") from error
    hashes = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _HASH.fullmatch(line.lower())
        if match is None:
            raise ReleaseError(
                f"{path}:{number}: {line[:60]!r} is not a finding's hash (sha1: and 40 hex digits, as the scan prints it)"
            )
        hashes.add("sha1:" + match.group(1))
    return frozenset(hashes)
