"""Which split a row goes to: a stable hash of its instance (or of the instance's repository),
so one instance, or one repository, never lands in both train and test."""

from __future__ import annotations

import hashlib

SPLIT_UNITS = ("instance", "repository")


def split_key(instance_id: str, unit: str) -> str:
    """The value the split hashes. A SWE-bench instance id is `<owner>__<repo>-<number>`, so
    its repository is everything before the last dash; an id without a dash is its own
    repository (a proposer's candidate id such as `gen0-cand1` gives `gen0`)."""
    if unit == "repository":
        return instance_id.rsplit("-", 1)[0]
    return instance_id


def split_of(instance_id: str, unit: str, test_fraction: float) -> str:
    """`test` for about `test_fraction` of the keys, `train` for the rest; the same answer on
    every machine and in every release that uses the same unit and fraction."""
    digest = hashlib.sha256(split_key(instance_id, unit).encode("utf-8", "surrogatepass")).digest()
    bucket = int.from_bytes(digest[:8], "big") / 2**64
    return "test" if bucket < test_fraction else "train"
