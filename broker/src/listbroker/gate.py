"""Hold messages while a dependency is down, instead of spending their attempts on it.

An actor that cannot even begin its work because a dependency is unreachable (e.g.
its database refuses the connection) raises `DependencyUnavailable`. That
is not an attempt: `ExactRetries` gives the message back to the head of its queue
uncounted, and this middleware closes its gate. While the gate is closed, worker
threads about to run a message of a gated queue wait (the message stays in the
consumer's processing list, safe from loss; the consumer stops fetching once its
prefetch is held) and a probe is retried with backoff; the first success opens the
gate and the waiting messages run. Retries that fall due meanwhile are released to the
queue by the broker as usual and wait there. Attempts already running when the
dependency went down fail and follow the retry schedule as any failure does.

Place it first in the middleware list: its wait must come before TimeLimit starts a
message's clock, and its after-hook runs last (Dramatiq calls after-hooks in reverse).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from listbroker.backoff import Backoff
from listbroker.consumer import ListMessageProxy
from listbroker.errors import DependencyUnavailable

logger = logging.getLogger(__name__)

#: Default of `min_backoff_s`: the first pause between two probes of a closed gate
#: (doubled after each failed probe).
DEFAULT_MIN_BACKOFF_S = 0.5
#: Default of `max_backoff_s`: the longest pause between two probes.
DEFAULT_MAX_BACKOFF_S = 5.0

Probe = Callable[[], bool]


class AvailabilityGate(Middleware):
    """Parameters:
    probe: returns True when the dependency answers (it may raise: counts as down).
    queues: the queues whose messages need the dependency (None: all).
    """

    def __init__(
        self,
        probe: Probe,
        *,
        queues: Collection[str] | None = None,
        min_backoff_s: float = DEFAULT_MIN_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
    ) -> None:
        self.probe = probe
        self.queues = None if queues is None else frozenset(queues)
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self._cond = threading.Condition()
        self._open = True
        self._shutting_down = False
        #: Seconds until the next probe of a closed gate.
        self._wait = min_backoff_s
        self._prober: threading.Thread | None = None
        #: The probes' pauses and their log: the closing once, a summary while the
        #: dependency stays down, the reopening (backoff.py).
        self._backoff = Backoff(
            "Dependency unavailable, messages held",
            logger,
            first_s=min_backoff_s,
            max_s=max_backoff_s,
        )
        #: Times the gate closed (for logs and tests).
        self.closings = 0

    @property
    def is_open(self) -> bool:
        with self._cond:
            return self._open

    def close(self, reason: object) -> None:
        with self._cond:
            if not self._open:
                return
            self._open = False
            self.closings += 1
            # The closing is the first failure: logged once, with its reason.
            self._wait = self._backoff.failed(reason)
            if self._prober is None or not self._prober.is_alive():
                self._prober = threading.Thread(
                    target=self._probe_until_open, name="availability-gate", daemon=True
                )
                self._prober.start()

    def _probe_until_open(self) -> None:
        while True:
            with self._cond:
                if self._shutting_down:
                    return
                self._cond.wait(self._wait)
                if self._shutting_down:
                    return
            error: object = "the probe answered no"
            try:
                up = bool(self.probe())
            except Exception as exc:
                error, up = exc, False
            if up:
                with self._cond:
                    self._open = True
                    self._cond.notify_all()
                self._backoff.succeeded()  # "recovered after N failed attempt(s) / T s"
                return
            self._wait = self._backoff.failed(error)

    def _gated(self, message: Any) -> bool:
        return self.queues is None or message.queue_name in self.queues

    # ------------------------------------------------------------------ hooks

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        if not self._gated(message):
            return
        with self._cond:
            while not self._open and not self._shutting_down:
                self._cond.wait()
            if self._open:
                return
        # Shutting down while the dependency is down: the message never ran; give it back.
        if isinstance(message, ListMessageProxy):
            message.give_back()
        raise SkipMessage("worker stopping while a dependency is down; message returned to its queue")

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        # A batch's messages come one by one, each with its own outcome (batchhooks.py).
        if isinstance(exception, DependencyUnavailable):
            self.close(exception)
