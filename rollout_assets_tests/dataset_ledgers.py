"""Ledgers for the tests of `export` and `release`: real files of valid worker lines, and the
command line run as a user runs it."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from rollout_assets.ledger import write_ledger
from rollout_assets_tests.ledger_samples import sample_line, sample_worker_line


# Words of a tool output that no secret detector reads as a secret, and compress poorly in a mix.
_WORDS = (
    "assert build cache check commit config debug deploy error fetch field fixture folder format "
    "import index ledger merge module output parser patch query reader record refactor release "
    "request result review round schema script search session shell source split stage status "
    "string suite table test token trace update value version worker writer"
).split()


def worker_lines(count: int, tag: str, pad: int = 0) -> list[dict[str, Any]]:
    """`count` trainable worker lines, one instance each; `tag` makes their ids and text unique to
    this ledger, `pad` adds about that many characters of tool output (words) to each."""
    rng = random.Random(tag)
    text = " ".join(rng.choice(_WORDS) for _ in range(pad // 6 + 2000)) if pad else ""
    lines = []
    for index in range(count):
        line = sample_worker_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{index}")))
        line["task"]["instance_id"] = f"org__repo-{index}"
        start = (index * 7919) % 10000
        line["messages"][2]["content"] = f"{tag} {index} {text[start : start + pad]}"
        line["messages"][-1]["content"] = f"Done ({tag} {index})."
        lines.append(line)
    return lines


def paired_lines(instances: int, tag: str, pad: int = 0) -> list[dict[str, Any]]:
    """Two worker lines per instance with the same prompt and rewards 1.0 and 0.2: a preference
    pair and a GRPO group each."""
    lines = worker_lines(2 * instances, tag, pad)
    for index, line in enumerate(lines):
        line["task"]["instance_id"] = f"org__pairs-{index // 2}"
        line["outcome"]["reward"] = 1.0 if index % 2 == 0 else 0.2
    return lines


def write_round(
    root: Path, key: str, count: int = 6, tag: str = "", pad: int = 0, pairs: int = 0
) -> Path:
    """`<root>/<key>/rollout-ledger.jsonl` with a supervisor gap line, `count` worker lines of an
    instance each, and `pairs` instances of two lines each."""
    ledger = root / key / "rollout-ledger.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    supervisor = sample_line(rollout_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag or key}-supervisor")))
    extra = paired_lines(pairs, f"{tag or key}-pairs", pad) if pairs else []
    write_ledger(ledger, [supervisor, *worker_lines(count, tag or key, pad), *extra])
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
    """Every file under `folder` (symlinks not followed) by relative path, with its bytes; a
    symlink or a FIFO by what it is (reading a FIFO would wait for a writer)."""
    found = {}
    for base, _, names in os.walk(folder):
        for name in names:
            path = Path(base, name)
            if path.is_symlink() or not path.is_file():
                found[str(path.relative_to(folder))] = f"<not a file: {os.lstat(path).st_mode:o}>".encode()
            else:
                found[str(path.relative_to(folder))] = path.read_bytes()
    return found
