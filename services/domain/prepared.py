"""A store's call made ready but not sent yet, so that calls of several stores can travel together.

A submission ends with two calls to Redis after its commit: the autosave released and the report
job queued. Sent one after the other they cost two network round trips, each a wait that hands
the web worker's GIL to another thread and back; sent together, one. The stores prepare their
calls (`AutosaveStore.prepare_release`, `ReportQueue.prepare_enqueue`) and the first one sends
itself with the others (`send`): in one round trip where they share a server (the Redis
adapters: redis_adapters/round_trip.py), one after another otherwise. Together is not
atomically: each call succeeds or fails on its own, as it would alone, in the order given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class PreparedCall(Protocol):
    def send(self, *others: PreparedCall) -> list[Exception | None]:
        """Send this call, then `others`, in that order; for each, None or the error it raised
        (the store's own, e.g. QueueUnavailable, AutosaveUnavailable). Never raises an Exception."""


@dataclass(frozen=True)
class CallAlone:
    """A `PreparedCall` that is a plain function: sent on its own, the others after it one by one
    (a store that cannot batch with others, or a test's double)."""

    run: Callable[[], object]

    def send(self, *others: PreparedCall) -> list[Exception | None]:
        return [outcome(self.run), *(other.send()[0] for other in others)]


def outcome(run: Callable[[], object]) -> Exception | None:
    """None if `run()` returned, else the Exception it raised."""
    try:
        run()
    except Exception as exc:
        return exc
    return None
