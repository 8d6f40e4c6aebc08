"""Redis Cluster clients, from a `redis+cluster://` REDIS_URL.

`redis+cluster://[[user]:password@]host:port[,host:port...]` names some nodes of a
cluster (the client discovers the others and follows the slots as they move); the
client is then redis-py's `RedisCluster`, and the keys must be hash-tagged
(REDIS_HASH_TAGS, redis_adapters/keyspace.py `Keyspace`) so each script and transaction
stays on one slot. The other schemes are made in redis_adapters/redis_clients.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from config import ConfigError
from config.settings import REDIS_CLUSTER_SCHEME


@dataclass(frozen=True)
class ClusterURL:
    nodes: list[tuple[str, int]]
    #: username / password, if the URL has them.
    credentials: dict[str, str] = field(default_factory=dict)


def is_cluster_url(url: str) -> bool:
    return url.startswith(REDIS_CLUSTER_SCHEME)


def parse_cluster_url(url: str) -> ClusterURL:
    """The nodes and credentials of a `redis+cluster://` URL; ConfigError when malformed."""
    if not is_cluster_url(url):
        raise ConfigError(f"not a {REDIS_CLUSTER_SCHEME} URL: {url!r}")
    rest = url[len(REDIS_CLUSTER_SCHEME) :]
    userinfo, _, hosts = rest.rpartition("@")
    hosts, _, db = hosts.partition("/")
    if db not in ("", "0"):
        raise ConfigError(f"a Redis Cluster has only database 0, the URL asks for {db!r}")
    credentials: dict[str, str] = {}
    if userinfo:
        user, sep, password = userinfo.partition(":")
        if user:
            credentials["username"] = unquote(user)
        if sep:
            credentials["password"] = unquote(password)
    nodes = []
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"REDIS_URL: expected host:port for each cluster node, got {part!r}")
        nodes.append((host.strip("[]"), int(port)))
    return ClusterURL(nodes=nodes, credentials=credentials)


class _Cluster(RedisCluster):
    """redis-py's `RedisCluster`, whose "no node can be reached" is a `redis.ConnectionError`.

    After a failed call redis-py reads the slot map again; when no node answers that either,
    it raises `RedisClusterException`, which is not a `redis.RedisError`: every caller
    handles an unreachable Redis as a `redis.ConnectionError` (a 503, a submission
    `enqueued: false`, a loop that retries), and would take this one for a bug (a 500).
    Only that case is converted: the client's other RedisClusterExceptions are misuse.
    """

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]  # redis-py untyped
        except RedisClusterException as exc:
            if isinstance(exc.__cause__, redis.ConnectionError | redis.TimeoutError):
                raise redis.ConnectionError(f"no node of the Redis Cluster answers: {exc}") from exc
            raise


def cluster_client(url: str, **options: Any) -> redis.Redis:
    """A `RedisCluster` for a `redis+cluster://` URL; `options` as for `redis.Redis`.

    The first node is given to redis-py as a URL and the others as startup nodes: in its
    URL form redis-py hands every option to each node's connection pool, so options of
    the pool (e.g. the web tier's `connection_class`) reach every node, found later too.
    """
    parsed = parse_cluster_url(url)
    (host, port), *others = parsed.nodes
    first = f"redis://[{host}]:{port}" if ":" in host else f"redis://{host}:{port}"
    settings: dict[str, Any] = {**parsed.credentials, **options}
    client = _Cluster(url=first, startup_nodes=[ClusterNode(h, p) for h, p in others], **settings)
    # RedisCluster is not a subclass of redis.Redis, but it offers the same commands,
    # scripts and pipelines (pipelines and scripts on one slot, which hash-tagged keys
    # guarantee); the pipeline's code is written against redis.Redis, so it is typed as one.
    return cast(redis.Redis, client)
