"""Start and stop a real Inspect log viewer (`inspect view`, or `rollout-assets view` which becomes
it) for end-to-end tests: in its own session with default signal handling, polled on its
`/api/logs` until it lists what it should, stopped by process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rollout_assets_tests.dagster_dev import PROJECT, WITH_DEFAULT_SIGNALS, free_port, port_is_free


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


def _stop(process: subprocess.Popen, grace_s: float = 15) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


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
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", WITH_DEFAULT_SIGNALS, *command(port)],
            cwd=PROJECT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + startup_timeout_s
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the viewer exited with {process.returncode}: {log_path.read_text()}")
                try:
                    with urllib.request.urlopen(f"{url}/api/logs", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the viewer did not answer within {startup_timeout_s} s; see {log_path}")
                time.sleep(0.5)
            yield RunningViewer(url, port, process.pid, log_path)
        finally:
            _stop(process)
    deadline = time.monotonic() + 15
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert port_is_free(port), f"port {port} still taken after stopping the viewer"
