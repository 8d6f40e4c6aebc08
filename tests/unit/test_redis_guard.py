"""web/redis_guard.py: the fail-fast guard's states, without a server."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from redis_adapters.redis_clients import UNREACHABLE
from tests.support.refuser import CountingRefuser
from web.redis_guard import RedisFailFast, RedisGuard, guarded_redis


def test_closed_guard_lets_every_call_through() -> None:
    guard = RedisGuard(cooldown_s=0.05)
    for _ in range(3):
        guard.before_call()
    assert not guard.is_open


def test_after_a_failure_calls_fail_fast_then_one_probe_goes_through() -> None:
    guard = RedisGuard(cooldown_s=0.05, probe_timeout_s=10)
    guard.failed(redis.TimeoutError("Timeout reading from socket"))
    with pytest.raises(RedisFailFast):
        guard.before_call()
    time.sleep(0.06)
    guard.before_call()  # the probe
    guard.before_call()  # the probe's own nested call (a new connection's HELLO)
    other: list[BaseException] = []

    def call() -> None:
        try:
            guard.before_call()
        except RedisFailFast as exc:
            other.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert other, "another thread must not wait on Redis while the probe is out"
    guard.succeeded()
    assert not guard.is_open
    guard.before_call()


def test_a_failed_probe_opens_the_guard_again() -> None:
    guard = RedisGuard(cooldown_s=0.05)
    guard.failed(redis.ConnectionError("refused"))
    time.sleep(0.06)
    guard.before_call()
    guard.failed(redis.TimeoutError("again"))
    with pytest.raises(RedisFailFast):
        guard.before_call()


def test_a_probe_that_never_reports_stops_blocking_the_others() -> None:
    guard = RedisGuard(cooldown_s=0.01, probe_timeout_s=0.05)
    guard.failed(redis.TimeoutError("t"))
    time.sleep(0.02)
    threading.Thread(target=guard.before_call).start()  # a probe whose thread vanished
    time.sleep(0.07)
    guard.before_call()


def test_a_refused_connection_opens_the_guard_and_no_retry_is_made() -> None:
    guard = RedisGuard(cooldown_s=30)
    down = CountingRefuser()
    try:
        client = guarded_redis(down.redis_url(), guard=guard)
        with pytest.raises(UNREACHABLE) as refused:
            client.ping()
        assert not isinstance(refused.value, RedisFailFast)  # it was tried
        assert down.attempts == 1  # neither redis-py's retries nor their backoff
        with pytest.raises(RedisFailFast):
            client.ping()
        assert down.attempts == 1  # the open guard: not even tried
        assert guard.is_open
    finally:
        down.close()
