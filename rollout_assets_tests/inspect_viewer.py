"""Start and stop a real Inspect log viewer (`inspect view`, or `rollout-assets view` which becomes
it) for end-to-end tests: in its own session with default signal handling, polled on its
`/api/logs` until it lists what it should, stopped by process group."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rollout_assets_tests.dagster_dev import free_port, served


@dataclass(frozen=True)
class RunningViewer:
    url: str
    port: int
    pid: int
    log: Path

    def listed_logs(self) -> list[str]:
        """The log files the viewer lists (paths relative to its log folder)."""
        with urllib.request.urlopen(f"{self.url}/api/logs", timeout=10) as response:
            listing = json.load(response)
        root = listing["log_dir"].rstrip("/") + "/"
        return sorted(entry["name"].removeprefix(root) for entry in listing["files"])


@contextmanager
def viewer(
    command: Callable[[int], list[str]],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    startup_timeout_s: float = 90,
) -> Iterator[RunningViewer]:
    """A running viewer from `command(port)` on a free loopback port, stopped on exit."""
    port = free_port()
    with served("the viewer", command(port), "/api/logs", log_path, port=port, env=env,
                startup_timeout_s=startup_timeout_s, grace_s=15) as server:  # fmt: skip
        yield RunningViewer(server.url, server.port, server.pid, log_path)
