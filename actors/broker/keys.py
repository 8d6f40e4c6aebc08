"""The Redis keys of a Dramatiq queue."""

from __future__ import annotations

from dataclasses import dataclass

from actors.constants import (
    CRASHED_SUFFIX,
    DEAD_SUFFIX,
    DELAYED_SUFFIX,
    INVALID_SUFFIX,
    JOBS_SUFFIX,
    QUEUE_KEY_SUFFIX,
)


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
        """Queue `q` is the list `q:queue`; so the report queue is exactly `report:queue`."""
        queue = queue_name + QUEUE_KEY_SUFFIX
        return cls(
            queue=queue,
            dead=queue + DEAD_SUFFIX,
            invalid=queue + INVALID_SUFFIX,
            delayed=queue + DELAYED_SUFFIX,
            crashed=queue + CRASHED_SUFFIX,
            jobs=queue + JOBS_SUFFIX,
        )
