"""Give prefetched messages back as soon as a worker starts shutting down.

Dramatiq's `Worker.stop` returns the messages that were fetched but never started only
after the messages in flight have finished. A Procfile runner does not wait that long
(honcho kills 5 s after SIGTERM, systemd after its stop timeout): the prefetched
messages would then wait for the reaper (a minute) and each count a lost delivery
although it never ran. This middleware returns them at the start of the shutdown: our
consumers stop fetching and give back their buffers, and the messages queued inside
the worker go back to the head of their queue, without counting an attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from queue import Empty
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from listbroker.consumer import RedisListConsumer

logger = logging.getLogger(__name__)

#: Longest wait for the consumer threads to see the stop (they look at least once per
#: worker timeout, 1 s by default).
DRAIN_WAIT_SECONDS = 5.0
DRAIN_POLL_SECONDS = 0.02


class RequeueOnShutdown(Middleware):
    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        stop_consuming = getattr(broker, "stop_consuming", None)
        if stop_consuming is not None:
            stop_consuming()  # a consumer Dramatiq starts again from now on hands out nothing
        threads = dict(getattr(worker, "consumers", {}))
        consumers = [t.consumer for t in threads.values() if isinstance(t.consumer, RedisListConsumer)]
        if not consumers:
            return
        for consumer in consumers:
            consumer.stop_fetching()
        # Until a consumer thread has seen the stop, it may still hand over a message it
        # had fetched; after that, nothing more reaches the worker's queue.
        deadline = time.monotonic() + DRAIN_WAIT_SECONDS
        while not all(c.drained for c in consumers) and time.monotonic() < deadline:
            self._requeue_unstarted(worker, threads)
            time.sleep(DRAIN_POLL_SECONDS)
        self._requeue_unstarted(worker, threads)

    def _requeue_unstarted(self, worker: Any, threads: dict[str, Any]) -> None:
        unstarted: dict[str, list[Any]] = defaultdict(list)
        while True:
            try:
                item = worker.work_queue.get_nowait()
            except Empty:
                break
            unstarted[item.message.queue_name].append(item.message)
            worker.work_queue.task_done()
        for queue_name, messages in unstarted.items():
            try:
                threads[queue_name].requeue_messages(messages)
                logger.info("Returned %d unstarted message(s) to %s.", len(messages), queue_name)
            except Exception:
                # They stay in the processing list; the reaper returns them once this process is gone.
                logger.warning("Could not return unstarted messages to %s.", queue_name, exc_info=True)


#: How long a worker process may spend on its shutdown once its jobs are done.
DEFAULT_EXIT_GRACE_SECONDS = 10.0


class ShutdownDeadline(Middleware):
    """Bound a worker process's shutdown once its jobs are done.

    Dramatiq's `Worker.stop` waits for the jobs in flight (its shutdown timeout), then stops the
    consumers, gives back what they hold and releases their processing lists: Redis calls,
    each waiting out its socket timeout while Redis hangs, one after another (a worker took
    50 s to stop, with no job in flight). `grace_s` after the last worker thread has ended,
    a process still shutting down exits at once: what it still held stays in its processing
    list, which the reaper gives back once its heartbeat lapses, as for a killed worker.

    Added first (`add_middleware(..., before=type(broker.middleware[0]))`): Dramatiq runs the
    `after_` hooks in reverse, so its `after_worker_shutdown`, which calls the deadline off, is
    then the last step of `Worker.stop`.
    For a worker process only (`exit` ends the whole process): not for a worker run inside
    another program, a test's.
    """

    def __init__(
        self, grace_s: float = DEFAULT_EXIT_GRACE_SECONDS, *, exit: Callable[[int], object] = os._exit
    ) -> None:
        self.grace_s = grace_s
        self._exit = exit
        self._done = threading.Event()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        threading.Thread(
            target=self._watch,
            args=(list(getattr(worker, "workers", [])),),
            name="shutdown-deadline",
            daemon=True,
        ).start()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        self._done.set()

    def _watch(self, threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join()  # the jobs in flight: Dramatiq's own shutdown timeout bounds them
        if self._done.wait(self.grace_s):
            return
        logger.error(
            "Worker shutdown still under way %.0f s after its last job ended (Redis not answering?); "
            "exiting now: what this process held is given back by the reaper.",
            self.grace_s,
        )
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        self._exit(0)
