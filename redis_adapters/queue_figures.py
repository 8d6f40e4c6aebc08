"""A queue as operators read it: its counts and the wait of its oldest job.

The one reading behind every figure of a queue: the web's /metrics, the console's overview
and its alarm (observability/pipeline_health.py), the admin API's /queue/stats and the CLI's
`queue stats`. On any client, without a broker, at a cost that does not grow with the queue:
the counts are one Lua call of the broker library, the oldest job one LINDEX.

A job's wait runs from the time its producer wrote in it, whatever the producer:

- the report queue's jobs, in the .NET system's wire format (redis_adapters/report_message.py):
  ``"EnqueueTime"``, ISO-8601 with or without a fraction and an offset; a time without an
  offset is the producer's local time, read as this host's. A retry keeps its first
  EnqueueTime, so the wait is the submission's;
- the admin queue's, in Dramatiq's own encoding: ``message_timestamp``, milliseconds.

A job whose time cannot be read (not a job, or a time at the edge of the calendar) has no
wait: the consumer quarantines what it cannot decode, so it does not wait long either.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime

import redis
from listbroker import QueueFigures, QueueKeys
from listbroker import queue_figures as broker_queue_figures

from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME
from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage

__all__ = [
    "QUEUE_NAMES",
    "QueueFigures",
    "QueueState",
    "as_local",
    "enqueued_at_s",
    "oldest_age_s",
    "queue_figures",
    "queue_state",
    "queue_states",
]

#: The queues operators watch, in the order every figure lists them.
QUEUE_NAMES = (REPORT_QUEUE_NAME, ADMIN_QUEUE_NAME)


@dataclass(frozen=True)
class QueueState:
    name: str
    figures: QueueFigures
    #: Seconds the oldest waiting job has waited (None: none waits, or its time is unreadable).
    oldest_age_s: float | None


def queue_figures(
    client: redis.Redis, queue_name: str = REPORT_QUEUE_NAME, *, hash_tag: bool = False
) -> QueueFigures:
    """One consistent reading of a queue's counts (a single Lua call)."""
    return broker_queue_figures(client, queue_name, hash_tag=hash_tag)


def as_local(moment: datetime) -> datetime:
    """`moment` with an offset: a time written without one is the producer's local time,
    read as this host's (the overview's waits and the delayed retries' times both read it so)."""
    return moment if moment.tzinfo is not None else moment.astimezone()


def enqueued_at_s(payload: bytes) -> float | None:
    """When a waiting job was enqueued (epoch seconds), from the time its producer wrote in it;
    None when the payload is neither format's or its time is not a moment of the calendar."""
    try:
        return as_local(ReportQueueMessage.decode(payload).enqueued_at).timestamp()
    except InvalidReportMessage:
        pass
    except (OverflowError, OSError, ValueError):
        return None  # an EnqueueTime at the edge of the calendar
    try:
        # JSON, Dramatiq's default encoding and the one our producers use, whatever the
        # process's global encoder: an entry of Redis is never unpickled here.
        stamp = float(json.loads(payload)["message_timestamp"]) / 1000
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None
    return stamp if math.isfinite(stamp) else None


def oldest_age_s(client: redis.Redis, key: str, *, now: float) -> float | None:
    """Seconds the oldest job of the queue list `key` has waited at `now` (epoch seconds): the
    consumer's end of the list (jobs are LPUSHed and taken from the right). None when nothing
    waits or its time cannot be read; 0 for a time in the future."""
    oldest = client.lindex(key, -1)
    if oldest is None:
        return None
    enqueued = enqueued_at_s(oldest if isinstance(oldest, bytes) else str(oldest).encode())
    return None if enqueued is None else max(0.0, now - enqueued)


def queue_state(client: redis.Redis, name: str, *, hash_tag: bool, now: float) -> QueueState:
    """A queue's counts and its oldest job's wait; Redis errors are raised."""
    keys = QueueKeys.for_queue(name, hash_tag=hash_tag)
    return QueueState(
        name, queue_figures(client, name, hash_tag=hash_tag), oldest_age_s(client, keys.queue, now=now)
    )


def queue_states(client: redis.Redis, *, hash_tag: bool, now: float) -> list[QueueState]:
    """Every queue of `QUEUE_NAMES`, read at `now` (epoch seconds)."""
    return [queue_state(client, name, hash_tag=hash_tag, now=now) for name in QUEUE_NAMES]
