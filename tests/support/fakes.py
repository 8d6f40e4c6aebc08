"""Test doubles for the services' collaborators (the real ones are tested on real servers).

A double raises only what the real adapter raises (`QueueUnavailable` for the report queue)."""

from __future__ import annotations

from collections.abc import Sequence

from services.domain.errors import QueueUnavailable


class RecordingQueue:
    """A `ReportQueue` that records what it was asked to queue."""

    def __init__(self) -> None:
        self.enqueued: list[int] = []
        self.batches: list[list[int]] = []

    def enqueue(self, record_id: int) -> None:
        self.enqueued.append(record_id)

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        self.batches.append(list(record_ids))


class FailingQueue:
    """A `ReportQueue` whose every call fails as `RedisReportQueue`'s do when Redis is down:
    with `QueueUnavailable`."""

    def __init__(self) -> None:
        self.calls = 0

    def enqueue(self, record_id: int) -> None:
        self.enqueue_many([record_id])

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        self.calls += 1
        raise QueueUnavailable(f"could not enqueue {len(record_ids)} report job(s): redis is down (test)")
