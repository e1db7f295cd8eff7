"""What a round's key may be: the round directory's own name, which becomes a folder name under
the ledger root, a Dagster partition key, a run tag and part of the UI's range syntax.

A key must match `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$` without `..` (so it is a plain name inside
the ledger root, never a path), and must not be the name of a file the ledger root holds itself
(`rounds-summary.parquet`): that round's folder would collide with it. No Dagster here: the
partitions (defs/partitions.py) and the command line apply the same rule.
"""

from __future__ import annotations

import re

from rollout_assets.errors import RoundError

_ROUND_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

# Files written at the ledger root beside the round folders (their temp files start with a dot,
# which no key can). Compared without case: on a case-insensitive file system
# `Rounds-Summary.parquet` is the same file.
SUMMARY_FILE_NAME = "rounds-summary.parquet"
LEDGER_ROOT_FILES = {SUMMARY_FILE_NAME: "the cross-round summary file"}


class InvalidRoundKey(RoundError, ValueError):
    """A directory name that cannot be a `rounds` partition key."""


def round_key_problem(name: str) -> str | None:
    """Why `name` cannot be a round's partition key, or None when it can."""
    if not _ROUND_KEY.fullmatch(name):
        return (
            f"round name {name!r} is not a valid partition key: it must start with a letter or digit "
            "and hold at most 100 letters, digits, '.', '_' or '-'"
        )
    if ".." in name:
        return f"round name {name!r} is not a valid partition key: it must not contain '..'"
    reserved_for = LEDGER_ROOT_FILES.get(name.lower())
    if reserved_for is not None:
        return (
            f"round name {name!r} is not a valid partition key: it is the name of {reserved_for} at the ledger "
            "root, where the round's folder would collide with it; rename the round directory"
        )
    return None


def validate_round_key(name: str) -> str:
    """`name` itself when it is a valid key; InvalidRoundKey otherwise."""
    problem = round_key_problem(name)
    if problem is not None:
        raise InvalidRoundKey(problem)
    return name
