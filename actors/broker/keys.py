"""The Redis keys of a Dramatiq queue on a `RedisListBroker`.

Every queue `q` is the list `q:queue`; the keys that belong to it share that prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Every Dramatiq queue `q` lives in the Redis list `q:queue`.
QUEUE_KEY_SUFFIX = ":queue"

#: Suffixes of the keys that belong to a queue key `Q` (e.g. `report:queue:dead`).
DEAD_SUFFIX = ":dead"  # list: messages whose attempts are exhausted
INVALID_SUFFIX = ":invalid"  # list: messages that could not be decoded, kept verbatim
DELAYED_SUFFIX = ":delayed"  # sorted set: delayed messages and retries, scored by due time (ms)
CRASHED_SUFFIX = ":crashed"  # hash: raw message -> times its consumer died holding it
JOBS_SUFFIX = ":jobs"  # hash: job key -> jobs alive for it (see scripts.py), if the codec names one
PROCESSING_INFIX = ":processing:"  # list per consumer: `Q:processing:<consumer id>`

#: Sorted set of live consumers' processing lists, scored by their last heartbeat (ms).
#: Shared by every queue: the reaper finds a dead consumer's lists, whatever their queue.
HEARTBEATS_KEY = "broker:heartbeats"


@dataclass(frozen=True)
class QueueKeys:
    queue: str
    dead: str
    invalid: str
    delayed: str
    crashed: str
    jobs: str

    @classmethod
    def for_queue(cls, queue_name: str) -> QueueKeys:
        """Queue `q` is the list `q:queue` (so a queue named "report" is exactly `report:queue`)."""
        queue = queue_name + QUEUE_KEY_SUFFIX
        return cls(
            queue=queue,
            dead=queue + DEAD_SUFFIX,
            invalid=queue + INVALID_SUFFIX,
            delayed=queue + DELAYED_SUFFIX,
            crashed=queue + CRASHED_SUFFIX,
            jobs=queue + JOBS_SUFFIX,
        )

    @property
    def processing_prefix(self) -> str:
        """Prefix of the processing lists of this queue's consumers."""
        return self.queue + PROCESSING_INFIX
