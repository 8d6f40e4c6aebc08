"""web/redis_guard.py: the fail-fast guard's states, without a server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from redis_adapters.redis_clients import UNREACHABLE
from tests.support.refuser import CountingRefuser
from web import redis_guard
from web.redis_guard import RedisFailFast, RedisGuard, guarded_redis


class Clock:
    """The guard's monotonic clock, moved by the test: no sleep, no race with a loaded machine."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(redis_guard, "time", fake)
    return fake


def on_another_thread(call: Callable[[], None]) -> BaseException | None:
    """Run `call` as another caller does, on a thread of its own; what it raised (None: let through).
    It must return: a guard never makes a caller wait."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the call waited instead of failing fast or going through"
    return raised[0] if raised else None


def test_closed_guard_lets_every_call_through() -> None:
    guard = RedisGuard(cooldown_s=0.05)
    for _ in range(3):
        guard.before_call()
    assert not guard.is_open


def test_after_a_failure_calls_fail_fast_then_one_probe_goes_through(clock: Clock) -> None:
    guard = RedisGuard(cooldown_s=1, probe_timeout_s=10)
    guard.failed(redis.TimeoutError("Timeout reading from socket"))
    with pytest.raises(RedisFailFast):
        guard.before_call()
    clock.advance(1)
    guard.before_call()  # the probe
    guard.before_call()  # the probe's own nested call (a new connection's HELLO)
    other = on_another_thread(guard.before_call)
    assert isinstance(other, RedisFailFast), "another thread must not wait on Redis while the probe is out"
    guard.succeeded()
    assert not guard.is_open
    guard.before_call()
    assert on_another_thread(guard.before_call) is None


def test_a_failed_probe_opens_the_guard_again(clock: Clock) -> None:
    guard = RedisGuard(cooldown_s=1)
    guard.failed(redis.ConnectionError("refused"))
    clock.advance(1)
    guard.before_call()
    guard.failed(redis.TimeoutError("again"))
    with pytest.raises(RedisFailFast):
        guard.before_call()


def test_a_probe_that_never_reports_stops_blocking_the_others(clock: Clock) -> None:
    guard = RedisGuard(cooldown_s=1, probe_timeout_s=5)
    guard.failed(redis.TimeoutError("t"))
    clock.advance(1)
    assert on_another_thread(guard.before_call) is None  # the probe, whose thread then vanished
    clock.advance(4.9)
    with pytest.raises(RedisFailFast):  # the probe is still out
        guard.before_call()
    clock.advance(0.1)
    guard.before_call()  # it never reported: this call probes instead
    assert isinstance(on_another_thread(guard.before_call), RedisFailFast)  # the others still fail fast


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
