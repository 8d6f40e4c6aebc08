"""Figures of a queue for operators: queued, delayed, in flight, dead and quarantined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import redis

from actors.constants import (
    DEAD_SUFFIX,
    DELAYED_SUFFIX,
    HEARTBEATS_KEY,
    INVALID_SUFFIX,
    PROCESSING_INFIX,
    REPORT_QUEUE_KEY,
)


@dataclass(frozen=True)
class QueueFigures:
    queued: int  # waiting in the list (LLEN report:queue)
    dead: int  # dead-lettered (LLEN report:queue:dead)
    delayed: int  # waiting for a retry or a delay to expire
    in_flight: int  # taken by a consumer and not yet acknowledged
    invalid: int  # quarantined because they could not be decoded


def queue_figures(client: redis.Redis, queue_key: str = REPORT_QUEUE_KEY) -> QueueFigures:
    prefix = (queue_key + PROCESSING_INFIX).encode()
    members = cast(list[bytes], client.zrange(HEARTBEATS_KEY, 0, -1))
    processing = [m for m in members if m.startswith(prefix)]
    pipe = client.pipeline(transaction=False)
    pipe.llen(queue_key)
    pipe.llen(queue_key + DEAD_SUFFIX)
    pipe.zcard(queue_key + DELAYED_SUFFIX)
    pipe.llen(queue_key + INVALID_SUFFIX)
    for key in processing:
        pipe.llen(key)
    queued, dead, delayed, invalid, *in_flight = pipe.execute()
    return QueueFigures(
        queued=int(queued),
        dead=int(dead),
        delayed=int(delayed),
        in_flight=sum(in_flight),
        invalid=int(invalid),
    )
