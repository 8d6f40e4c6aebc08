"""A look inside the report queue for the admin console: the delayed jobs' due times and the
age of the oldest waiting job (the counts are in figures.py).

Read-only and bounded: at most `limit` delayed jobs are read, and one list element for
the oldest job, so a queue of a million jobs costs the same as an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import redis

from actors.constants import REPORT_DELAYED_KEY, REPORT_QUEUE_KEY
from actors.report_queue.message import InvalidReportMessage, ReportQueueMessage

#: Delayed jobs shown by default: the next ones due (retries waiting out the schedule).
DEFAULT_DELAYED_LIMIT = 20


@dataclass(frozen=True)
class DelayedJob:
    #: None when the member is not a report job the codec can read (shown verbatim then).
    record_id: int | None
    retry_count: int | None
    #: Aware UTC; None when the score is no time (NaN, beyond the calendar): shown as unreadable.
    due_at: datetime | None
    raw: str


def delayed_jobs(
    client: redis.Redis, *, limit: int = DEFAULT_DELAYED_LIMIT, key: str = REPORT_DELAYED_KEY
) -> list[DelayedJob]:
    """The next `limit` delayed jobs, soonest due first (the sorted set is scored in ms)."""
    # The clients of this project do not decode responses: members are bytes, scores floats.
    members = cast(list[tuple[bytes, float]], client.zrange(key, 0, limit - 1, withscores=True))
    jobs = []
    for member, score in members:
        raw = member.decode("utf-8", "replace")
        due_at = _due(score)
        try:
            message = ReportQueueMessage.decode(member)
        except InvalidReportMessage:
            jobs.append(DelayedJob(record_id=None, retry_count=None, due_at=due_at, raw=raw))
            continue
        jobs.append(
            DelayedJob(record_id=message.record_id, retry_count=message.retry_count, due_at=due_at, raw=raw)
        )
    return jobs


def _due(score_ms: float) -> datetime | None:
    """The due time a score means; None for a score no calendar holds (anyone may ZADD 1e20)."""
    try:
        return datetime.fromtimestamp(score_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None


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
