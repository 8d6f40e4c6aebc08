"""REDIS_URL in its redis+sentinel:// form: parsing, refusal of malformed URLs, the pool it makes."""

from __future__ import annotations

from typing import Any, cast

import pytest
from redis.sentinel import MasterNotFoundError, SentinelConnectionPool

from config import ConfigError
from config.redis_urls import SentinelURL, parse_sentinel_url
from config.settings import Settings
from redis_adapters.redis_clients import FollowingSentinelPool, connection_pool, redis_client


def test_hosts_service_and_db() -> None:
    assert parse_sentinel_url(
        "redis+sentinel://10.0.0.1:26380,10.0.0.2,[::1]:5000/mymaster/3"
    ) == SentinelURL(
        sentinels=(("10.0.0.1", 26380), ("10.0.0.2", 26379), ("::1", 5000)),
        service_name="mymaster",
        db=3,
    )


def test_passwords_follow_redis_py() -> None:
    target = parse_sentinel_url("redis+sentinel://app:p%40ss@h:1/svc?sentinel_password=s3")
    assert (target.username, target.password, target.sentinel_password, target.db) == ("app", "p@ss", "s3", 0)
    assert parse_sentinel_url("redis+sentinel://:secret@h:1/svc").password == "secret"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:1", "names no service"),
        ("redis+sentinel://h:1/", "names no service"),
        ("redis+sentinel://h:1/svc/x", "must be a number"),
        ("redis+sentinel://h:1/svc/0/extra", "/service_name[/db]"),
        ("redis+sentinel://h:port/svc", "bad port"),
        ("redis+sentinel://h:1,/svc", "empty Sentinel address"),
        ("redis+sentinel://:1/svc", "has no host"),
        ("redis+sentinel://h:1/svc?ssl=1", "unknown parameter"),
    ],
)
def test_malformed_urls_are_refused_at_start_up(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match="REDIS_URL") as caught:
        Settings.from_env({"REDIS_URL": url})
    assert says in str(caught.value)


def test_the_password_is_never_in_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sentinel_url("redis+sentinel://:hunter2@h:1/svc/x")
    assert "hunter2" not in str(caught.value)


def test_a_sentinel_url_is_accepted_as_it_is() -> None:
    url = "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/2"
    assert Settings.from_env({"REDIS_URL": url}).redis_url == url


def test_the_pool_asks_the_sentinels_for_the_master() -> None:
    pool = connection_pool(
        "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.2:26380/mymaster/2?sentinel_password=sp",
        socket_timeout=3,
        socket_connect_timeout=1,
    )
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (2, "pw")
    assert pool.connection_kwargs["socket_timeout"] == 3
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
    # The Sentinels get their own password and the caller's timeouts, never the master's password.
    assert {s.connection_pool.connection_kwargs["password"] for s in sentinels} == {"sp"}
    assert {s.connection_pool.connection_kwargs["socket_connect_timeout"] for s in sentinels} == {1}


def test_a_plain_url_keeps_a_plain_pool() -> None:
    client = redis_client("redis://127.0.0.1:6379/4", socket_timeout=2)
    assert not isinstance(client.connection_pool, SentinelConnectionPool)
    assert client.connection_pool.connection_kwargs["db"] == 4
    client.close()


class CountingSentinels:
    """A Sentinel manager naming `master`, counting the questions; `down` makes them fail."""

    def __init__(self) -> None:
        self.master = ("127.0.0.1", 7001)
        self.asked = 0
        self.down = False

    def discover_master(self, service_name: str) -> tuple[str, int]:
        self.asked += 1
        if self.down:
            raise MasterNotFoundError(f"No master found for {service_name!r}")
        return self.master


def test_a_sentinel_pool_asks_for_the_master_at_most_every_follow_interval() -> None:
    sentinels = CountingSentinels()
    now = [100.0]
    pool = FollowingSentinelPool("mymaster", cast(Any, sentinels), follow_s=0.5, clock=lambda: now[0])
    pool.follow()
    pool.follow()
    assert sentinels.asked == 1
    assert pool.master_address == ("127.0.0.1", 7001)
    now[0] += 0.5
    sentinels.master = ("127.0.0.1", 7002)  # a switch-over
    pool.follow()
    assert (sentinels.asked, pool.master_address) == (2, ("127.0.0.1", 7002))
    # No Sentinel answers: the pool keeps what it knew, nothing is raised.
    sentinels.down = True
    now[0] += 0.5
    pool.follow()
    assert (sentinels.asked, pool.master_address) == (3, ("127.0.0.1", 7002))
