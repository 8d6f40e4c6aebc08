"""The producer side of the report queue: what the web tier and the services call.

It writes the seed's message with LPUSH to `report:queue`, exactly as the original
.NET producer did, so either producer (and any consumer of that list) interoperates.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from actors.constants import REPORT_QUEUE_KEY
from actors.message import ReportQueueMessage
from services.errors import QueueUnavailable


class RedisReportQueue:
    """Implements `services.queue.ReportQueue` on a Redis list."""

    def __init__(self, client: redis.Redis, *, key: str = REPORT_QUEUE_KEY) -> None:
        self.client = client
        self.key = key

    def enqueue(self, record_id: int) -> None:
        self.enqueue_many([record_id])

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        """One LPUSH for all ids: atomic, one round trip, consumed in the order given."""
        if not record_ids:
            return
        payloads = [ReportQueueMessage.new(record_id).encode() for record_id in record_ids]
        try:
            self.client.lpush(self.key, *payloads)
        except redis.RedisError as exc:
            raise QueueUnavailable(f"could not enqueue {len(payloads)} report job(s): {exc}") from exc
