"""The middleware a `RedisListBroker` runs with: Dramatiq's defaults, its Retries replaced.

`default_middleware()` is Dramatiq's default list with `Retries` replaced by
`ExactRetries` (retries.py: exact schedules, dead letters with their last error),
`CurrentMessage` (an actor can ask which attempt it runs), `RequeueOnShutdown`
(shutdown.py: prefetched messages go back at once on SIGTERM) and `Batches` (batches.py:
the actor options `batch_size` and `batch_fn`). An application puts its
own in front (an `AvailabilityGate` first, observers before `ExactRetries`: Dramatiq
calls the `after_` hooks in reverse order).
"""

from __future__ import annotations

from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Middleware,
    Pipelines,
    ShutdownNotifications,
    TimeLimit,
)

from listbroker.batches import Batches
from listbroker.retries import ExactRetries
from listbroker.shutdown import RequeueOnShutdown


def default_middleware() -> list[Middleware]:
    """A fresh list: AgeLimit, TimeLimit, ShutdownNotifications, Callbacks, Pipelines,
    ExactRetries, CurrentMessage, RequeueOnShutdown, Batches."""
    return [
        AgeLimit(),
        TimeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        ExactRetries(),
        CurrentMessage(),
        RequeueOnShutdown(),
        Batches(),
    ]
