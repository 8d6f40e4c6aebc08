"""The report queue's port: what the use cases need from it (redis_adapters/report_queue.py implements it).

A Protocol, so the services never import Redis or Dramatiq, and tests can pass a recording
fake to the pure unit tests (integration tests use the real producer). The other ports sit
beside the use case that needs them, each implemented in redis_adapters/: `AutosaveStore`
(usecases/autosave.py), `TaskStore` (usecases/regeneration_tasks.py), `FaultDrill`
(usecases/drill.py), and with the values they carry `QueueOperations`, `AuditLog`
(domain/opsmodel.py) and `EventSink` (domain/events.py, called through `emit`, which never
raises for an outage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ReportQueue(Protocol):
    def enqueue(self, record_id: int) -> None:
        """Queue one report job (RetryCount 0). Raises on failure."""

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        """Queue one job per id, in order, in one round trip. All or nothing; raises on failure."""
