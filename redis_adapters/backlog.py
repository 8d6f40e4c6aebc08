"""Backlog figures for operators beyond `queue_figures`: the age of the oldest waiting job and
the hot path's backlog (dirty sets, the event-log queue and its backup). Read at scrape
time by the web's /metrics (web/metrics.py), on any client, without a broker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from redis_adapters.keyspace import Keyspace
from redis_adapters.queues import REPORT_QUEUE_KEY
from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage


def oldest_job_age_s(client: redis.Redis, *, now: float | None = None, key: str = REPORT_QUEUE_KEY) -> float:
    """Seconds since the oldest waiting report job was enqueued (its EnqueueTime); 0 when none.

    Jobs are LPUSHed and taken from the right, so the oldest is the last element. A job
    whose payload cannot be read counts as 0 here: the consumer quarantines it.
    """
    raw = client.lindex(key, -1)
    if raw is None:
        return 0.0
    try:
        enqueued = ReportQueueMessage.decode(raw).enqueued_at.timestamp()
    except (InvalidReportMessage, ValueError):
        return 0.0
    return max(0.0, (time.time() if now is None else now) - enqueued)


@dataclass(frozen=True)
class HotpathBacklog:
    answers_dirty: int  # records whose autosaved answers are not yet in PostgreSQL
    progress_dirty: int  # records whose progress is not yet in PostgreSQL
    events_queued: int  # events waiting in eventlog:queue
    events_in_backup: int  # events the consumer is inserting (or will replay after a crash)


def hotpath_backlog(client: redis.Redis, keyspace: Keyspace | None = None) -> HotpathBacklog:
    keyspace = keyspace or Keyspace.of()
    autosave, events = keyspace.autosave, keyspace.eventlog
    pipe = client.pipeline(transaction=False)
    pipe.scard(autosave.answers.dirty)
    pipe.scard(autosave.progress.dirty)
    pipe.llen(events.queue)
    pipe.llen(events.backup)
    answers, progress, queued, backup = pipe.execute()
    return HotpathBacklog(int(answers), int(progress), int(queued), int(backup))
