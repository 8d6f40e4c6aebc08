"""No heartbeat entry left for a consumer that is gone (through the fault proxy of scripts/faults.py).

The broker with any Dramatiq encoder: broker/tests/test_edges.py."""

from __future__ import annotations

import time

import redis
from listbroker.keys import HEARTBEATS_KEY

from scripts.faults import FaultProxy
from tests.support.broker_fixtures import BrokerFactory
from tests.support.processes import wait_until


def test_no_heartbeat_is_left_for_a_consumer_built_and_closed_while_redis_was_down(
    make_broker: BrokerFactory, redis_url: str, redis_client: redis.Redis
) -> None:
    """A consumer built while Redis is down waits to register (`consume` raises no Redis
    error); closed before Redis came back, it must not register later and be heartbeated
    forever: one empty entry each (what restarted consumers once left)."""
    proxy = FaultProxy(redis_url)
    try:
        broker = make_broker(
            client=redis.Redis.from_url(proxy.url, socket_timeout=2, socket_connect_timeout=1)
        )
        broker.declare_queue("beats")
        live = broker.consume("beats", prefetch=1, timeout=100)
        proxy.down()
        for _ in range(3):
            waiting = broker.consume("beats", prefetch=1, timeout=100)
            assert next(waiting) is None  # Redis down: no message, no error
            waiting.close()
        proxy.up()
        time.sleep(0.6)  # two heartbeat intervals of the test broker
        wait_until(
            lambda: redis_client.zrange(HEARTBEATS_KEY, 0, -1) == [live.processing_key.encode()],
            timeout=30,
            what="only the live consumer's heartbeat",
        )
        live.close()
        wait_until(
            lambda: redis_client.zcard(HEARTBEATS_KEY) == 0, timeout=30, what="the closed consumer's release"
        )
    finally:
        proxy.close()
