"""Figures of a queue for operators: queued, delayed, in flight, dead and quarantined."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from listbroker.errors import BrokerError
from listbroker.keys import QueueKeys
from listbroker.scripts import source

#: How many times a reading is tried again when consumers came or went during it.
FIGURES_ATTEMPTS = 10

#: Runs the figures script: (keys, args) -> reply.
FiguresCall = Callable[[list[str], list[Any]], Any]


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


def read_figures(call: FiguresCall, keys: QueueKeys) -> QueueFigures:
    """One consistent reading (figures.lua), declaring the processing lists it reads.

    The script refuses a list of processing lists that is not the heartbeat set's and
    answers with the right one, so a consumer that registers between two readings is
    never missed; the next attempt declares it.
    """
    processing: list[str] = []
    for _ in range(FIGURES_ATTEMPTS):
        reply = call(
            [keys.heartbeats, keys.queue, keys.dead, keys.delayed, keys.invalid, *processing],
            [keys.processing_prefix],
        )
        if int(reply[0]) >= 0:
            queued, dead, delayed, invalid, in_flight = reply
            return QueueFigures(
                queued=int(queued),
                dead=int(dead),
                delayed=int(delayed),
                in_flight=int(in_flight),
                invalid=int(invalid),
            )
        processing = [p.decode() if isinstance(p, bytes) else str(p) for p in reply[1]]
    raise BrokerError(f"consumers of {keys.queue} kept coming and going; no consistent figures")


def queue_figures(client: redis.Redis, queue_name: str, *, hash_tag: bool = False) -> QueueFigures:
    """One consistent reading of a queue's figures (a single Lua call), on any client:
    a web process reads them without building a broker. `hash_tag`: the broker's key layout."""
    script = client.register_script(source("figures"))
    return read_figures(
        lambda keys, args: script(keys=keys, args=args), QueueKeys.for_queue(queue_name, hash_tag=hash_tag)
    )
