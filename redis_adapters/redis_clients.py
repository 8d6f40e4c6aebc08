"""Redis clients from REDIS_URL: a single server, a `redis+sentinel://` or a `redis+cluster://` URL.

Every process (web, workers, hotpath, reconciler) makes its clients here. With a
Sentinel URL (config/redis_urls.py) the pool is `FollowingSentinelPool`, redis-py's
`SentinelConnectionPool` that also follows a failover between connects: each new
connection asks the Sentinels for the current master, a connection to a master that was
demoted (READONLY) or died is dropped, and the pool asks the Sentinels again at most
every DEFAULT_SENTINEL_FOLLOW_S when a connection is taken, dropping its idle connections
(and each busy one when it is given back) once the master moved. Without that, open
connections kept writing to the old master until the Sentinels demoted it, about 11 s
after a switch-over, and the resync discarded those writes (found by the soak on
Sentinel, docs/reliability.md). Callers pass the connection settings they would give `from_url`
(timeouts, keepalive); the Sentinels themselves get the same timeouts, so a dead
Sentinel costs one connect timeout before the next one is asked.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from config.redis_urls import is_sentinel_url, parse_sentinel_url
from redis_adapters.redis_cluster import cluster_client, is_cluster_url

#: What a call raises when Redis cannot be reached or does not answer in time, whatever the
#: topology (a server, Sentinel, Cluster): callers treat every one of these alike (a 503, a
#: submission `enqueued: false`, a loop that waits and tries again). Which of the two a
#: given outage gives depends on which timeout fires first and on redis-py's release, so no
#: caller (nor test) may tell them apart. A reply that is an error (a script error, a wrong
#: type) is none of these: it says Redis is alive.
UNREACHABLE: tuple[type[redis.RedisError], ...] = (redis.ConnectionError, redis.TimeoutError)

#: Settings that apply to the Sentinel connections too (the rest only to the master's).
_SENTINEL_SHARED = ("socket_timeout", "socket_connect_timeout", "socket_keepalive")


#: How often, at most, a Sentinel pool asks the Sentinels which server is the master (when a
#: connection is taken): a switch-over is followed within this, one Sentinel round trip.
DEFAULT_SENTINEL_FOLLOW_S = 0.5


class FollowingSentinelPool(SentinelConnectionPool):
    """A `SentinelConnectionPool` that asks the Sentinels for the master at most every
    `follow_s` when a connection is taken (one thread asks, the others go on), so a
    failover is followed by the connections already open, not only by new ones.
    `SentinelConnectionPool.get_master_address` drops the idle connections when the master
    moved, and `owns_connection` each busy one when it is given back."""

    def __init__(
        self,
        service_name: str,
        sentinel_manager: Sentinel,
        *,
        follow_s: float = DEFAULT_SENTINEL_FOLLOW_S,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        self.follow_s = follow_s
        self.clock = clock
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]

    def reset(self) -> None:
        # Also after a fork (redis-py resets a pool in a new process): a lock held by a thread
        # of the parent at the fork would stay held in the child.
        super().reset()  # type: ignore[no-untyped-call]
        self._follow_lock = threading.Lock()
        self._followed_at = -math.inf

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.follow()
        return super().get_connection(*args, **kwargs)

    def follow(self) -> None:
        """Ask the Sentinels for the master if `follow_s` passed since the last time."""
        now = self.clock()
        if not self.is_master or now - self._followed_at < self.follow_s:
            return
        if not self._follow_lock.acquire(blocking=False):
            return
        try:
            self._followed_at = now
            self.get_master_address()  # type: ignore[no-untyped-call]
        except redis.RedisError:
            pass  # no Sentinel answers now: the connections stay; a new one asks and fails there
        finally:
            self._follow_lock.release()


def connection_pool(url: str, **kwargs: Any) -> redis.ConnectionPool:
    """A connection pool for `url`, with `kwargs` as for `redis.ConnectionPool.from_url`."""
    if not is_sentinel_url(url):
        return redis.ConnectionPool.from_url(url, **kwargs)
    target = parse_sentinel_url(url)
    sentinel_kwargs: dict[str, Any] = {k: kwargs[k] for k in _SENTINEL_SHARED if k in kwargs}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    master_kwargs: dict[str, Any] = {"db": target.db, **kwargs}
    if target.username:
        master_kwargs["username"] = target.username
    if target.password:
        master_kwargs["password"] = target.password
    return FollowingSentinelPool(target.service_name, manager, **master_kwargs)


def redis_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client for `url` (a single server, a Sentinel-watched master or a Redis Cluster,
    see redis_cluster.py); closing it closes its pool."""
    if is_cluster_url(url):
        return cluster_client(url, **kwargs)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    return redis.Redis.from_pool(connection_pool(url, **kwargs))
