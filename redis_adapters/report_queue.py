"""The producer side of the report queue: what the web tier and the services call.

It writes the original system's message with LPUSH to `report:queue`, exactly as the
.NET producer did, so either producer (and any consumer of that list) interoperates.
The LPUSH runs inside the broker library's enqueue script (`JobIndex`), which also
counts the job in `report:queue:jobs` (RecordId -> jobs alive), the index the
reconciler reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from listbroker import JobIndex
from listbroker.jobindex import PreparedScript
from listbroker.keys import COUNTED_SUFFIX

from redis_adapters.queues import REPORT_JOBS_KEY, REPORT_QUEUE_KEY
from redis_adapters.report_message import JOB_KEY_FIELD, ReportQueueMessage
from services.domain.errors import QueueUnavailable


class RedisReportQueue:
    """Implements `services.usecases.ports.ReportQueue` on a Redis list."""

    def __init__(
        self, client: redis.Redis, *, key: str = REPORT_QUEUE_KEY, jobs_key: str = REPORT_JOBS_KEY
    ) -> None:
        self.client = client
        self.key = key
        self.jobs_key = jobs_key
        #: The queue's job index, also used by the reconciler to clear dead marks.
        self.index = JobIndex(
            client,
            queue_key=key,
            jobs_key=jobs_key,
            counted_key=key + COUNTED_SUFFIX,
            job_key_field=JOB_KEY_FIELD,
        )

    def enqueue(self, record_id: int) -> None:
        self.enqueue_many([record_id])

    def job(self, record_id: int) -> PreparedScript:
        """`enqueue(record_id)`'s script call, not sent: for a store that sends it in a pipeline
        with its own (`RedisAutosaveStore.release_and_enqueue`); its error is `unavailable`'s."""
        return self.index.enqueue_call([ReportQueueMessage.new(record_id).encode()])

    def enqueue_many(self, record_ids: Sequence[int]) -> None:
        """One script call for all ids: atomic, one round trip, consumed in the order given."""
        if not record_ids:
            return
        payloads = [ReportQueueMessage.new(record_id).encode() for record_id in record_ids]
        try:
            self.index.enqueue(payloads)
        except redis.RedisError as exc:
            raise unavailable(exc, len(payloads)) from exc

    def jobs_alive(self, record_id: int) -> int:
        """How many jobs of the record are alive (queued, in flight or delayed), whoever queued
        them (`JobIndex.jobs_alive`); 0 for none or a `dead` mark. Raises redis errors as they are."""
        return self.index.jobs_alive(record_id)

    def enqueue_missing(self, record_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """Queue a job for each record that has none alive, in one atomic step.

        Returns (the ids queued now, the ids whose last job was dead-lettered without its
        status being set). Raises redis errors as they are: the caller retries later.
        """
        if not record_ids:
            return [], []
        payloads = [ReportQueueMessage.new(record_id).encode() for record_id in record_ids]
        enqueued, dead = self.index.enqueue_missing(payloads)
        return [int(k) for k in enqueued], [int(k) for k in dead]


def unavailable(exc: redis.RedisError, jobs: int = 1) -> QueueUnavailable:
    """What the queue raises when Redis failed to take `jobs` job(s)."""
    return QueueUnavailable(f"could not enqueue {jobs} report job(s): {exc}")
