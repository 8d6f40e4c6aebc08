"""The Redis keys of a Dramatiq queue on a `RedisListBroker`.

Every queue `q` is the list `q:queue`; the keys that belong to it share that prefix.

Two layouts, chosen by the broker's `hash_tags` parameter:

- default: `report:queue`, `report:queue:dead`, ... and one heartbeat set shared by
  every queue, `broker:heartbeats` (the names other producers, e.g. the .NET one, use);
- hash-tagged (Redis Cluster): `{report}:queue`, `{report}:queue:dead`, ... and a
  heartbeat set per queue, `{report}:queue:heartbeats`. Redis hashes only the part in
  braces, so every key of a queue lands in one slot and each Lua script (which only
  ever touches one queue's keys) runs on one node.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Every Dramatiq queue `q` lives in the Redis list `q:queue`.
QUEUE_KEY_SUFFIX = ":queue"

#: Suffixes of the keys that belong to a queue key `Q` (e.g. `report:queue:dead`).
DEAD_SUFFIX = ":dead"  # list: messages whose attempts are exhausted
INVALID_SUFFIX = ":invalid"  # list: messages that could not be decoded, kept verbatim
INVALID_META_SUFFIX = ":meta"  # after INVALID_SUFFIX: hash digest -> why and when quarantined
DELAYED_SUFFIX = ":delayed"  # sorted set: delayed messages and retries, scored by due time (ms)
CRASHED_SUFFIX = ":crashed"  # hash: raw message -> times its consumer died holding it
JOBS_SUFFIX = ":jobs"  # hash: job key -> jobs alive for it (see scripts.py), if the codec names one
COUNTED_SUFFIX = ":counted"  # hash: payload -> its copies waiting in the queue already counted in `:jobs`
PROCESSING_INFIX = ":processing:"  # list per consumer: `Q:processing:<consumer id>`
STARTED_INFIX = ":started:"  # hash per consumer: payload -> its deliveries there that started
HEARTBEATS_SUFFIX = ":heartbeats"  # hash-tagged layout only: the queue's own heartbeat set

#: Sorted set of live consumers' processing lists, scored by their last heartbeat (ms).
#: Default layout: shared by every queue, so the reaper finds a dead consumer's lists
#: whatever their queue. The hash-tagged layout gives each queue its own (`Q:heartbeats`).
HEARTBEATS_KEY = "broker:heartbeats"


def queue_key(queue_name: str, *, hash_tag: bool = False) -> str:
    """`q:queue`, or `{q}:queue` when hash-tagged (every key of the queue then shares the slot of `q`)."""
    if not hash_tag:
        return queue_name + QUEUE_KEY_SUFFIX
    if "{" in queue_name or "}" in queue_name:
        raise ValueError(f"a hash-tagged queue name cannot contain braces: {queue_name!r}")
    return "{" + queue_name + "}" + QUEUE_KEY_SUFFIX


@dataclass(frozen=True)
class QueueKeys:
    queue: str
    dead: str
    invalid: str
    delayed: str
    crashed: str
    jobs: str
    counted: str
    #: The heartbeat set the queue's consumers beat in (shared or the queue's own).
    heartbeats: str = HEARTBEATS_KEY

    @classmethod
    def for_queue(cls, queue_name: str, *, hash_tag: bool = False) -> QueueKeys:
        """Queue `q` is the list `q:queue` (so a queue named "report" is exactly `report:queue`),
        or `{q}:queue` when hash-tagged."""
        queue = queue_key(queue_name, hash_tag=hash_tag)
        return cls(
            queue=queue,
            dead=queue + DEAD_SUFFIX,
            invalid=queue + INVALID_SUFFIX,
            delayed=queue + DELAYED_SUFFIX,
            crashed=queue + CRASHED_SUFFIX,
            jobs=queue + JOBS_SUFFIX,
            counted=queue + COUNTED_SUFFIX,
            heartbeats=queue + HEARTBEATS_SUFFIX if hash_tag else HEARTBEATS_KEY,
        )

    @property
    def invalid_meta(self) -> str:
        """Hash beside the quarantine: why and when each payload was quarantined (quarantine.lua)."""
        return self.invalid + INVALID_META_SUFFIX

    @property
    def processing_prefix(self) -> str:
        """Prefix of the processing lists of this queue's consumers."""
        return self.queue + PROCESSING_INFIX

    def processing(self, consumer_id: str) -> str:
        """The processing list of one consumer of this queue."""
        return self.processing_prefix + consumer_id

    def started(self, consumer_id: str) -> str:
        """The started marks of one consumer of this queue: which messages it holds began to run."""
        return self.queue + STARTED_INFIX + consumer_id


def owner_of_processing(processing_key: str) -> tuple[str, str, str] | None:
    """(queue key, crashed key, counted key) of a processing list `Q:processing:<id>`; None for
    another name.

    The reaper needs them for lists of queues this process never declared (the default
    layout's heartbeat set is shared by every queue), and declares them to its script.
    """
    at = processing_key.find(PROCESSING_INFIX)
    if at <= 0:
        return None
    queue = processing_key[:at]
    return queue, queue + CRASHED_SUFFIX, queue + COUNTED_SUFFIX


def started_of_processing(processing_key: str) -> str | None:
    """The started marks `Q:started:<id>` of a processing list `Q:processing:<id>`; None for another name."""
    at = processing_key.find(PROCESSING_INFIX)
    if at <= 0:
        return None
    return processing_key[:at] + STARTED_INFIX + processing_key[at + len(PROCESSING_INFIX) :]
