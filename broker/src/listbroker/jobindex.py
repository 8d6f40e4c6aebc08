"""A queue's job index (`Q:jobs`) for producers and reconcilers, on any client, without a broker.

The index counts the jobs alive per job key (see scripts.py); the steps here change a
queue and its index in one atomic call each, as the broker's own steps do. Payloads
must already be in the queue's wire format, and `job_key_field` must be the one of
the queue's codec. `counted_key` is the queue's `Q:counted` (keys.QueueKeys.counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import redis
from redis.commands.core import Script

from listbroker.scripts import source


class PreparedScript(NamedTuple):
    """A script's call made ready, for a caller that sends it with other commands (a pipeline)."""

    script: Script
    keys: list[str]
    args: list[Any]


class JobIndex:
    def __init__(
        self, client: redis.Redis, *, queue_key: str, jobs_key: str, counted_key: str, job_key_field: str
    ) -> None:
        self.queue_key = queue_key
        self.jobs_key = jobs_key
        self.counted_key = counted_key
        self.job_key_field = job_key_field
        self._enqueue = client.register_script(source("enqueue"))
        self._enqueue_missing = client.register_script(source("enqueue_missing"))
        self._clear_dead_marks = client.register_script(source("clear_dead_marks"))
        self._jobs_alive = client.register_script(source("jobs_alive"))

    def enqueue(self, payloads: Sequence[str | bytes]) -> int:
        """LPUSH the payloads in this order, each counted in the index; the number pushed."""
        call = self.enqueue_call(payloads)
        return int(call.script(keys=call.keys, args=call.args))

    def enqueue_call(self, payloads: Sequence[str | bytes]) -> PreparedScript:
        """`enqueue(payloads)` made ready, not sent; its reply is the number pushed."""
        return PreparedScript(
            self._enqueue,
            [self.queue_key, self.jobs_key, self.counted_key],
            [self.job_key_field, *payloads],
        )

    def enqueue_missing(self, payloads: Sequence[str | bytes]) -> tuple[list[bytes], list[bytes]]:
        """LPUSH each payload whose job key has no job alive and no dead mark.

        Returns (the job keys enqueued, the job keys carrying a dead mark).
        """
        enqueued, dead = self._enqueue_missing(
            keys=[self.queue_key, self.jobs_key, self.counted_key], args=[self.job_key_field, *payloads]
        )
        return list(enqueued), list(dead)

    def jobs_alive(self, job_key: str | int) -> int:
        """How many jobs of the key are alive, whoever queued them (0: none, or a dead mark).

        Jobs another producer LPUSHed are counted when fetched; any still waiting in the queue
        are counted first, by one read of the queue that happens only while such jobs wait.
        """
        return int(
            self._jobs_alive(
                keys=[self.queue_key, self.jobs_key, self.counted_key], args=[self.job_key_field, job_key]
            )
        )

    def clear_dead_marks(self, job_keys: Sequence[str | int]) -> int:
        """Drop the dead marks of these job keys (their follow-up is done); the number dropped."""
        return int(self._clear_dead_marks(keys=[self.jobs_key], args=list(job_keys)))
