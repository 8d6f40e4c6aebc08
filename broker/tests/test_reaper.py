"""The reaper in two steps (silent.lua lists, reap.lua moves with every key declared), on a real Redis."""

from __future__ import annotations

import redis
from listbroker import RedisListBroker
from listbroker.keys import HEARTBEATS_KEY, QueueKeys
from listbroker.maintenance import Maintenance
from support import bytes_list


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_consumer_that_beats_after_being_listed_is_not_reaped(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    keys = QueueKeys.for_queue("default")
    lost = keys.processing("listed-then-beat")
    started = keys.started("listed-then-beat")
    redis_client.lpush(lost, b"m")
    redis_client.hset(started, b"m", 1)  # it had started (start.lua)
    redis_client.zadd(keys.heartbeats, {lost: 1})
    assert bytes_list(broker.scripts.silent(keys=[keys.heartbeats], args=[2_000, 10])) == [lost.encode()]
    redis_client.zadd(keys.heartbeats, {lost: server_ms(redis_client)})  # it beats meanwhile
    reap_keys = [keys.heartbeats, lost, keys.queue, keys.crashed, keys.counted, started]
    assert broker.scripts.reap(keys=reap_keys, args=[2_000]) == -1
    assert redis_client.lrange(lost, 0, -1) == [b"m"]
    redis_client.zadd(keys.heartbeats, {lost: 1})  # silent again
    assert broker.scripts.reap(keys=reap_keys, args=[2_000]) == 1
    assert redis_client.lrange(keys.queue, 0, -1) == [b"m"]
    assert redis_client.hget(keys.crashed, b"m") == b"1"
    assert not redis_client.exists(started)
    assert redis_client.zscore(keys.heartbeats, lost) is None
    assert broker.scripts.reap(keys=reap_keys, args=[2_000]) == -1  # another reaper came first


def test_the_shared_heartbeat_set_is_reaped_whatever_the_queue(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """Default layout: a dead consumer of a queue this process never declared is reaped too,
    its queue found from the processing list's name, as before the keys were declared. Only
    the message that had started counts a lost delivery; the one merely held goes back uncounted."""
    broker.declare_queue("default")
    other = QueueKeys.for_queue("other")
    lost = other.processing("dead")
    redis_client.rpush(lost, b"newest", b"oldest")
    redis_client.hset(other.started("dead"), b"oldest", 1)
    redis_client.zadd(HEARTBEATS_KEY, {lost: 1, "not-a-processing-list": 1})
    assert Maintenance(broker).reap() == 2
    assert redis_client.lrange(other.queue, 0, -1) == [
        b"newest",
        b"oldest",
    ]  # oldest next (taken from the right)
    assert redis_client.hgetall(other.crashed) == {b"oldest": b"1"}
    assert not redis_client.exists(other.started("dead"))
    assert redis_client.zcard(HEARTBEATS_KEY) == 0
