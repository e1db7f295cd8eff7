"""A real, throwaway PostgreSQL server on a loopback port, for the scale-out tests.

Started with `initdb` / `pg_ctl` (Debian's `postgresql` package, which `.ci/run` installs),
as the `postgres` user when the tests run as root (initdb refuses root), and stopped by the
fixture that started it.
"""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    database: str

    def environment(self) -> dict[str, str]:
        """The variables deploy/postgres/dagster.yaml reads."""
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": self.database,
            "DAGSTER_PG_USER": self.user,
            "DAGSTER_PG_PASSWORD": "unused-trust-auth",
        }


def postgres_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")):
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def run_postgres() -> Iterator[PostgresServer]:
    """Start a server in a fresh folder, yield it, stop it and remove the folder (also on failure).

    The folder is made directly under the system temp dir: pytest's own temp folders are
    private to root, and the server runs as `postgres`.
    """
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")
    workdir = Path(tempfile.mkdtemp(prefix="rollout-assets-pg-"))
    if os.geteuid() == 0:
        shutil.chown(workdir, user="postgres")
    data, log = workdir / "data", workdir / "server.log"
    port = free_port()
    user, database = "rollout", "dagster"
    subprocess.run(
        _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", user]),
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log)]
    subprocess.run(_as_server_user([*pg_ctl, "-o", options, "-w", "start"]), check=True, capture_output=True)
    try:
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, database],
            check=True,
            capture_output=True,
        )
        yield PostgresServer("127.0.0.1", port, user, database)
    finally:
        subprocess.run(_as_server_user([*pg_ctl, "-m", "fast", "-w", "stop"]), check=False, capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
