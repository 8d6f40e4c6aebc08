"""`redis+cluster://` URLs: nodes and credentials, and clear errors for what cannot work."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from config import ConfigError
from redis_adapters.redis_clients import redis_client
from redis_adapters.redis_cluster import ClusterURL, parse_cluster_url


def test_nodes_and_credentials() -> None:
    assert parse_cluster_url("redis+cluster://127.0.0.1:7000,10.0.0.2:7001") == ClusterURL(
        nodes=[("127.0.0.1", 7000), ("10.0.0.2", 7001)]
    )
    assert parse_cluster_url("redis+cluster://:p%40ss@h:1/0") == ClusterURL(
        nodes=[("h", 1)], credentials={"password": "p@ss"}
    )
    assert parse_cluster_url("redis+cluster://app:secret@h:1").credentials == {
        "username": "app",
        "password": "secret",
    }


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://h",
        "redis+cluster://h:port",
        "redis+cluster://h:1,",
        "redis+cluster://h:1/3",
        "redis://h:1",
    ],
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_cluster_url(url)


def test_a_plain_url_keeps_the_single_server_client() -> None:
    client = redis_client("redis://127.0.0.1:1/3")
    assert not isinstance(client, RedisCluster)
    assert client.connection_pool.connection_kwargs["db"] == 3
