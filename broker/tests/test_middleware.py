"""`default_middleware()`: Dramatiq's defaults, its Retries replaced by ExactRetries, plus the
current message, the shutdown requeue and the batch options."""

from __future__ import annotations

from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)
from listbroker import Batches, ExactRetries, RequeueOnShutdown, default_middleware


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
