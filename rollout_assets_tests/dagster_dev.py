"""Start and stop a real server for end-to-end tests (`served`): `dagster dev` (webserver +
daemon) here, Inspect's viewer in inspect_viewer.py.

Started in its own session with default signal handling (a background child of a
non-interactive shell would otherwise ignore SIGINT and SIGTERM), polled on /server_info
until it answers, and stopped by process group: SIGTERM, then SIGKILL after a grace period.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Nothing listens on the port any more (a bind test would trip over TIME_WAIT sockets)."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) != 0


# Run through a tiny Python launcher that restores default SIGINT/SIGTERM handling and then
# execs the real command (a preexec_fn would do the same, but is unsafe with threads).
WITH_DEFAULT_SIGNALS = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _stop(process: subprocess.Popen, grace_s: float) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    # The group's other members (a code server, a daemon) go with it.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Served:
    url: str
    port: int
    pid: int


@contextmanager
def served(
    name: str,
    command: list[str],
    ready_path: str,
    log_path: Path,
    *,
    port: int,
    env: dict[str, str] | None = None,
    startup_timeout_s: float = 90,
    grace_s: float = 20,
) -> Iterator[Served]:
    """A server from `command` (listening on 127.0.0.1:`port`) in its own session with default
    signal handling, ready once `ready_path` answers 200; stopped by process group on exit,
    and its port free again."""
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", WITH_DEFAULT_SIGNALS, *command],
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
                    raise RuntimeError(f"{name} exited with {process.returncode}: {log_path.read_text()}")
                try:
                    with urllib.request.urlopen(f"{url}{ready_path}", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer within {startup_timeout_s} s; see {log_path}")
                time.sleep(0.5)
            yield Served(url, port, process.pid)
        finally:
            _stop(process, grace_s)
    deadline = time.monotonic() + 15
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert port_is_free(port), f"port {port} still taken after stopping {name}"


@dataclass(frozen=True)
class RunningDagster:
    url: str
    port: int
    log: Path


@contextmanager
def dagster_dev(env: dict[str, str], log_path: Path, startup_timeout_s: float = 90) -> Iterator[RunningDagster]:
    """A running `dagster dev` bound to 127.0.0.1 on a free port, stopped on exit."""
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    command = [dagster, "dev", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"]
    with served("dagster dev", command, "/server_info", log_path, port=port, env=env,
                startup_timeout_s=startup_timeout_s) as server:  # fmt: skip
        yield RunningDagster(server.url, server.port, log_path)
