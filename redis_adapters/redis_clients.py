"""Redis clients from REDIS_URL: a single server, a `redis+sentinel://` or a `redis+cluster://` URL.

Every process (web, workers, hotpath, reconciler) makes its clients here. With a
Sentinel URL (config/redis_urls.py) the pool is redis-py's `SentinelConnectionPool`:
each new connection asks the Sentinels for the current master, and a connection to a
master that was demoted (READONLY) or died is dropped, so the next command goes to the
promoted replica. Callers pass the connection settings they would give `from_url`
(timeouts, keepalive); the Sentinels themselves get the same timeouts, so a dead
Sentinel costs one connect timeout before the next one is asked.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from config.redis_urls import is_sentinel_url, parse_sentinel_url
from redis_adapters.redis_cluster import cluster_client, is_cluster_url

#: Settings that apply to the Sentinel connections too (the rest only to the master's).
_SENTINEL_SHARED = ("socket_timeout", "socket_connect_timeout", "socket_keepalive")


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
    return SentinelConnectionPool(target.service_name, manager, **master_kwargs)


def redis_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client for `url` (a single server, a Sentinel-watched master or a Redis Cluster,
    see redis_cluster.py); closing it closes its pool."""
    if is_cluster_url(url):
        return cluster_client(url, **kwargs)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    return redis.Redis.from_pool(connection_pool(url, **kwargs))
