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

import logging
import time
from collections import defaultdict
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
            stop_consuming()  # a consumer restart waiting out its backoff must not delay the stop
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
