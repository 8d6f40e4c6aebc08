"""A look inside the report queue for the admin console: the age of the oldest waiting job
(the counts are in figures.py, the delayed retries in queue_ops.py).

Read-only and bounded: one list element is read, so a queue of a million jobs costs the
same as an empty one.
"""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from redis_adapters.queues import REPORT_QUEUE_KEY
from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage


def oldest_waiting_age_s(
    client: redis.Redis, *, now: datetime | None = None, key: str = REPORT_QUEUE_KEY
) -> float | None:
    """Seconds since the oldest queued job's EnqueueTime (the consumer's end of the list), or
    None when nothing waits or its EnqueueTime cannot be read. A retry keeps its first
    EnqueueTime, so this is the age of the submission that is waiting longest."""
    oldest = client.lindex(key, -1)
    if oldest is None:
        return None
    try:
        enqueued_at = ReportQueueMessage.decode(oldest).enqueued_at
    except InvalidReportMessage:
        return None
    try:
        if enqueued_at.tzinfo is None:
            # The .NET producer always writes an offset; a job without one is read as local time.
            enqueued_at = enqueued_at.astimezone()
        return max(0.0, ((now or datetime.now(UTC)) - enqueued_at).total_seconds())
    except (OverflowError, OSError, ValueError):
        return None  # an EnqueueTime at the edge of the calendar: no age to show
