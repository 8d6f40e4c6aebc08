"""Run a command (the test suite) with a PostgreSQL and a Redis it may use.

    python -m scripts.with_test_services -- pytest ...

Order of preference, for each server:
1. TEST_DATABASE_URL / TEST_REDIS_URL when set (used as they are);
2. a server already listening on the default local port, in a database / db index of
   our own (never flushed, never stopped), when one is free;
3. a private server started here on a free port in a temporary folder (installed with
   apt-get when no binary is found), stopped when the command ends. MI_TEST_PRIVATE_SERVERS=1
   skips step 2.

The private servers and the command end when this process ends, however it ends (killed
included), and the temporary folder goes: scripts/lifeline.py.

The command sees TEST_DATABASE_URL, TEST_REDIS_URL, TEST_REDIS_SERVER (a redis-server
binary for tests that start a server of their own) and MI_REQUIRE_SERVICES=1 (the
integration tests fail rather than skip when a server is missing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

from scripts import lifeline, servers

#: Advisory lock key taken on the test database so two runs never share one.
DB_LOCK_KEY = 0x6D69_7465  # "mite"
DB_BASENAME = "mi_assessment_test"

#: MI_TEST_PRIVATE_SERVERS=1: never reuse the servers on the default ports (isolated CI runs).
PRIVATE = os.environ.get("MI_TEST_PRIVATE_SERVERS") == "1"


#: Test databases a server holds at most: room for several `make test` at once, each running
#: its parts and the broker suite at once (scripts/test_shards.py), one database each.
MAX_DATABASES = 24


def claim_database(admin_url: str, stack: contextlib.ExitStack) -> str | None:
    """A test database of our own on the server of `admin_url`, or None when every one is in use."""
    base = admin_url.rsplit("/", 1)[0]
    for suffix in ["", *[f"_{n}" for n in range(2, MAX_DATABASES + 1)]]:
        name = DB_BASENAME + suffix
        servers.ensure_database(admin_url, name)
        url = f"{base}/{name}"
        conn = psycopg.connect(url, autocommit=True)
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (DB_LOCK_KEY,)).fetchone()
        if row and row[0]:
            stack.callback(conn.close)
            return url
        conn.close()
    servers.log("every test database of the reused PostgreSQL is in use by another run")
    return None


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print(__doc__)
        return 2
    lifeline.attach()
    env = dict(os.environ, MI_REQUIRE_SERVICES="1")
    with contextlib.ExitStack() as stack:
        tmp: Path | None = None

        def tmpdir() -> Path:
            nonlocal tmp
            if tmp is None:
                tmp = stack.enter_context(servers.temporary_directory("mi-test-"))
                lifeline.remove_on_exit(tmp)
            return tmp

        database_url = os.environ.get("TEST_DATABASE_URL")
        if not database_url:
            admin = None if PRIVATE else servers.reusable_postgres()
            database_url = None if admin is None else claim_database(admin, stack)
            if database_url is None:
                servers.log("starting a private PostgreSQL")
                pg = servers.PostgresServer(tmpdir() / "pg").start()
                stack.callback(pg.stop)
                database_url = claim_database(pg.admin_url, stack)
                assert database_url is not None  # a new server: nothing else holds its databases
        env["TEST_DATABASE_URL"] = database_url

        redis_url = os.environ.get("TEST_REDIS_URL")
        if not redis_url:
            redis_url = None if PRIVATE else servers.claim_redis_db("redis://127.0.0.1:6379/0")
            if redis_url:
                stack.callback(servers.release_redis_db, redis_url)
            else:
                servers.log("starting a private Redis")
                rs = servers.RedisServer(tmpdir() / "redis").start()
                stack.callback(rs.stop)
                redis_url = rs.url
        env["TEST_REDIS_URL"] = redis_url
        env.setdefault("TEST_REDIS_SERVER", servers.redis_server_binary())

        servers.log(f"database {database_url}")
        servers.log(f"redis    {redis_url}")
        child = subprocess.Popen(argv, env=env)

        def forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
