"""Figures of a queue for operators: queued, delayed, in flight, dead and quarantined."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from actors.broker.keys import HEARTBEATS_KEY, QueueKeys
from actors.broker.scripts import source


@dataclass(frozen=True)
class QueueFigures:
    queued: int  # waiting in the list (LLEN Q)
    dead: int  # dead-lettered (LLEN Q:dead)
    delayed: int  # waiting for a retry or a delay to expire
    in_flight: int  # taken by a consumer and not yet acknowledged
    invalid: int  # quarantined because they could not be decoded

    @property
    def pending(self) -> int:
        """Messages that will still run: queued, delayed or in flight."""
        return self.queued + self.delayed + self.in_flight


def queue_figures(client: redis.Redis, queue_name: str) -> QueueFigures:
    """One consistent reading of a queue's figures (a single Lua call), on any client:
    a web process reads them without building a broker."""
    keys = QueueKeys.for_queue(queue_name)
    queued, dead, delayed, invalid, in_flight = client.register_script(source("figures"))(
        keys=[HEARTBEATS_KEY, keys.queue, keys.dead, keys.delayed, keys.invalid],
        args=[keys.processing_prefix],
    )
    return QueueFigures(
        queued=int(queued),
        dead=int(dead),
        delayed=int(delayed),
        in_flight=int(in_flight),
        invalid=int(invalid),
    )
