"""The broker's housekeeping thread, one per worker process.

- Heartbeats: every interval, one ZADD per process and heartbeat set for all its
  consumers' processing lists (one set in the default layout, one per queue when
  hash-tagged, see keys.py).
- Reaper: every interval, consumers silent for longer than the heartbeat timeout are
  declared dead and their messages returned to the queue (those that had started counted
  as a lost delivery): one call lists the silent consumers of a heartbeat set, then one call per
  consumer moves its messages, every key declared (so each call stays on one slot).
  Every worker runs it, on a fixed period: recovery takes at most
  timeout + interval, however quiet the queue (Dramatiq's RedisBroker reaps on a 0.1 %
  dice roll per fetch: dramatiq/dramatiq#527 upstream).
- Delay scheduler: due messages of every declared queue are moved from its delayed set
  to the queue. It sleeps until the earliest due time, woken early when this process
  schedules a retry, and never longer than the poll interval, so retries scheduled by
  another process are released on time too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import redis

from listbroker.backoff import Backoff
from listbroker.connections import connection_errors
from listbroker.keys import owner_of_processing, started_of_processing

if TYPE_CHECKING:
    # broker.py runs the housekeeping thread: imported at run time, it would be a circle.
    from listbroker.broker import RedisListBroker
    from listbroker.consumer import RedisListConsumer

logger = logging.getLogger(__name__)

#: First wait after a failed housekeeping pass; it doubles while the passes keep failing,
#: up to the heartbeat interval (backoff.py).
ERROR_BACKOFF_SECONDS = 0.5

#: Most dead consumers reaped per call.
REAP_BATCH = 100

#: Most delayed messages released to a queue per Redis round trip.
PROMOTE_BATCH = 1_000


class Maintenance(threading.Thread):
    def __init__(self, broker: RedisListBroker) -> None:
        super().__init__(name="redis-list-broker-maintenance", daemon=True)
        self.broker = broker
        self._lock = threading.Lock()
        #: Held while beating and while a consumer gives its processing list up (`releasing`):
        #: a beat taken before a release must not land after it and list the consumer again
        #: (a heartbeat for a processing list nobody owns, later reaped as a dead consumer).
        self._beating = threading.Lock()
        self._consumers: set[RedisListConsumer] = set()
        self._wake = threading.Event()
        self._stopping = threading.Event()

    # Called from consumer threads -------------------------------------------------

    def register(self, consumer: RedisListConsumer) -> None:
        # Beat at once: a consumer must be visible to the reaper before it takes anything.
        # Beat *before* adding it: a consumer whose beat failed takes nothing until its
        # registration succeeds (it tries again with backoff, `RedisListConsumer._rejoin`);
        # closed before that, it leaves no entry for this thread to beat or release.
        with connection_errors():
            self.broker.scripts.heartbeat(keys=[consumer.heartbeats_key], args=[consumer.processing_key])
        with self._lock:
            self._consumers.add(consumer)

    def unregister(self, consumer: RedisListConsumer) -> None:
        with self._lock:
            self._consumers.discard(consumer)

    @contextmanager
    def releasing(self, consumer: RedisListConsumer) -> Iterator[None]:
        """The block (the consumer's release script, which forgets its heartbeat) runs between
        two beats, never during one, and unregisters the consumer when it succeeds."""
        with self._beating:
            yield
            self.unregister(consumer)

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout)

    # The loop ------------------------------------------------------------------------

    def run(self) -> None:
        interval = self.broker.heartbeat_interval_ms / 1000
        # A failing pass waits with backoff, up to one heartbeat interval, so beats resume
        # within an interval of Redis coming back (without it, a failure leaves the next beat and
        # reap due in the past, the wait becomes 0, and the thread spins as long as Redis is gone).
        backoff = Backoff(
            "Broker housekeeping", logger, first_s=min(ERROR_BACKOFF_SECONDS, interval), max_s=interval
        )
        next_beat = next_reap = 0.0
        while not self._stopping.is_set():
            now = time.monotonic()
            sleep = self.broker.delay_poll_ms / 1000
            try:
                if now >= next_beat:
                    self.beat()
                    next_beat = now + interval
                if now >= next_reap:
                    self.reap()
                    next_reap = now + interval
                until_due = self.promote_due()
                if until_due is not None:
                    sleep = min(sleep, until_due)
                backoff.succeeded()
                sleep = min(sleep, max(0.0, min(next_beat, next_reap) - time.monotonic()))
            except redis.RedisError as exc:
                sleep = backoff.failed(exc)
            except Exception as exc:
                sleep = backoff.failed(exc, traceback=True)
            self._wake.wait(max(sleep, 0.0))
            self._wake.clear()

    def beat(self) -> None:
        with self._lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            if consumer.closed:
                consumer.try_release()
        with self._beating:
            by_set: dict[str, list[str]] = {}
            with self._lock:
                for c in self._consumers:
                    by_set.setdefault(c.heartbeats_key, []).append(c.processing_key)
            for heartbeats, keys in by_set.items():
                self.broker.scripts.heartbeat(keys=[heartbeats], args=keys)

    def reap(self) -> int:
        """Return the messages of dead consumers to their queues; the number of messages moved."""
        consumers = moved = 0
        timeout = self.broker.heartbeat_timeout_ms
        for heartbeats in dict.fromkeys(k.heartbeats for k in self.broker.declared_queue_keys()):
            for member in self.broker.scripts.silent(keys=[heartbeats], args=[timeout, REAP_BATCH]):
                processing = member.decode() if isinstance(member, bytes) else str(member)
                owner = owner_of_processing(processing)
                started = started_of_processing(processing)
                if owner is None or started is None:
                    # Not a processing list: nothing to return, only a stray entry to drop.
                    self.broker.client.zrem(heartbeats, member)
                    continue
                queue, crashed, counted = owner
                n = int(
                    self.broker.scripts.reap(
                        keys=[heartbeats, processing, queue, crashed, counted, started], args=[timeout]
                    )
                )
                if n >= 0:
                    consumers += 1
                    moved += n
        if consumers:
            logger.warning(
                "Reaped %d dead consumer(s): %d message(s) returned to their queues.", consumers, moved
            )
        return moved

    def promote_due(self) -> float | None:
        """Release due delayed messages; seconds until the next one is due (None: none waiting)."""
        until: float | None = None
        for keys in self.broker.declared_queue_keys():
            while True:
                moved, now_ms, next_ms = self.broker.scripts.promote(
                    keys=[keys.delayed, keys.queue, keys.counted], args=[PROMOTE_BATCH]
                )
                if moved:
                    logger.debug("Released %d delayed message(s) to %s.", moved, keys.queue)
                if moved < PROMOTE_BATCH:
                    break
            if next_ms >= 0:
                wait = max(0.0, (next_ms - now_ms) / 1000)
                until = wait if until is None else min(until, wait)
        return until
