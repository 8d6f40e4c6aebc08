"""Retry timing as the product records it, for the tests of the exact 10/30/60 s schedule.

`RetryClock` is a worker middleware: for each attempt of a report job it keeps when the
worker began and ended it (its wall clock, ms) and the due time the broker recorded for
the retry that attempt's failure scheduled (the score of the job in the delayed set,
computed by the settle script from Redis's clock). `assert_schedule` then checks, for each
failure k:

- the delay is exact: the due time is `delay` after a moment within attempt k (the settle
  happens between its start and its end), whatever the load;
- the retry never runs early: attempt k + 1 begins at or after the due time;
- it runs on time: at most `LATENESS_S` after the due time (README: measured lateness
  <= 0.25 s), both timestamps taken by the worker and the broker, none by the test's
  polling, so a test thread starved by a loaded machine cannot skew them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import cast

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from listbroker import ExactRetries
from listbroker.scripts import DELAYED_PREFIX_LEN

from redis_adapters.queues import REPORT_DELAYED_KEY
from redis_adapters.report_message import ReportQueueMessage

#: The documented lateness of a retry (docs/queue.md, "Exact retries").
LATENESS_S = 0.25
#: Redis's clock and the worker's are read in whole milliseconds.
ROUNDING_MS = 2


@dataclass
class Attempt:
    retry_count: int
    started_ms: float
    ended_ms: float = 0.0
    #: When the retry this attempt's failure scheduled is due (None: no retry scheduled).
    due_ms: float | None = None


def _now_ms() -> float:
    return time.time() * 1000


class RetryClock(dramatiq.Middleware):
    """Add it before ExactRetries (`install`): its after-hook then runs once the retry is scheduled."""

    def __init__(self, client: redis.Redis, delayed_key: str = REPORT_DELAYED_KEY) -> None:
        self.client = client
        self.delayed_key = delayed_key
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._current: dict[str, Attempt] = {}

    def install(self, broker: dramatiq.Broker) -> RetryClock:
        broker.add_middleware(self, before=ExactRetries)
        return self

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        # A batch's messages each come here on their own (broker/src/listbroker/batchhooks.py).
        attempt = Attempt(int(message.options.get("retry_count", 0)), _now_ms())
        with self._lock:
            self._current[message.message_id] = attempt
            self.attempts.append(attempt)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: object = None,
        exception: BaseException | None = None,
    ) -> None:
        ended_ms = _now_ms()
        entries = cast(
            list[tuple[bytes, float]], self.client.zrange(self.delayed_key, 0, -1, withscores=True)
        )
        with self._lock:
            attempt = self._current.pop(message.message_id)
        attempt.ended_ms = ended_ms
        record_id = message.args[0]
        for member, score in entries:
            job = ReportQueueMessage.decode(member[DELAYED_PREFIX_LEN:])
            if job.record_id == record_id and job.retry_count == attempt.retry_count + 1:
                attempt.due_ms = score


def assert_schedule(attempts: list[Attempt], delays_ms: tuple[int, ...] | list[int]) -> None:
    """Each failure's retry was due exactly its delay later, and ran then (see the module)."""
    assert [a.retry_count for a in attempts] == list(range(len(delays_ms) + 1)), attempts
    for k, delay_ms in enumerate(delays_ms):
        failed, retried = attempts[k], attempts[k + 1]
        assert failed.due_ms is not None, f"attempt {k} scheduled no retry: {attempts}"
        failed_at = failed.due_ms - delay_ms
        assert failed.started_ms - ROUNDING_MS <= failed_at <= failed.ended_ms + ROUNDING_MS, (k, attempts)
        lateness_ms = retried.started_ms - failed.due_ms
        assert -ROUNDING_MS <= lateness_ms <= LATENESS_S * 1000, (k, lateness_ms, attempts)
