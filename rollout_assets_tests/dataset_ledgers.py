"""Ledgers for the tests of `export` and `release`: real files of valid worker lines, and the
command line run as a user runs it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from rollout_assets.ledger import write_ledger
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line


def worker_lines(count: int, tag: str, pad: int = 0) -> list[dict[str, Any]]:
    """`count` trainable worker lines, one instance each; `tag` makes their ids and text unique to
    this ledger, `pad` adds that many characters of tool output to each."""
    lines = []
    for index in range(count):
        line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{index}")))
        line["task"]["instance_id"] = f"org__repo-{index}"
        line["messages"][2]["content"] = f"{tag} {index} " + hashlib.sha256(tag.encode()).hexdigest() * (pad // 64)
        line["messages"][-1]["content"] = f"Done ({tag} {index})."
        lines.append(line)
    return lines


def write_round(root: Path, key: str, count: int = 6, tag: str = "", pad: int = 0) -> Path:
    """`<root>/<key>/rollout-ledger.jsonl` with a supervisor gap line and `count` worker lines."""
    ledger = root / key / "rollout-ledger.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    supervisor = sample_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag or key}-supervisor")))
    write_ledger(ledger, [supervisor, *worker_lines(count, tag or key, pad)])
    return ledger


def cli(*args: object, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`rollout-assets ARGS` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "rollout_assets.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=kwargs.pop("timeout", 300),
        **kwargs,
    )


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (symlinks not followed) by relative path, with its bytes."""
    found = {}
    for base, _, names in os.walk(folder):
        for name in names:
            path = Path(base, name)
            found[str(path.relative_to(folder))] = path.read_bytes()
    return found
