"""The consumer of one queue in one worker process, and the proxies it hands out.

Reliable fetch: messages are moved atomically from the queue into this consumer's
processing list (batched in one Lua call; on an empty queue a BLMOVE waits) and leave
it only when their outcome is recorded: ack, retry, dead letter, quarantine, or
requeue at shutdown. If the process dies, the reaper of another worker returns them.

Threads: Dramatiq's consumer thread calls `__next__`; worker threads call `ack`/`nack`
and the proxies' `retry_later`/`dead_letter` concurrently. All shared state is guarded
by one condition variable. Acknowledgements are batched: they ride along with the next
fetch, or are flushed at once by the acking thread when the consumer thread is blocked
waiting for messages, so an idle queue never holds an ack back.

Redis errors: a consumer waits them out itself and goes on, so Dramatiq's consumer thread
never sees one and never restarts it. A fetch (or the registration, `register`) that fails
makes `__next__` return None, Dramatiq's "no message now", and try again with backoff
(`FETCH_FIRST_BACKOFF_S` doubling to `FETCH_MAX_BACKOFF_S`; each wait is cut into pieces of
one worker timeout and ended by a stop, so a worker stops as promptly as on an idle queue);
the outage is logged once, then summarised, then its end (backoff.py). Before it fetches
again it does what a consumer made afresh would (`_rejoin`): its heartbeat at once, then the
messages its processing list holds that it does not know of (a fetch whose reply was lost)
back to the queue. What a failing ack or nack could not record is kept for the next one
(`_unrecorded`, `_flush`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import secrets
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import dramatiq
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.errors import ConnectionClosed

from listbroker.backoff import Backoff
from listbroker.batches import Batching
from listbroker.codecs import Codec, job_key_field
from listbroker.connections import connection_errors
from listbroker.deadletters import (
    DEAD_LETTER_OPTION,
    MAX_DEAD_ERROR_CHARS,
    MAX_LOGGED_PAYLOAD,
    dead_letter_option,
    invalid_meta_field,
    shown_payload,
)
from listbroker.errors import DependencyUnavailable, InvalidMessage
from listbroker.keys import QueueKeys

if TYPE_CHECKING:
    # broker.py makes the consumers: imported at run time, it would be a circle.
    from listbroker.broker import RedisListBroker

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Longest single BLMOVE, kept below the client's socket timeout.
MAX_BLOCK_SECONDS = 5.0

#: How often a stopped consumer's thread comes back to record acks.
STOPPED_POLL_SECONDS = 0.1

#: Acks waiting for a flush beyond this number are flushed by the acking thread itself.
ACK_FLUSH_THRESHOLD = 64

#: Largest batch of messages one fetch moves into a processing list.
MAX_FETCH_BATCH = 256

#: Prefetch follows the actor's speed: beyond Dramatiq's prefetch (2 × threads), a consumer
#: may hold as many messages as it finishes in this many seconds at its recent pace. A fast
#: actor with one thread is otherwise bound by a fetch round trip per 2 messages;
#: a slow one (a report generated alone, a few ms) keeps Dramatiq's prefetch.
PREFETCH_HOLD_SECONDS = 0.05

#: Never more than this many messages held, however fast the actor: what a crash leaves in its
#: processing list for the reaper to return (and a shutdown gives back) stays small; a
#: consumer of a batched actor holds up to `BATCHES_HELD` times as many.
MAX_ADAPTIVE_PREFETCH = 100

#: A consumer of an actor that takes batches (batches.py) holds this many times the pace's
#: hold, as Dramatiq's prefetch (2 × threads) holds a message waiting for each one running:
#: a batch takes all that is held, so holding one batch's worth leaves each worker process
#: alternating between generating a batch and fetching the next (at the report actor's pace
#: a batch of 100 is the whole hold): 0.79 × the lean loop's reports/s, 0.91–0.99 × holding two
#: (`bench.generation_limit`). A slow actor keeps Dramatiq's prefetch.
BATCHES_HELD = 2

#: A consumer holding messages fetches again once 1/FETCH_REFILL of its limit is free, not
#: for every message finished: one fetch per message cost ~0.7 Redis calls and ~150 µs of CPU
#: per message once each message's start waited on Redis (its started mark).
FETCH_REFILL = 4

#: Weight of the newest interval between two finished messages in the pace's moving average.
PACE_WEIGHT = 0.2

#: While acknowledgements (or the return of prefetched messages) cannot be written, a
#: stopped consumer tries again after this long, doubling up to WRITE_MAX_BACKOFF_S.
WRITE_MAX_BACKOFF_S = 5.0

#: After a fetch failed on a Redis error, the consumer tries again after this long, doubling
#: while Redis stays unreachable, at most FETCH_MAX_BACKOFF_S: a few attempts a minute.
FETCH_FIRST_BACKOFF_S = 1.0
FETCH_MAX_BACKOFF_S = 10.0


class ListMessageProxy(MessageProxy):
    """A message taken from a Redis list, with what is needed to record its outcome."""

    def __init__(
        self, message: dramatiq.Message[Any], *, payload: bytes, origin: RedisListConsumer, redeliveries: int
    ) -> None:
        super().__init__(message)
        self._dramatiq_message = message
        #: The exact bytes held in the processing list (removed by value).
        self.payload = payload
        #: How many earlier deliveries of this payload were lost with their worker.
        self.redeliveries = redeliveries
        self._origin = origin
        self._finished = False
        #: How its outcome was recorded, for observers (after_process_message): "delay" (a
        #: retry scheduled), "push" (dead-lettered), "ack"; None until then, or when the
        #: message was no longer ours (reaped) and nothing was recorded.
        self.settled_as: str | None = None
        #: The outcome whose recording failed on a Redis error (a retry, a dead letter, a
        #: return to the queue), recorded by the consumer's ack or nack instead, which
        #: Dramatiq repeats until Redis answers. Without it the ack that follows removed the
        #: job from its processing list and the index: a failed attempt's retry was lost, and
        #: another job's dead letter set status 5 under it (found by the soak).
        self._unrecorded: Callable[[], object] | None = None
        #: Set by a batch function for a message whose work is finished (`mark_done`).
        self.done = False
        self._failure: BaseException | None = None

    @property
    def message(self) -> dramatiq.Message[Any]:
        """The Dramatiq message itself (read without the proxy's attribute lookup)."""
        return self._dramatiq_message

    # The fields every middleware hook reads, read directly: Dramatiq's proxy forwards them
    # through __getattr__, which runs only after a failed lookup (a batch's messages each go
    # through every hook: batchhooks.py).
    @property
    def message_id(self) -> str:  # type: ignore[override]
        return self._dramatiq_message.message_id

    @property
    def queue_name(self) -> str:  # type: ignore[override]
        return self._dramatiq_message.queue_name

    @property
    def actor_name(self) -> str:  # type: ignore[override]
        return self._dramatiq_message.actor_name

    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        return self._dramatiq_message.args

    @property
    def options(self) -> dict[str, Any]:  # type: ignore[override]
        return self._dramatiq_message.options

    def stuff_exception(self, exception: BaseException) -> None:
        """Record the error this message's attempt ended with (Dramatiq's worker does it when the
        actor raises; a batch function does it for one message of its batch)."""
        super().stuff_exception(exception)
        self._failure = exception

    def clear_exception(self) -> None:
        super().clear_exception()
        self._failure = None

    @property
    def failure(self) -> BaseException | None:
        """The error this message's attempt ended with (`stuff_exception`), None while it has
        none: a batch's items carry their own, where Dramatiq hands middleware the batch's."""
        return self._failure

    def mark_done(self) -> None:
        """A batch function finished this message's work (batches.py): it is acknowledged now,
        not when the call returns (a message of the batch may still wait a long time, on a lock:
        the others would stay in the processing list meanwhile, redelivered by a crash), and
        should the call raise afterwards (a time limit), that failure is not this message's."""
        self.done = True
        # Redis failing: the batch's acknowledgement, which Dramatiq repeats, records it.
        with contextlib.suppress(ConnectionClosed):
            self._origin._ack([self])

    def _record(self, step: Callable[[], T]) -> T:
        try:
            return step()
        except ConnectionClosed:
            self._unrecorded = step
            raise

    def retry_later(self, message: dramatiq.Message[Any], delay_ms: int) -> bool:
        """Atomically drop this delivery and schedule `message` to be queued after `delay_ms`."""
        encoded = self._origin.codec.encode(message)
        return self._record(lambda: self._origin.settle(self, "delay", encoded, delay_ms))

    def dead_letter(
        self,
        *,
        unconfirmed: bool = False,
        error: BaseException | str | None = None,
        attempts: int | None = None,
    ) -> bool:
        """Atomically move this message to the queue's dead-letter list, with why and when.

        The entry is the message re-encoded by its codec with the option `dead_letter`
        (last error, attempts, time; see deadletters.py), or the payload verbatim if the
        codec cannot write it. `unconfirmed`: what should follow the dead letter (e.g.
        marking the record as failed) did not happen; the job index keeps a `dead` mark
        for a reconciler.
        """
        if error is None:
            error = self.failure
        entry = self._origin.dead_entry(self, error, attempts)
        return self._record(lambda: self._origin.settle(self, "push", entry, unconfirmed=unconfirmed))

    def return_to_dead(self) -> bool:
        """Put this message back in the dead-letter list verbatim, its follow-up done already.

        For a dead letter moved back to the queue by hand (it carries `dead_letter`): counted
        by its fetch as any job, it ends here without a dead mark and without running.
        """
        return self._record(lambda: self._origin.settle(self, "push", self.payload))

    def start(self) -> None:
        """About to run: should its worker die now, a lost delivery counts (`RedisListConsumer.start`)."""
        self._origin.start([self])

    def give_back(self) -> None:
        """Return this message, never run, to the head of its queue without counting an attempt."""
        self._record(lambda: self._origin._requeue([self]))

    @property
    def settled(self) -> bool:
        return self._finished

    @property
    def recording_deferred(self) -> bool:
        """Its outcome is decided but could not be written (Redis failing): its acknowledgement
        records it. Nothing else is to be recorded for it meanwhile."""
        return self._unrecorded is not None


class ListBatchProxy(MessageProxy):
    """Messages of one batched actor, handed to one call of its companion.

    Dramatiq sees one message of the companion actor, whose one argument is the list of the
    messages to run (`args`); `items` holds them all. It is never encoded or stored: the
    consumer records each item's outcome (its ack acknowledges every item not yet settled).
    Middleware never sees it: the broker hands each item to the middleware hooks instead
    (`RedisListBroker.emit_before` / `emit_after`, batchhooks.py), which fills `running`.
    """

    def __init__(self, items: Sequence[ListMessageProxy], actor_name: str) -> None:
        first = items[0]
        super().__init__(
            dramatiq.Message(
                queue_name=first.queue_name,
                actor_name=actor_name,
                args=(),
                kwargs={},
                options={},
                message_id=str(uuid.uuid4()),
            )
        )
        self.items: list[ListMessageProxy] = list(items)
        #: The items that passed their middleware's before-hooks (None until the broker ran
        #: them): the call's messages.
        self.running: list[ListMessageProxy] | None = None
        #: Per item, in the order of `items`: the context its middleware hooks run in, and
        #: whether a before-hook refused it (SkipMessage). Filled by the broker (batchhooks.py).
        self.contexts: list[contextvars.Context] = []
        self.refused: list[bool] = []

    # Dramatiq types the message's fields as attributes; this one is computed.
    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        """The companion's one argument: the messages to run (those the middleware let through;
        before the broker ran their hooks, those not settled)."""
        if self.running is not None:
            return (self.running,)
        return ([item for item in self.items if not item.settled],)

    @property
    def settled(self) -> bool:
        return all(item.settled for item in self.items)

    def give_back(self) -> None:
        """Return every message of the call not yet settled, never run, to the head of its
        queue, uncounted.

        One step for the batch; when Redis fails, each message keeps its return to be recorded
        by its acknowledgement (as `ListMessageProxy.give_back`)."""
        called = self.items if self.running is None else self.running
        unsettled = [item for item in called if not item.settled]
        if not unsettled:
            return
        try:
            unsettled[0]._origin._requeue(unsettled)
        except ConnectionClosed:
            for item in unsettled:
                item._unrecorded = item.give_back
            raise

    def __repr__(self) -> str:
        return f"ListBatchProxy({len(self.items)} messages of {self.actor_name})"

    def __str__(self) -> str:
        ids = ", ".join(item.message_id for item in self.items[:3])
        more = f", … {len(self.items)} in all" if len(self.items) > 3 else ""
        return f"batch of {self.actor_name}: {ids}{more}"


def _record_deferred(proxy: ListMessageProxy) -> bool:
    """Record the outcome whose recording failed on a Redis error, if there is one (raises
    ConnectionClosed while Redis still fails: Dramatiq tries the ack or nack again)."""
    step = proxy._unrecorded
    if step is None:
        return False
    step()
    proxy._unrecorded = None
    return True


def min_fetch(limit: int) -> int:
    """The fewest messages a consumer with messages in hand fetches at once (`FETCH_REFILL`)."""
    return max(1, limit // FETCH_REFILL)


def adaptive_prefetch(prefetch: int, pace_s: float | None, *, batched: bool = False) -> int:
    """The prefetch for a consumer finishing a message every `pace_s` seconds (None: not known
    yet): Dramatiq's `prefetch`, raised to `PREFETCH_HOLD_SECONDS` of work, at most
    `MAX_ADAPTIVE_PREFETCH`; `BATCHES_HELD` times that for a consumer of an actor taking batches."""
    if pace_s is None:
        return prefetch
    hold = (
        MAX_ADAPTIVE_PREFETCH
        if pace_s <= 0
        else min(MAX_ADAPTIVE_PREFETCH, int(PREFETCH_HOLD_SECONDS / pace_s))
    )
    return max(prefetch, hold * BATCHES_HELD if batched else hold)


class RedisListConsumer(Consumer):
    def __init__(self, broker: RedisListBroker, queue_name: str, prefetch: int, timeout_ms: int) -> None:
        self.broker = broker
        self.queue_name = queue_name
        self.keys: QueueKeys = broker.queue_keys(queue_name)
        self.codec: Codec = broker.codec_for(queue_name)
        self.consumer_id = uuid.uuid4().hex
        self.processing_key = self.keys.processing(self.consumer_id)
        #: Which of the messages held in the processing list began to run (see `start`).
        self.started_key = self.keys.started(self.consumer_id)
        #: The heartbeat set this consumer beats in (see keys.py).
        self.heartbeats_key = self.keys.heartbeats
        self.prefetch = max(1, prefetch)
        #: The prefetch in force: `self.prefetch` raised by `adaptive_prefetch` for fast actors.
        self.limit = self.prefetch
        self._pace: float | None = None  # moving average of the seconds between finished messages
        self._last_finish: float | None = None
        self.timeout = timeout_ms / 1000
        self.client = broker.client
        self.scripts = broker.scripts
        #: The fetch script's own connection (consumer thread, and acking threads' flushes).
        self.channel = broker.direct.channel()
        self._fetch_keys = [
            self.keys.queue,
            self.processing_key,
            self.keys.crashed,
            self.keys.jobs,
            self.keys.counted,
            self.started_key,
        ]
        #: The codec's job key field: the scripts keep `Q:jobs` with it ('' = no index).
        self.job_key_field = job_key_field(self.codec)
        self._cond = threading.Condition()
        self._buffer: deque[ListMessageProxy] = deque()
        #: Per actor name, its batching (None: one message per call), asked of the broker once.
        self._batchings: dict[str, Batching | None] = {}
        #: Whether an actor seen here takes batches (`adaptive_prefetch`).
        self._batched = False
        self._outstanding = 0  # handed out, outcome not yet recorded
        self._pending_acks: list[bytes] = []
        #: The messages fetched and not yet finished (buffered or handed out), by identity (a
        #: proxy compares equal to any proxy of an equal message); with the acks pending and
        #: those of the acking threads' flushes under way, what the processing list may hold
        #: (`_return_strays`).
        self._held: dict[int, ListMessageProxy] = {}
        self._flushes = 0
        #: While set, acking threads leave their acks pending rather than flush them.
        self._sweeping = False
        self._blocking = False
        #: Set by `stop_fetching` when the worker starts shutting down; `drained` once the
        #: consumer thread has given its buffer back and hands out nothing more.
        self.stopped = False
        self.drained = False
        self.closed = False
        self.released = False
        #: Writes of acknowledgements and given-back messages that failed, retried later:
        #: logged once, summarised, and their recovery (backoff.py).
        self._writes = Backoff(
            f"Consumer of {self.keys.queue}: recording acknowledgements",
            logger,
            first_s=STOPPED_POLL_SECONDS,
            max_s=WRITE_MAX_BACKOFF_S,
        )
        #: Fetching (and registering) while Redis fails: when to try again (None: not failing).
        self._fetching = Backoff(
            f"Consumer of {self.keys.queue}",
            logger,
            first_s=FETCH_FIRST_BACKOFF_S,
            max_s=FETCH_MAX_BACKOFF_S,
        )
        self._retry_at: float | None = None
        #: Set by `stop_fetching` and `close`: ends a wait for the next attempt at once.
        self._stopping = threading.Event()

    def register(self) -> None:
        """Beat for this consumer at once, before it takes anything, and have the broker's
        housekeeping beat for it from then on (`Maintenance.register`). While Redis fails, the
        consumer starts out waiting with backoff and registers before its first fetch."""
        try:
            self.broker.maintenance().register(self)
        except ConnectionClosed as exc:
            self._fetch_failed(exc)

    # ------------------------------------------------------------------ fetching

    def __next__(self) -> MessageProxy | None:
        if self.stopped:
            self._idle_while_stopped()
            return None
        if self._retry_at is not None and not self._recovered():
            return None
        try:
            return self._next()
        except ConnectionClosed as exc:
            self._fetch_failed(exc)
            return None

    def _fetch_failed(self, exc: ConnectionClosed) -> None:
        """A Redis error while fetching or registering: logged by the backoff (once, then a
        summary while it lasts), and the next attempt put off."""
        delay = self._fetching.failed(exc.__cause__ or exc)
        self._retry_at = time.monotonic() + delay

    def _recovered(self) -> bool:
        """While Redis fails: wait for the next attempt, one worker timeout at most (Dramatiq's
        consumer thread looks at its stop between two calls), then rejoin. Whether it did."""
        assert self._retry_at is not None
        remaining = self._retry_at - time.monotonic()
        if remaining > 0:
            self._stopping.wait(min(remaining, max(self.timeout, STOPPED_POLL_SECONDS)))
            if self.stopped or time.monotonic() < self._retry_at:
                return False
        try:
            self._rejoin()
        except ConnectionClosed as exc:
            self._fetch_failed(exc)
            return False
        self._retry_at = None
        self._fetching.succeeded()
        return True

    def _rejoin(self) -> None:
        """What a consumer made afresh does before it takes anything: beat at once, since another
        worker's reaper may have taken this consumer for dead while Redis was gone (or Redis may
        have come back without its heartbeat); and return to the queue the messages of a fetch
        whose reply was lost."""
        self.broker.maintenance().register(self)
        self._return_strays()

    def _return_strays(self) -> None:
        """Return to the head of the queue, uncounted, what the processing list holds beyond
        what this consumer knows it holds: the messages of a fetch that ran but whose reply
        never came, or that could not be quarantined. A consumer closed leaves them to its
        release (release.lua); this one goes on with its processing list.

        Known: the messages buffered or handed out and not finished, and the acks pending.
        Acks being flushed by an acking thread meanwhile are neither, so none is let start
        and those under way are waited for (bounded by the client's socket timeout).
        """
        with self._cond:
            self._sweeping = True
            while self._flushes:
                self._cond.wait()
            known: Counter[bytes | str] = Counter(proxy.payload for proxy in self._held.values())
            known.update(self._pending_acks)
        try:
            with connection_errors():
                listed = self.client.lrange(self.processing_key, 0, -1)
            strays = []
            for payload in reversed(listed):  # the oldest first: a fetch pushes on the left
                if known[payload] > 0:
                    known[payload] -= 1
                else:
                    strays.append(payload)
            if not strays:
                return
            with connection_errors():
                returned = self.scripts.requeue(
                    keys=[self.processing_key, self.keys.queue, self.keys.counted, self.started_key],
                    args=strays,
                )
            logger.warning(
                "Consumer of %s: %d message(s) of a fetch whose reply was lost returned to the queue.",
                self.keys.queue,
                returned,
            )
        finally:
            with self._cond:
                self._sweeping = False

    def _next(self) -> MessageProxy | None:
        deadline = time.monotonic() + self.timeout
        while True:
            with self._cond:
                if self._buffer:
                    return self._hand_out_locked()
                capacity = self.limit - self._outstanding
                # While messages are in hand, wait until a quarter of the limit is free rather
                # than fetch one message per acknowledgement: a worker thread that waits on I/O
                # per message (its started mark, `start`) hands the GIL to this thread each time.
                need = min_fetch(self.limit) if self._outstanding else 1
                acks = self._take_acks() if capacity < need else []
            if capacity < need:
                if acks:
                    self._flush(acks)
                if not self._wait_for_capacity(deadline, need):
                    return None
                continue
            with self._cond:
                acks = self._take_acks()
            payloads, crashes = self._fetch(acks, min(capacity, MAX_FETCH_BATCH))
            if payloads:
                self._accept(payloads, crashes)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._block(min(remaining, MAX_BLOCK_SECONDS)):
                return None

    def _hand_out_locked(self) -> MessageProxy:
        """The next message, or a batch of the messages held for a batched actor (batches.py)."""
        head = self._buffer.popleft()
        batching = self._batching(head)
        if batching is None:
            self._outstanding += 1
            return head
        items = [head]
        # A message lost with its worker goes in a batch of its own: should it be what kills the
        # worker (a poison pill), its next deaths are its own, not every message of a batch's.
        while (
            not head.redeliveries
            and self._buffer
            and len(items) < batching.size
            and not self._buffer[0].redeliveries
            and self._batching(self._buffer[0]) == batching
        ):
            items.append(self._buffer.popleft())
        self._outstanding += len(items)
        return ListBatchProxy(items, batching.actor_name)

    def _batching(self, proxy: ListMessageProxy) -> Batching | None:
        message = proxy.message
        # A message with an eta goes alone: Dramatiq's consumer thread delays it itself.
        if "eta" in message.options:
            return None
        name = message.actor_name
        if name not in self._batchings:
            self._batchings[name] = self.broker.batching(name)
            self._batched = self._batched or self._batchings[name] is not None
        return self._batchings[name]

    def _wait_for_capacity(self, deadline: float, need: int = 1) -> bool:
        with self._cond:
            while self._outstanding > 0 and self.limit - self._outstanding < need:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def _fetch(self, acks: list[bytes], count: int) -> tuple[list[bytes], list[Any]]:
        try:
            with connection_errors():
                result = self.channel.call(
                    self.scripts.fetch, self._fetch_keys, [count, self.job_key_field, *acks]
                )
        except ConnectionClosed:
            self._restore_acks(acks)
            raise
        payloads = list(result[0])
        crashes = list(result[1]) if len(result) > 1 else [None] * len(payloads)
        return payloads, crashes

    def _block(self, seconds: float) -> bool:
        """Wait until the queue holds a message (True) or `seconds` pass (False).

        The wait moves nothing: a BLMOVE of the queue onto itself, right end to right end,
        leaves it as it was. The message is then taken by the fetch script, which counts it
        in the job index when no producer did (a BLMOVE into the processing list would take
        it uncounted, and a crash before a second step would lose the difference). Every
        consumer waiting on the queue wakes for its first message (each one's BLMOVE puts it
        back), and one fetch takes it: a round trip per waiting consumer when an idle queue
        gets work.
        """
        with self._cond:
            self._blocking = True
            acks = self._take_acks()
        try:
            if acks:
                self._flush(acks)
            with connection_errors():
                payload = self.client.blmove(
                    self.keys.queue,
                    self.keys.queue,
                    max(seconds, 0.01),  # type: ignore[arg-type]  # Redis >= 6 takes a decimal timeout
                    "RIGHT",
                    "RIGHT",
                )
        finally:
            with self._cond:
                self._blocking = False
        return payload is not None

    def _accept(self, payloads: list[bytes], crashes: list[Any]) -> None:
        proxies = []
        invalid: list[tuple[bytes, InvalidMessage]] = []
        for payload, crashed in zip(payloads, crashes, strict=True):
            try:
                message = self.codec.decode(payload)
            except InvalidMessage as exc:
                invalid.append((payload, exc))
                continue
            except Exception as exc:
                # Whatever a codec raises on a payload, the payload is the problem: keep it
                # aside rather than let it stop the queue (it would come back to the head).
                invalid.append((payload, InvalidMessage(f"{type(exc).__name__}: {exc}")))
                continue
            proxies.append(
                ListMessageProxy(message, payload=payload, origin=self, redeliveries=int(crashed or 0))
            )
        with self._cond:
            self._buffer.extend(proxies)
            self._held.update((id(proxy), proxy) for proxy in proxies)
        # Last: should Redis fail here, what is left unquarantined is a stray (`_return_strays`).
        for payload, reason in invalid:
            self._quarantine(payload, reason)

    def _quarantine(self, payload: bytes, reason: Exception) -> None:
        logger.error(
            "Quarantining undecodable message on %s in %s: %s; payload %s",
            self.keys.queue,
            self.keys.invalid,
            reason,
            shown_payload(payload[:MAX_LOGGED_PAYLOAD]),
        )
        with connection_errors():
            # The fetch counted it if its job key could be read (the rest of it may still be
            # bad): it ends here, uncounted, and leaves no dead mark.
            self.scripts.quarantine(
                keys=[
                    self.processing_key,
                    self.keys.invalid,
                    self.keys.crashed,
                    self.keys.jobs,
                    self.keys.invalid_meta,
                ],
                args=[
                    payload,
                    self.job_key_field,
                    invalid_meta_field(payload),
                    str(reason)[:MAX_DEAD_ERROR_CHARS],
                ],
            )

    # ------------------------------------------------------------------ starting

    def start(self, proxies: list[ListMessageProxy]) -> None:
        """Mark messages as started, in one step, before their actor runs (lua/start.lua).

        Should this process die, the reaper counts a lost delivery for the started ones only:
        the messages merely prefetched beside a poison pill go back to the queue uncounted,
        as at a graceful shutdown. Raises DependencyUnavailable while Redis cannot be
        written: the message is given back uncounted (its outcome could not be recorded).
        """
        try:
            with connection_errors():
                # Not waited for (ScriptChannel.send): Redis runs it even if this process dies
                # the next instant; start.lua marks only a message still held.
                self.channel.send(
                    self.scripts.start, [self.processing_key, self.started_key], [p.payload for p in proxies]
                )
        except ConnectionClosed as exc:
            raise DependencyUnavailable(
                f"Redis: could not mark the message started ({exc.__cause__ or exc})"
            ) from exc

    # ------------------------------------------------------------------ outcomes

    def ack(self, message: MessageProxy) -> None:
        # A batch's item that failed for good (Dramatiq's backoff used up) is rejected alone, the
        # rest acknowledged together (one lock, one wake-up). On a Redis error Dramatiq acks the
        # batch again; the items already recorded are settled, so nothing is recorded twice.
        plain: list[ListMessageProxy] = []
        for proxy in _each(message):
            if proxy.failed:
                _reject(proxy)
            elif not _record_deferred(proxy):
                plain.append(proxy)
        if plain:
            plain[0]._origin._ack(plain)

    def nack(self, message: MessageProxy) -> None:
        for proxy in _each(message):
            _reject(proxy)

    def _ack(self, proxies: list[ListMessageProxy]) -> None:
        """Acknowledge messages of this consumer (one, or a batch's) whose outcome is success."""
        plain = []
        for proxy in proxies:
            if proxy.settled:
                continue
            if proxy.redeliveries:
                # Rare: also clears the payload's crash count, in the same step.
                self.settle(proxy, "ack", "")
            else:
                plain.append(proxy)
        if not plain:
            return
        with self._cond:
            finishing = [proxy for proxy in plain if not proxy._finished]
            self._finish_locked(*finishing, notify=False)
            self._pending_acks.extend(proxy.payload for proxy in finishing)
            self._cond.notify_all()
            flush_now = not self._sweeping and (
                self._blocking or self.closed or len(self._pending_acks) >= ACK_FLUSH_THRESHOLD
            )
            acks = self._take_acks() if flush_now else []
            if acks:
                self._flushes += 1
        if acks:
            try:
                self._flush(acks)
            finally:
                with self._cond:
                    self._flushes -= 1
                    if self._sweeping:
                        self._cond.notify_all()
        self._release_if_done()

    def settle(
        self,
        proxy: ListMessageProxy,
        mode: str,
        new_payload: str | bytes,
        delay_ms: int = 0,
        *,
        unconfirmed: bool = False,
    ) -> bool:
        """Record the outcome of one message in one atomic step (see lua/settle.lua).

        Returns False when the message was no longer ours (a reaper gave it back to the
        queue after this process was presumed dead): then nothing is scheduled twice.
        """
        target = {"delay": self.keys.delayed, "push": self.keys.dead, "ack": self.keys.dead}[mode]
        member_prefix = secrets.token_hex(8) + "|"
        with connection_errors():
            held = self.scripts.settle(
                keys=[self.processing_key, target, self.keys.crashed, self.keys.jobs, self.started_key],
                args=[
                    proxy.payload,
                    mode,
                    new_payload,
                    delay_ms,
                    member_prefix,
                    self.job_key_field,
                    "1" if unconfirmed else "0",
                ],
            )
        with self._cond:
            if not proxy._finished:
                self._finish_locked(proxy)
            if held:
                proxy.settled_as = mode
        if mode == "delay":
            self.broker.delay_scheduled(delay_ms)
        self._release_if_done()
        return bool(held)

    def dead_entry(
        self, proxy: ListMessageProxy, error: BaseException | str | None, attempts: int | None
    ) -> str | bytes:
        """What the dead-letter list gets for `proxy`: its message with the `dead_letter` option."""
        marked = proxy.message.copy(
            options={**proxy.message.options, DEAD_LETTER_OPTION: dead_letter_option(error, attempts)}
        )
        try:
            return self.codec.encode(marked)
        except Exception:
            # The payload was readable, so keep it as it came rather than lose it.
            logger.warning("Could not annotate the dead letter %s; kept verbatim.", proxy, exc_info=True)
            return proxy.payload

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        """Return messages handed out but never started (shutdown); no attempt is counted."""
        by_origin: dict[RedisListConsumer, list[ListMessageProxy]] = {}
        for message in messages:
            for proxy in _each(message):
                by_origin.setdefault(proxy._origin, []).append(proxy)
        for origin, proxies in by_origin.items():
            origin._requeue(proxies)

    def _requeue(self, proxies: list[ListMessageProxy]) -> None:
        with self._cond:
            proxies = [p for p in proxies if not p._finished]
        if not proxies:
            return
        with connection_errors():
            self.scripts.requeue(
                keys=[self.processing_key, self.keys.queue, self.keys.counted, self.started_key],
                args=[p.payload for p in proxies],
            )
        with self._cond:
            self._finish_locked(*[proxy for proxy in proxies if not proxy._finished])
        self._release_if_done()

    def _finish_locked(self, *proxies: ListMessageProxy, notify: bool = True) -> None:
        """Record `proxies` finished now, and the pace: the messages of a batch, acknowledged
        together, share the interval since the last finish (each counts its part of it), so a
        batch's pace is its messages' and not one slow interval followed by instant ones."""
        if not proxies:
            return
        for proxy in proxies:
            proxy._finished = True
            self._held.pop(id(proxy), None)
        self._outstanding -= len(proxies)
        now = time.monotonic()
        if self._last_finish is not None:
            # An idle spell counts as one slow interval, not as a pace to unlearn for long.
            gap = min((now - self._last_finish) / len(proxies), PREFETCH_HOLD_SECONDS)
            # The moving average after len(proxies) intervals of `gap` each.
            kept = (1 - PACE_WEIGHT) ** len(proxies)
            self._pace = gap if self._pace is None else gap + (self._pace - gap) * kept
            self.limit = adaptive_prefetch(self.prefetch, self._pace, batched=self._batched)
        self._last_finish = now
        if notify:
            self._cond.notify_all()

    def _take_acks(self) -> list[bytes]:
        acks, self._pending_acks = self._pending_acks, []
        return acks

    def _restore_acks(self, acks: list[bytes]) -> None:
        with self._cond:
            self._pending_acks[:0] = acks

    def _flush(self, acks: list[bytes]) -> None:
        """Record acknowledgements; on a Redis error keep them for the next attempt."""
        try:
            self._fetch(acks, 0)
        except ConnectionClosed as exc:
            self._writes.failed(exc.__cause__ or exc)  # kept: the next fetch or flush records them
            return
        self._writes.succeeded()

    # ------------------------------------------------------------------ lifecycle

    def stop_fetching(self) -> None:
        """The worker is shutting down: fetch and hand out nothing more.

        The consumer thread's next `__next__` gives the buffer back and sets `drained`;
        from then on it only records acks and returns None once per poll interval.
        """
        self.stopped = True
        self._stopping.set()

    def _idle_while_stopped(self) -> None:
        self._give_back_buffer()
        with self._cond:
            acks = self._take_acks()
        if acks:
            self._flush(acks)
        self.drained = True
        # While Redis fails, what is left to write is tried again with backoff, not every poll.
        time.sleep(max(min(self.timeout, STOPPED_POLL_SECONDS), self._writes.delay))

    def close(self) -> None:
        """Give back what was fetched but never handed out; release the list once nothing is in flight.

        Messages still being processed keep the consumer registered (and heartbeating)
        until their outcome is recorded. If Redis is unreachable, the broker's
        maintenance thread retries the release.
        """
        with self._cond:
            self.closed = True
        self._stopping.set()
        self._give_back_buffer()
        self._release_if_done()

    def _give_back_buffer(self) -> None:
        """Return the messages fetched but never handed out to the head of the queue."""
        with self._cond:
            unstarted = list(self._buffer)
            self._buffer.clear()
            self._outstanding += len(unstarted)
        if unstarted:
            try:
                self._requeue(unstarted)
            except ConnectionClosed as exc:
                # Keep them buffered; the maintenance thread calls try_release again.
                with self._cond:
                    left = [p for p in unstarted if not p._finished]
                    self._outstanding -= len(left)
                    self._buffer.extend(left)
                self._writes.failed(exc.__cause__ or exc)
                return
            self._writes.succeeded()

    def _release_if_done(self) -> None:
        with self._cond:
            if not self.closed or self.released or self._outstanding > 0:
                return
            acks = self._take_acks()
        try:
            with self.broker.releasing(self), connection_errors():
                self.scripts.release(
                    keys=[
                        self.processing_key,
                        self.keys.queue,
                        self.heartbeats_key,
                        self.keys.jobs,
                        self.keys.counted,
                        self.started_key,
                    ],
                    args=[self.job_key_field, *acks],
                )
        except ConnectionClosed:
            self._restore_acks(acks)
            return
        with self._cond:
            self.released = True
        self.channel.close()

    def try_release(self) -> None:
        """Called periodically by the maintenance thread for closed consumers."""
        if self.closed and not self.released:
            with self._cond:
                unstarted = list(self._buffer)
            if unstarted:
                self.close()
            else:
                self._release_if_done()


def _reject(proxy: ListMessageProxy) -> None:
    if not _record_deferred(proxy) and not proxy.settled:
        proxy.dead_letter()


def _each(message: MessageProxy) -> list[ListMessageProxy]:
    """The messages of this broker that `message` stands for: itself, or a batch's items."""
    if isinstance(message, ListBatchProxy):
        return message.items
    if not isinstance(message, ListMessageProxy):
        raise TypeError(f"not a message of this broker: {message!r}")
    return [message]
