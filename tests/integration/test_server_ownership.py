"""scripts/servers.py: a private server is used only once it is known to be the one started.

The bug this guards against: the port of a private server was chosen, then bound later;
when another process took it meanwhile, the new server failed to start and the readiness
check accepted whatever answered on the port. Here a server is started on the port of a
running one (the test servers): it must move to another port, and be itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from config.settings import Settings
from scripts import servers

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def started(server: servers.RedisServer | servers.PostgresServer) -> Iterator[None]:
    try:
        server.start()
        yield
    finally:
        server.stop()


@pytest.mark.timeout(120)
def test_a_redis_started_on_a_taken_port_moves_to_another_and_is_its_own(redis_url: str) -> None:
    taken = urlsplit(redis_url).port or 6379
    with servers.temporary_directory("mi-own-redis-") as tmp:
        server = servers.RedisServer(tmp / "redis", port=taken, password="s3cret-redis")
        with started(server):
            assert server.port != taken
            assert servers.redis_serves(server.url, tmp / "redis")
            # NOAUTH, in whichever class redis-py gives it
            with pytest.raises(redis.RedisError, match=r"(?i)auth"):
                redis.Redis(port=server.port, socket_timeout=2).get("x")
            assert (tmp / "redis").stat().st_mode & 0o777 == 0o700
            assert (tmp / "redis" / "redis.conf").stat().st_mode & 0o777 == 0o600
        assert "Address already in use" in (tmp / "redis" / "redis.log").read_text()


@pytest.mark.timeout(300)
def test_a_postgres_started_on_a_taken_port_moves_to_another_and_is_its_own(settings: Settings) -> None:
    taken = urlsplit(settings.database_url).port or 5432
    with servers.temporary_directory("mi-own-pg-") as tmp:
        server = servers.PostgresServer(tmp / "pg", port=taken, password="s3cret-pg", durable=True)
        with started(server):
            assert server.port != taken
            assert "Address already in use" in (server.directory / "postgres.log").read_text()
            assert servers.postgres_serves(server.admin_url, server.data)
            with psycopg.connect(server.admin_url) as conn:
                row = conn.execute("SHOW fsync").fetchone()
                assert row == ("on",)
            for host in ("127.0.0.1", str(server.socket_dir)):
                with pytest.raises(psycopg.OperationalError):
                    psycopg.connect(host=host, port=server.port, user="postgres", dbname="postgres")
            assert Path(server.socket_dir).stat().st_mode & 0o777 == 0o700
