"""Jobs per minute for the operators' chart: processed, failed, retried, dead-lettered.

One Redis hash per minute, `throughput:<epoch seconds of the minute's start>`, fields
`processed` / `failed` / `retried` / `dead`, expiring `KEEP_S` after its minute: the
worker counts jobs in memory and adds them once a second in one pipelined round trip of
HINCRBY (and EXPIRE) per minute touched (actors/observe/jobs.py), so no job waits on it,
and the keys stay bounded without any cleaner. Counts are of all
workers on all hosts (the hash is shared); Prometheus counters (actors/observe/) are
the per-host view.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import redis

KEY_PREFIX = "throughput:"
#: A minute's hash lives this long after the minute started (the chart shows one hour).
KEEP_S = 2 * 3600
MINUTES = 60


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


def minute_start(epoch: float) -> int:
    return int(epoch // 60) * 60


def add_counts(client: redis.Redis, counts: Mapping[tuple[int, Outcome], int]) -> None:
    """Add counts keyed by (minute start, outcome), in one round trip."""
    if not counts:
        return
    pipe = client.pipeline(transaction=False)
    for (minute, outcome), n in counts.items():
        pipe.hincrby(f"{KEY_PREFIX}{minute}", outcome.value, n)
    for minute in {minute for minute, _ in counts}:
        pipe.expire(f"{KEY_PREFIX}{minute}", KEEP_S)
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
