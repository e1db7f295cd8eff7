"""What a release is built with: its name, license, split rule and scrubbing settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rollout_assets.errors import RoundError
from rollout_assets.io import read_regular_file
from rollout_assets.release.split import SPLIT_UNITS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ReleaseError(RoundError, ValueError):
    """A release that cannot be built as asked (no license, a bad name, missing training files)."""


class MissingLicense(ReleaseError):
    """No license was given: nothing is released without one."""


@dataclass(frozen=True)
class ReleaseConfig:
    license: str
    name: str = "rollout-dataset"
    split_unit: str = "instance"
    test_fraction: float = 0.1
    host_names: tuple[str, ...] = field(default=())
    allowed: frozenset[str] = field(default=frozenset())  # finding hashes a person checked (allowlist.py)

    def __post_init__(self) -> None:
        _check_types(self)
        if not self.license or not self.license.strip():
            raise MissingLicense("a release needs a license (an SPDX id such as cc-by-4.0 or apache-2.0): none was given")
        if not _NAME.match(self.name):
            raise ReleaseError(f"release name {self.name!r}: use letters, digits, '.', '_' and '-' (at most 100)")
        if self.split_unit not in SPLIT_UNITS:
            raise ReleaseError(f"split unit {self.split_unit!r}: one of {', '.join(SPLIT_UNITS)}")
        if not 0 <= self.test_fraction < 1:
            raise ReleaseError(f"test fraction {self.test_fraction}: between 0 (included) and 1 (excluded)")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "license": self.license,
            "split_unit": self.split_unit,
            "test_fraction": self.test_fraction,
            "host_names": len(self.host_names),  # how many, never which: the names are what is scrubbed
            "allowed": len(self.allowed),  # the hashes themselves are in the scrub report
        }


def _json_kind(value: Any) -> str:
    """What a value is, in JSON's words (a config file's values are JSON)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def _check_types(config: ReleaseConfig) -> None:
    """ReleaseError naming the setting when a value has the wrong type (`"test_fraction": "0.1"`,
    a string of host names, whose characters would each be scrubbed)."""
    for key in ("license", "name", "split_unit"):
        value = getattr(config, key)
        if not isinstance(value, str) and not (key == "license" and value is None):
            raise ReleaseError(f"release setting {key}: a string, not {_json_kind(value)} ({value!r})")
    fraction = config.test_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ReleaseError(f"release setting test_fraction: a number, not {_json_kind(fraction)} ({fraction!r})")
    names = config.host_names
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        what = _json_kind(names) if not isinstance(names, (list, tuple)) else "a list holding something else"
        raise ReleaseError(f"release setting host_names: a list of host names (strings), not {what} ({names!r})")


def load_config_file(path: Path, **overrides: Any) -> ReleaseConfig:
    """A JSON file of ReleaseConfig's keys; values given on the command line win."""
    try:
        values = orjson.loads(read_regular_file(path))  # a FIFO is refused, not waited on
    except (OSError, orjson.JSONDecodeError) as error:
        raise ReleaseError(f"{path}: not a readable JSON release config ({error})") from error
    if not isinstance(values, dict):
        raise ReleaseError(f"{path}: a release config is a JSON object")
    unknown = sorted(set(values) - {"license", "name", "split_unit", "test_fraction", "host_names"})
    if unknown:
        raise ReleaseError(f"{path}: unknown key(s) {', '.join(unknown)}")
    values.update({key: value for key, value in overrides.items() if value is not None})
    if isinstance(values.get("host_names"), list):  # anything else is refused by ReleaseConfig
        values["host_names"] = tuple(values["host_names"])
    return ReleaseConfig(**values)
