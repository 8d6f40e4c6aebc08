"""The worker's observer: a Dramatiq middleware that counts jobs, times them and beats.

For each attempt it updates the Prometheus metrics (observability/prometheus.py) and, for
report jobs, the counters of the operators' charts (observability/throughput.py), and it
tells the worker process's heartbeat (observability/heartbeat.py) which jobs are
running. The per-minute counts are kept in memory and written once a second (and at
shutdown) by a thread of their own, in one round trip: a job never waits on them (a
round trip per job measurably delayed retries under load: tests/integration/test_retries.py).
While Redis fails, the counts are kept and the writes back off (broker/src/listbroker/backoff.py).

It must come before `ExactRetries` in the middleware list: Dramatiq calls the `after_`
hooks in reverse order, so this one runs once ExactRetries has settled the message, and
reads from the proxy (`settled_as`) whether the failure was retried or dead-lettered
rather than repeating ExactRetries' arithmetic. A job ExactRetries dead-letters on
arrival (its attempts used up by crashed workers) is skipped, and counted dead here.

The jobs of a batch come here one by one, each with its own outcome (the broker hands each
message of a batch to the middleware on its own: broker/src/listbroker/batchhooks.py), so
nothing here knows batches: a worker thread running a batch is one busy thread in the
heartbeat, since `Activity` counts threads.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import redis
from dramatiq.middleware import Middleware
from listbroker import Backoff, DependencyUnavailable, ListMessageProxy

from observability import prometheus as metrics
from observability.heartbeat import Activity, Heartbeat
from observability.logs import JobContext, job_context
from observability.throughput import Outcome, add_counts, minute_start
from redis_adapters.queues import REPORT_ACTOR_NAME, REPORT_QUEUE_NAME

logger = logging.getLogger(__name__)

#: How often the per-minute counts are written to Redis.
FLUSH_INTERVAL_S = 1.0
#: Longest pause between two writes while they fail (the counts wait in memory meanwhile).
FLUSH_MAX_BACKOFF_S = 10.0


def describe(message: Any) -> str:
    """What a job is, in a heartbeat: `report 42` for the report actor, else `<actor> <first arg>`.
    (A worker thread running a batch runs all its jobs at once: the heartbeat's Activity shows
    the thread's first and how many more, `report 42 (+31)`.)"""
    name = "report" if message.actor_name == REPORT_ACTOR_NAME else message.actor_name
    return f"{name} {message.args[0]}" if message.args else name


@contextlib.contextmanager
def in_job_context(message: ListMessageProxy) -> Iterator[None]:
    """Within it, log lines carry the ids of `message` (e.g. one of a batch's, in its batch function)."""
    token = job_context.set(job_of(message))
    try:
        yield
    finally:
        job_context.reset(token)


def job_of(message: dramatiq.Message[Any] | ListMessageProxy) -> JobContext:
    """The ids a job's log lines carry: its message id and, for the report actor, the record id."""
    record_id = message.args[0] if message.actor_name == REPORT_ACTOR_NAME and message.args else None
    return JobContext(message.message_id, record_id if isinstance(record_id, int) else None)


class _Running:
    __slots__ = ("context", "series", "started", "token")

    def __init__(
        self, token: object, context: contextvars.Token[JobContext | None], series: metrics.ActorMetrics
    ) -> None:
        self.token = token
        self.context = context
        self.series = series
        self.started = time.perf_counter()


class JobObserver(Middleware):
    def __init__(self) -> None:
        self.activity = Activity(describe)
        self._heartbeat: Heartbeat | None = None
        #: By the proxy's identity (two deliveries of one message id may run at once); one
        #: set or pop of a dict needs no lock of ours.
        self._running: dict[int, _Running] = {}
        #: Each actor's series, looked up once (a lookup takes a lock per metric).
        self._series: dict[tuple[str, str], metrics.ActorMetrics] = {}
        self._lock = threading.Lock()
        self._counts: collections.Counter[tuple[int, Outcome]] = collections.Counter()
        self._client: redis.Redis | None = None
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._backoff = Backoff(
            "Throughput counts", logger, first_s=FLUSH_INTERVAL_S, max_s=FLUSH_MAX_BACKOFF_S
        )

    # ------------------------------------------------------------------ process

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        client: redis.Redis | None = getattr(broker, "client", None)
        if client is None:
            return  # not a RedisListBroker: metrics only
        self._client = client
        threads = int(getattr(worker, "worker_threads", 0) or 0)
        self._heartbeat = Heartbeat(
            client, "worker", self.activity, load=lambda: (self.activity.busy(), threads)
        ).start()
        self._stop.clear()
        self._flusher = threading.Thread(target=self._flush_every_second, name="throughput", daemon=True)
        self._flusher.start()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # After the last job ended (a graceful stop lets jobs finish, beating meanwhile):
        # its outcome is in the final flush, and `stopped` is the last beat.
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(5)
            self._flusher = None
        self.flush()

    # ------------------------------------------------------------------ jobs

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        # One call per message, a batched one's too (the broker's seam runs each in a context of
        # its own: the job context set here is that message's until its after_process_message).
        series = self._series_of(message)
        series.messages.inc()
        series.inprogress.inc()
        self._running[id(message)] = _Running(
            self.activity.begin(message), job_context.set(job_of(message)), series
        )

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        running = self._finish(message)
        if running is None:
            series = self._series_of(message)
        else:
            series = running.series
            series.inprogress.dec()
            series.duration_ms.observe((time.perf_counter() - running.started) * 1000)
        if exception is None:
            self._count(message, Outcome.PROCESSED)
        else:
            self._count(message, *self._outcomes(message, exception, series))

    def _series_of(self, message: Any) -> metrics.ActorMetrics:
        key = (message.queue_name, message.actor_name)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metrics.for_actor(*key)
        return series

    def _outcomes(
        self, message: Any, exception: BaseException | None, series: metrics.ActorMetrics
    ) -> list[Outcome]:
        """The chart's outcomes of one attempt, its failure metrics incremented."""
        if exception is None:
            return [Outcome.PROCESSED]
        if isinstance(exception, DependencyUnavailable):
            # Not an attempt: the job went back to its queue uncounted (broker/src/listbroker/gate.py).
            return []
        series.errors.inc()
        outcomes = [Outcome.FAILED]
        settled_as = message.settled_as if isinstance(message, ListMessageProxy) else None
        if settled_as == "delay":
            series.retries.inc()
            outcomes.append(Outcome.RETRIED)
        elif settled_as == "push":
            series.rejects.inc()
            outcomes.append(Outcome.DEAD)
        return outcomes

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        running = self._finish(message)
        series = self._series_of(message)
        if running is not None:
            series.inprogress.dec()
        self._count(message, *self._skipped(message, series))

    def _skipped(self, message: Any, series: metrics.ActorMetrics) -> list[Outcome]:
        """A message settled without running: a dead letter counts as one (a poison pill)."""
        if isinstance(message, ListMessageProxy) and message.settled_as == "push":
            series.rejects.inc()
            return [Outcome.DEAD]
        return []

    def _finish(self, message: Any) -> _Running | None:
        running = self._running.pop(id(message), None)
        if running is None:
            return None  # skipped before this middleware's before_process_message ran
        self.activity.end(running.token)
        # Not contextlib.suppress: a context manager per job costs more than the reset itself.
        try:  # noqa: SIM105
            job_context.reset(running.context)
        except ValueError:
            pass  # set in another thread's context: nothing to undo here
        return running

    def _count(self, message: Any, *outcomes: Outcome) -> None:
        """Count a report job's outcomes for the console's charts: admin tasks are not reports
        (Prometheus counts every actor, by its labels)."""
        if not outcomes or message.queue_name != REPORT_QUEUE_NAME:
            return
        minute = minute_start(time.time())
        with self._lock:
            for outcome in outcomes:
                self._counts[minute, outcome] += 1

    def _flush_every_second(self) -> None:
        while not self._stop.wait(max(FLUSH_INTERVAL_S, self._backoff.delay)):
            self.flush()

    def flush(self) -> None:
        """Write the counts gathered since the last flush; kept for the next one if Redis fails."""
        if self._client is None:
            return
        with self._lock:
            counts, self._counts = self._counts, collections.Counter()
        try:
            add_counts(self._client, counts)
        except (redis.RedisError, OSError) as exc:
            with self._lock:
                self._counts.update(counts)
            self._backoff.failed(exc)
            return
        self._backoff.succeeded()
