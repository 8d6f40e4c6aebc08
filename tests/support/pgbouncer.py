"""A private PgBouncer in transaction-pooling mode in front of the test PostgreSQL.

Debian's `pgbouncer` on a free loopback port; clients connect without a password
(`auth_type = any`) and PgBouncer logs into PostgreSQL with the test URL's user and
password. PgBouncer refuses to run as root, so as root it runs as `nobody`, from a
folder that account can read. A small server pool (`default_pool_size`) makes many
client transactions share few server sessions, as in production.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from scripts import lifeline
from scripts.servers import free_port
from tests.support.processes import wait_until

SERVER_POOL_SIZE = 3


def pgbouncer_binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


@dataclass
class PgBouncer:
    database_url: str  # postgresql+psycopg://user[:password]@host:port/db of the real server
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    directory: Path | None = None
    #: Run on each new server connection (PgBouncer's `connect_query`), e.g. a SET search_path.
    connect_query: str | None = None

    @property
    def url(self) -> str:
        """The same database through PgBouncer (no password: `auth_type = any`)."""
        parts = urlsplit(self.database_url)
        return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{self.port}"))

    def _config(self) -> str:
        parts = urlsplit(self.database_url)
        target = [
            f"host={parts.hostname or '127.0.0.1'}",
            f"port={parts.port or 5432}",
            f"dbname={parts.path.lstrip('/')}",
            f"user={parts.username or 'postgres'}",
        ]
        if parts.password:
            target.append(f"password={parts.password}")
        if self.connect_query:
            target.append(f"connect_query='{self.connect_query}'")
        return (
            "[databases]\n"
            f"{parts.path.lstrip('/')} = {' '.join(target)}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {SERVER_POOL_SIZE}\n"
            "max_client_conn = 500\n"
            "server_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )

    def start(self) -> PgBouncer:
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (scripts/bootstrap.sh installs it)")
        self.directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.directory.chmod(0o755)  # readable by `nobody`; holds the test server's password only
        config = self.directory / "pgbouncer.ini"
        config.write_text(self._config())
        config.chmod(0o644)
        argv = [binary, str(config)]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", "nobody"]
        with (self.directory / "out.log").open("wb") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        lifeline.track(self.process.pid)  # ends with the test run, however it ends
        wait_until(self._answers, timeout=15, what=f"pgbouncer on port {self.port}")
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {self.output()}")
        try:
            with psycopg.connect(self.url.replace("+psycopg", ""), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def output(self) -> str:
        return (self.directory / "out.log").read_text(errors="replace") if self.directory else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
