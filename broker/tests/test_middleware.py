"""`default_middleware()`: Dramatiq's defaults, its Retries replaced by ExactRetries, plus the
current message, the shutdown requeue and the batch options."""

from __future__ import annotations

import time

import dramatiq
import pytest
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Middleware,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)
from listbroker import (
    Batches,
    ExactRetries,
    RedisListBroker,
    RequeueOnShutdown,
    ShutdownDeadline,
    default_middleware,
)


def test_the_default_middleware_in_order() -> None:
    middleware = default_middleware()
    assert [type(m) for m in middleware] == [
        AgeLimit,
        TimeLimit,
        ShutdownNotifications,
        Callbacks,
        Pipelines,
        ExactRetries,
        CurrentMessage,
        RequeueOnShutdown,
        Batches,
    ]
    # ExactRetries is Dramatiq's Retries (its options still work), only exact.
    assert isinstance(middleware[5], Retries)
    assert default_middleware()[0] is not middleware[0]  # a fresh list each time


class SlowToClose(Middleware):
    """Stands for a shutdown waiting on a Redis that hangs (each call its socket timeout)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        time.sleep(self.seconds)


@pytest.mark.parametrize(("slow_s", "exits"), [(0.0, []), (3.0, [0])], ids=["prompt", "held"])
def test_a_worker_shutdown_held_after_its_jobs_ends_the_process_after_the_grace(
    broker: RedisListBroker, slow_s: float, exits: list[int]
) -> None:
    """`ShutdownDeadline`: once the worker threads have ended, a shutdown still under way after
    the grace ends the process (here: the exit recorded); a prompt one is left alone."""
    called: list[int] = []
    deadline = ShutdownDeadline(grace_s=0.5, exit=called.append)
    broker.add_middleware(deadline, before=type(broker.middleware[0]))  # first, as a worker adds it
    broker.add_middleware(SlowToClose(slow_s))
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    worker.stop(timeout=10_000)
    time.sleep(1.0)  # past the grace after a prompt stop: nothing may fire late
    assert called == exits
