"""What the services need from the report queue; the actors package implements it.

Kept as a Protocol so the domain never imports Redis or Dramatiq, and tests can pass
a recording fake to the pure unit tests (integration tests use the real producer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ReportQueue(Protocol):
    def enqueue(self, record_id: int) -> None:
        """Queue one report job (RetryCount 0). Raises on failure."""

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        """Queue one job per id, in order, in one round trip. All or nothing; raises on failure."""
