"""`RedisListBroker`: a Dramatiq broker on plain Redis lists.

Each queue `q` is the Redis list `q:queue` (a queue named "report" is the list
`report:queue`); producers LPUSH, consumers take from the right.
Compared with Dramatiq's RedisBroker:

- the payload in the list is the message itself, in a per-queue codec, so other
  producers can LPUSH jobs in a format they already speak (see codecs.py);
- reliable fetch into per-consumer processing lists, a deterministic reaper and
  atomic outcome recording (see `consumer.py`, `maintenance.py`, `lua/`);
- delayed messages and retries wait in Redis, not in worker memory, and are released
  by whichever worker is alive, on time;
- fetches and acks are batched: about one round trip per prefetch batch.

Redis errors: a consumer waits them out itself, with backoff, and goes on (consumer.py), so
Dramatiq's consumer thread never restarts it for one; the outage is logged once, then
summarised, then its end (backoff.py). Elsewhere (`enqueue`, an ack Dramatiq repeats) they
surface as `dramatiq.errors.ConnectionClosed`, as Dramatiq expects of a broker.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dramatiq
import redis
from dramatiq.broker import Broker, MessageProxy
from dramatiq.common import q_name
from dramatiq.errors import QueueJoinTimeout, QueueNotFound
from dramatiq.middleware import Middleware

from listbroker import batchhooks
from listbroker.batches import Batching, batching_of
from listbroker.codecs import Codec, DramatiqCodec, job_key_field
from listbroker.connections import connection_errors, hot_path_connections
from listbroker.consumer import MAX_BLOCK_SECONDS, ListBatchProxy, ListMessageProxy, RedisListConsumer
from listbroker.figures import read_figures
from listbroker.keys import QueueKeys
from listbroker.maintenance import Maintenance
from listbroker.scripts import Scripts

#: Default of `heartbeat_timeout_ms`: a consumer silent for longer than this is presumed
#: dead and its messages go back to their queue.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 60_000

#: Default of `heartbeat_interval_ms`: how often each worker process beats for its
#: consumers and looks for dead ones (the reaper).
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000

#: Default of `delay_poll_ms`: the longest the delay scheduler sleeps without looking at
#: the delayed sets, so retries scheduled by other processes are released on time even
#: if this one is idle.
DEFAULT_DELAY_POLL_MS = 100

#: Socket timeout of the client the broker builds from a URL: longer than any BLMOVE it issues.
DEFAULT_SOCKET_TIMEOUT = MAX_BLOCK_SECONDS + 5


def _as_bytes(payload: str | bytes) -> bytes:
    return payload.encode("utf-8") if isinstance(payload, str) else payload


#: How often `join` looks at the queue.
JOIN_POLL_SECONDS = 0.05


class RedisListBroker(Broker):
    """A Dramatiq broker whose queues are Redis lists.

    Parameters:
      url: Redis URL (ignored when `client` is given).
      client: a ready `redis.Redis` (or `redis.cluster.RedisCluster`, with `hash_tags`);
        the broker uses it from several threads.
      client_factory: makes the client from `url` and the broker's connection settings
        (timeouts, keepalive), default `redis.Redis.from_url`; an application passes its
        own to reach Redis another way (e.g. through Sentinel) without the broker parsing it.
      middleware: as for every Dramatiq broker (default: Dramatiq's default set).
      codecs: queue name -> Codec for queues not in Dramatiq's own encoding.
      heartbeat_timeout_ms: silence after which a consumer is presumed dead.
      heartbeat_interval_ms: period of heartbeats and of the reaper.
      delay_poll_ms: longest sleep of the delay scheduler.
      hash_tags: name every key of a queue `{q}:queue...` so it lands in one Redis
        Cluster slot (see keys.py); the default keeps `q:queue...`.
    """

    queues: dict[str, QueueKeys]

    def __init__(
        self,
        *,
        url: str | None = None,
        client: redis.Redis | None = None,
        client_factory: Callable[..., redis.Redis] = redis.Redis.from_url,
        middleware: list[Middleware] | None = None,
        codecs: Mapping[str, Codec] | None = None,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        delay_poll_ms: int = DEFAULT_DELAY_POLL_MS,
        hash_tags: bool = False,
    ) -> None:
        if heartbeat_interval_ms <= 0 or heartbeat_timeout_ms <= heartbeat_interval_ms:
            raise ValueError("need 0 < heartbeat_interval_ms < heartbeat_timeout_ms")
        super().__init__(middleware=middleware)
        self.client = client or client_factory(
            url or "redis://127.0.0.1:6379/0",
            socket_timeout=DEFAULT_SOCKET_TIMEOUT,
            socket_connect_timeout=5,
            socket_keepalive=True,
            health_check_interval=30,
        )
        self.scripts = Scripts.register(self.client)
        #: Connections of the hot paths (enqueue, the consumers' fetches), see connections.run_on.
        self.direct = hot_path_connections(self.client)
        #: Whether keys are hash-tagged (a Redis Cluster): see keys.py.
        self.hash_tags = hash_tags
        self.codecs: dict[str, Codec] = dict(codecs or {})
        self.default_codec: Codec = DramatiqCodec()
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.delay_poll_ms = delay_poll_ms
        self.queues = {}
        self._maintenance: Maintenance | None = None
        self._maintenance_lock = threading.Lock()
        self._consuming_stopped = threading.Event()

    # ------------------------------------------------------------------ middleware

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        """Dramatiq's, but a batch's signals go to each of its messages (batchhooks.py), and a
        message about to run is marked started once its middleware let it through (a batch's
        messages all in one step): should the worker die under it, a lost delivery counts."""
        if args and isinstance(args[0], ListBatchProxy) and signal in batchhooks.BATCH_SIGNALS:
            batchhooks.emit_before(self, signal, args[0])
            return
        super().emit_before(signal, *args, **kwargs)
        if signal == "process_message" and isinstance(args[0], ListMessageProxy):
            args[0].start()

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        """Dramatiq's, but a batch's signals go to each of its messages, each with its own
        outcome (batchhooks.py)."""
        if args and isinstance(args[0], ListBatchProxy) and signal in batchhooks.BATCH_SIGNALS:
            batchhooks.emit_after(self, signal, args[0], **kwargs)
            return
        super().emit_after(signal, *args, **kwargs)

    # ------------------------------------------------------------------ queues

    def queue_keys(self, queue_name: str) -> QueueKeys:
        try:
            return self.queues[q_name(queue_name)]
        except KeyError:
            raise QueueNotFound(queue_name) from None

    def declared_queue_keys(self) -> list[QueueKeys]:
        return list(self.queues.values())

    def codec_for(self, queue_name: str) -> Codec:
        return self.codecs.get(q_name(queue_name), self.default_codec)

    def batching(self, actor_name: str) -> Batching | None:
        """How a consumer hands out the actor's messages (batches.py); None for one per call."""
        actor = self.actors.get(actor_name)
        return None if actor is None else batching_of(actor)

    def declare_queue(self, queue_name: str) -> None:
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues[queue_name] = QueueKeys.for_queue(queue_name, hash_tag=self.hash_tags)
            self.emit_after("declare_queue", queue_name)

    def get_declared_delay_queues(self) -> set[str]:
        """None: delays live in each queue's sorted set, released by the broker itself."""
        return set()

    # ------------------------------------------------------------------ producing

    def enqueue(self, message: dramatiq.Message[Any], *, delay: int | None = None) -> dramatiq.Message[Any]:
        if isinstance(message, MessageProxy):
            # A proxy's attributes read through to its message: this is a copy of it.
            message = message.copy()
        keys = self.queue_keys(message.queue_name)
        self.emit_before("enqueue", message, delay)
        codec = self.codec_for(message.queue_name)
        payload = codec.encode(message)
        field = job_key_field(codec)
        with connection_errors():
            if delay:
                member = (secrets.token_hex(8) + "|").encode() + _as_bytes(payload)
                self.scripts.delay(keys=[keys.delayed, keys.jobs], args=[int(delay), member, field])
                self.delay_scheduled(int(delay))
            elif field:
                self.direct.run_script(
                    self.scripts.enqueue, [keys.queue, keys.jobs, keys.counted], [field, payload]
                )
            else:
                self.direct.run("LPUSH", keys.queue, payload)
        self.emit_after("enqueue", message, delay)
        return message

    def enqueue_many(self, messages: Iterable[dramatiq.Message[Any]]) -> list[dramatiq.Message[Any]]:
        """Enqueue several messages in one round trip (one LPUSH per queue), hooks included.

        With hash-tagged keys (a cluster, where queues may live on different nodes) it is
        one round trip per queue instead.
        """
        by_queue: dict[str, list[str | bytes]] = {}
        sent = []
        for message in messages:
            self.queue_keys(message.queue_name)
            self.emit_before("enqueue", message, None)
            payload = self.codec_for(message.queue_name).encode(message)
            by_queue.setdefault(message.queue_name, []).append(payload)
            sent.append(message)
        if by_queue:
            with connection_errors():
                if self.hash_tags:
                    self._enqueue_per_queue(by_queue)
                else:
                    self._enqueue_pipelined(by_queue)
        for message in sent:
            self.emit_after("enqueue", message, None)
        return sent

    def _enqueue_pipelined(self, by_queue: Mapping[str, list[str | bytes]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for queue_name, payloads in by_queue.items():
            keys = self.queue_keys(queue_name)
            field = job_key_field(self.codec_for(queue_name))
            if field:
                self.scripts.enqueue(
                    keys=[keys.queue, keys.jobs, keys.counted], args=[field, *payloads], client=pipe
                )
            else:
                pipe.lpush(keys.queue, *payloads)
        pipe.execute()

    def _enqueue_per_queue(self, by_queue: Mapping[str, list[str | bytes]]) -> None:
        for queue_name, payloads in by_queue.items():
            keys = self.queue_keys(queue_name)
            field = job_key_field(self.codec_for(queue_name))
            if field:
                self.direct.run_script(
                    self.scripts.enqueue, [keys.queue, keys.jobs, keys.counted], [field, *payloads]
                )
            else:
                self.direct.run("LPUSH", keys.queue, *payloads)

    def delay_scheduled(self, delay_ms: int) -> None:
        """A delayed message was stored: let this process's scheduler recompute its sleep."""
        if self._maintenance is not None:
            self._maintenance.wake()

    # ------------------------------------------------------------------ consuming

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> RedisListConsumer:
        """A consumer of the queue, registered for heartbeats before it takes anything.

        It never raises a Redis error: while Redis fails, the consumer waits with backoff and
        registers before its first fetch (`RedisListConsumer.register`).
        """
        self.queue_keys(queue_name)
        consumer = RedisListConsumer(self, queue_name, prefetch, timeout)
        consumer.register()
        if self._consuming_stopped.is_set():
            consumer.stop_fetching()  # started while the worker shuts down: it hands out nothing
        return consumer

    def stop_consuming(self) -> None:
        """The worker is shutting down: a consumer made from now on (Dramatiq restarts one after
        an unexpected error) hands out nothing (RequeueOnShutdown calls it)."""
        self._consuming_stopped.set()

    def maintenance(self) -> Maintenance:
        with self._maintenance_lock:
            if self._maintenance is None or not self._maintenance.is_alive():
                self._maintenance = Maintenance(self)
                self._maintenance.start()
            return self._maintenance

    @contextmanager
    def releasing(self, consumer: RedisListConsumer) -> Iterator[None]:
        if self._maintenance is None:
            yield
            return
        with self._maintenance.releasing(consumer):
            yield

    def close(self) -> None:
        self._consuming_stopped.set()
        if self._maintenance is not None:
            self._maintenance.stop()
            self._maintenance = None
        self.direct.close()
        self.client.close()

    # ------------------------------------------------------------------ testing helpers

    def flush(self, queue_name: str) -> None:
        keys = self.queue_keys(queue_name)
        with connection_errors():
            self.client.delete(
                keys.queue,
                keys.delayed,
                keys.dead,
                keys.invalid,
                keys.invalid_meta,
                keys.crashed,
                keys.jobs,
                keys.counted,
            )

    def flush_all(self) -> None:
        for queue_name in list(self.queues):
            self.flush(queue_name)

    def pending(self, queue_name: str) -> int:
        """Messages queued, delayed or in flight on a queue (what `join` waits for), read atomically."""
        keys = self.queue_keys(queue_name)
        with connection_errors():
            return read_figures(lambda k, a: self.scripts.figures(keys=k, args=a), keys).pending

    def join(self, queue_name: str, *, timeout: int | None = None) -> None:
        """Wait until nothing is queued, delayed or in flight on the queue."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while self.pending(queue_name):
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(JOIN_POLL_SECONDS)
