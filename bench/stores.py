"""The servers the benchmarks use: where they are, a client, and the keys that are ours.

Servers come from TEST_REDIS_URL / TEST_DATABASE_URL (set by `make bench` through
scripts/with_test_services.py), falling back to REDIS_URL / DATABASE_URL. The
benchmarks only ever touch keys under their own prefixes (see `OWN_KEY_PATTERNS`) and
records of their own users (`BENCH_USER_BASE` and up); they never flush a server. The
database side (schema, records) is bench/db.py.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import redis

#: Key patterns the benchmarks create, deleted before and after each run (never FLUSHDB).
#: `rq:*` is RQ's fixed namespace; `bench-dramatiq*` Dramatiq RedisBroker's namespace here;
#: `bench-*:queue*` our broker's queues; `broker:heartbeats`, `processes:beats`,
#: `report:queue*`, `eventlog:*` and `hotpath:*` belong to the real pipeline (the end-to-end
#: benchmarks run it): the benchmarks must be given a db index of their own (the test one).
OWN_KEY_PATTERNS = (
    "bench-*",
    "bench:*",
    "rq:*",
    "report:queue*",
    "broker:heartbeats",
    "processes:beats",
    "eventlog:*",
    "hotpath:*",
)

#: Records of the database benchmarks belong to users from here on; deleted afterwards.
BENCH_USER_BASE = 8_000_000_000


def redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL")
    if not url:
        raise SystemExit("set TEST_REDIS_URL (or REDIS_URL) to a Redis db index the benchmarks may use")
    return url


def database_url() -> str:
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set TEST_DATABASE_URL (or DATABASE_URL) to a database the benchmarks may use")
    return url


def delete_own_keys(client: redis.Redis, patterns: Iterable[str] = OWN_KEY_PATTERNS) -> int:
    """Delete the keys matching our own patterns (SCAN + DEL in chunks); the number deleted."""
    deleted = 0
    for pattern in patterns:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += int(client.delete(*batch))
                batch = []
        if batch:
            deleted += int(client.delete(*batch))
    return deleted


@contextlib.contextmanager
def private_redis(bind: tuple[str, ...] = ("127.0.0.1",)) -> Iterator[str]:
    """A redis-server of our own on a free port (no persistence), stopped afterwards; its
    URL is on 127.0.0.1, `bind` may add addresses (other network namespaces reach it there)."""
    from scripts import servers  # as `make test` uses it

    with servers.temporary_directory("mi-bench-redis-") as tmp:
        server = servers.RedisServer(tmp, bind=bind).start()
        try:
            yield server.url
        finally:
            server.stop()


def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=30)
