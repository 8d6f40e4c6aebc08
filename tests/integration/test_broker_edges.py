"""No heartbeat entry left for a consumer that is gone (through the fault proxy of scripts/faults.py).

The broker with any Dramatiq encoder: broker/tests/test_edges.py."""

from __future__ import annotations

import time

import pytest
import redis
from dramatiq.errors import ConnectionClosed
from listbroker.keys import HEARTBEATS_KEY

from scripts.faults import FaultProxy
from tests.support.broker_fixtures import BrokerFactory
from tests.support.processes import wait_until


def test_no_heartbeat_is_left_for_a_consumer_that_failed_to_start(
    make_broker: BrokerFactory, redis_url: str, redis_client: redis.Redis
) -> None:
    """With Redis down, every restart of a consumer thread failed in `consume` yet stayed
    registered, and was heartbeated forever once Redis was back: one empty entry each."""
    proxy = FaultProxy(redis_url)
    try:
        broker = make_broker(
            client=redis.Redis.from_url(proxy.url, socket_timeout=2, socket_connect_timeout=1)
        )
        broker.declare_queue("beats")
        live = broker.consume("beats", prefetch=1, timeout=100)
        proxy.down()
        for _ in range(3):
            with pytest.raises(ConnectionClosed):
                broker.consume("beats", prefetch=1, timeout=100)
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
