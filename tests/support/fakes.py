"""Test doubles for the services' collaborators (the real ones are tested on real servers)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from services.domain.errors import QueueUnavailable
from services.domain.prepared import CallAlone


class EnqueuesAlone(ABC):
    """A double's `prepare_enqueue`: its own `enqueue`, sent on its own (services/domain/prepared.py)."""

    @abstractmethod
    def enqueue(self, record_id: int) -> None: ...

    def prepare_enqueue(self, record_id: int) -> CallAlone:
        return CallAlone(lambda: self.enqueue(record_id))


class RecordingQueue(EnqueuesAlone):
    """A `ReportQueue` that records what it was asked to queue."""

    def __init__(self) -> None:
        self.enqueued: list[int] = []
        self.batches: list[list[int]] = []

    def enqueue(self, record_id: int) -> None:
        self.enqueued.append(record_id)

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        self.batches.append(list(record_ids))


class FailingQueue(EnqueuesAlone):
    """A `ReportQueue` whose every call fails as `RedisReportQueue`'s do when Redis is down:
    with `QueueUnavailable`."""

    def __init__(self) -> None:
        self.calls = 0

    def enqueue(self, record_id: int) -> None:
        self.enqueue_many([record_id])

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        self.calls += 1
        raise QueueUnavailable(f"could not enqueue {len(record_ids)} report job(s): redis is down (test)")
