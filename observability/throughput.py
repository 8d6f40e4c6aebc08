"""Report jobs per minute, per hour and in all, for the operators' charts: processed, failed,
retried, dead-lettered.

One Redis hash per minute, `throughput:<epoch seconds of the minute's start>`, fields
`processed` / `failed` / `retried` / `dead`, expiring `KEEP_S` after its minute; one per
hour, `throughput:hour:<epoch seconds of the hour's start>`, kept `HOURS_KEEP_S` (the
30-day history); and `throughput:total`, the same fields since the first count plus
`since` (epoch seconds), never expiring (Sidekiq's "processed" and "failed"). The worker
counts jobs in memory and adds them once a second in one pipelined round trip of HINCRBY
(and EXPIRE) per key touched (observability/job_observer.py), so no job waits on it, and the keys
stay bounded without any cleaner. Counts are of all workers on all hosts (the hashes are
shared); Prometheus counters (observability/) are the per-host view.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import redis

from redis_adapters.keyspace import THROUGHPUT_HOUR_PREFIX, THROUGHPUT_MINUTE_PREFIX, THROUGHPUT_TOTAL_KEY

KEY_PREFIX = THROUGHPUT_MINUTE_PREFIX
HOUR_PREFIX = THROUGHPUT_HOUR_PREFIX
TOTAL_KEY = THROUGHPUT_TOTAL_KEY
#: A minute's hash lives this long after the minute started (the chart shows one hour).
KEEP_S = 2 * 3600
MINUTES = 60
#: History: the days the console charts, and how long an hour's hash is kept for them.
HISTORY_DAYS = 30
HOURS_KEEP_S = (HISTORY_DAYS + 1) * 24 * 3600


class Outcome(StrEnum):
    PROCESSED = "processed"  # an attempt that succeeded
    FAILED = "failed"  # an attempt that raised (it is then retried or dead-lettered)
    RETRIED = "retried"  # a retry was scheduled
    DEAD = "dead"  # the job was dead-lettered


@dataclass(frozen=True)
class MinuteFigures:
    minute: datetime  # aware UTC, start of the minute
    processed: int
    failed: int
    retried: int
    dead: int


@dataclass(frozen=True)
class Totals:
    """Counts since the first job counted (`since`, aware UTC; None: nothing counted yet)."""

    since: datetime | None
    processed: int
    failed: int
    retried: int
    dead: int


def minute_start(epoch: float) -> int:
    return int(epoch // 60) * 60


def hour_start(epoch: float) -> int:
    return int(epoch // 3600) * 3600


def add_counts(client: redis.Redis, counts: Mapping[tuple[int, Outcome], int]) -> None:
    """Add counts keyed by (minute start, outcome) to their minute, hour and the totals, in
    one round trip."""
    if not counts:
        return
    pipe = client.pipeline(transaction=False)
    hours: dict[tuple[int, Outcome], int] = {}
    everything: dict[Outcome, int] = {}
    for (minute, outcome), n in counts.items():
        pipe.hincrby(f"{KEY_PREFIX}{minute}", outcome.value, n)
        hours[hour_start(minute), outcome] = hours.get((hour_start(minute), outcome), 0) + n
        everything[outcome] = everything.get(outcome, 0) + n
    for (hour, outcome), n in hours.items():
        pipe.hincrby(f"{HOUR_PREFIX}{hour}", outcome.value, n)
    for outcome, n in everything.items():
        pipe.hincrby(TOTAL_KEY, outcome.value, n)
    pipe.hsetnx(TOTAL_KEY, "since", min(minute for minute, _ in counts))
    for minute in {minute for minute, _ in counts}:
        pipe.expire(f"{KEY_PREFIX}{minute}", KEEP_S)
    for hour in {hour for hour, _ in hours}:
        pipe.expire(f"{HOUR_PREFIX}{hour}", HOURS_KEEP_S)
    pipe.execute()


def count(client: redis.Redis, *outcomes: Outcome, now: float | None = None) -> None:
    """Add one to each outcome's counter of the current minute, in one round trip."""
    minute = minute_start(time.time() if now is None else now)
    add_counts(client, {(minute, outcome): 1 for outcome in outcomes})


def _count(value: bytes | str | int) -> int:
    """A stored count; 0 for a value that is not a count (the chart then still draws)."""
    try:
        count = int(value)
    except (TypeError, ValueError):
        return 0
    return count if 0 <= count < 2**53 else 0


def last_hour(client: redis.Redis, *, now: float | None = None) -> list[MinuteFigures]:
    """60 entries, oldest first, ending with the current minute; minutes with no job are zeros."""
    current = minute_start(time.time() if now is None else now)
    starts = [current - 60 * (MINUTES - 1 - i) for i in range(MINUTES)]
    pipe = client.pipeline(transaction=False)
    for start in starts:
        pipe.hgetall(f"{KEY_PREFIX}{start}")
    figures: list[MinuteFigures] = []
    for start, raw in zip(starts, pipe.execute(), strict=True):
        values = {
            k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k): _count(v)
            for k, v in raw.items()
        }
        figures.append(
            MinuteFigures(
                minute=datetime.fromtimestamp(start, UTC),
                processed=values.get(Outcome.PROCESSED.value, 0),
                failed=values.get(Outcome.FAILED.value, 0),
                retried=values.get(Outcome.RETRIED.value, 0),
                dead=values.get(Outcome.DEAD.value, 0),
            )
        )
    return figures


def _fields(raw: Mapping[bytes | str, bytes | str]) -> dict[str, int]:
    values = {}
    for k, v in raw.items():
        try:
            values[k.decode() if isinstance(k, bytes) else str(k)] = int(v)
        except ValueError:
            continue  # not a count of ours: ignored
    return values


def totals(client: redis.Redis) -> Totals:
    """The counts since the first job counted."""
    values = _fields(client.hgetall(TOTAL_KEY))
    since = values.get("since")
    return Totals(
        since=datetime.fromtimestamp(since, UTC) if since else None,
        processed=values.get(Outcome.PROCESSED.value, 0),
        failed=values.get(Outcome.FAILED.value, 0),
        retried=values.get(Outcome.RETRIED.value, 0),
        dead=values.get(Outcome.DEAD.value, 0),
    )


def history(
    client: redis.Redis, *, hours: int = HISTORY_DAYS * 24, now: float | None = None
) -> list[MinuteFigures]:
    """The last `hours` hours, oldest first, ending with the current hour (each a `MinuteFigures`
    whose `minute` is the hour's start); hours with no job are zeros."""
    current = hour_start(time.time() if now is None else now)
    starts = [current - 3600 * (hours - 1 - i) for i in range(hours)]
    pipe = client.pipeline(transaction=False)
    for start in starts:
        pipe.hgetall(f"{HOUR_PREFIX}{start}")
    figures = []
    for start, raw in zip(starts, pipe.execute(), strict=True):
        values = _fields(raw)
        figures.append(
            MinuteFigures(
                minute=datetime.fromtimestamp(start, UTC),
                processed=values.get(Outcome.PROCESSED.value, 0),
                failed=values.get(Outcome.FAILED.value, 0),
                retried=values.get(Outcome.RETRIED.value, 0),
                dead=values.get(Outcome.DEAD.value, 0),
            )
        )
    return figures
