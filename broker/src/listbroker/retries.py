"""Retries that are exact, atomic, and bound deliveries lost with their worker.

Replaces Dramatiq's `Retries` middleware on a `RedisListBroker`:

- An actor with the option `retry_delays=(d1, d2, ...)` (milliseconds) is retried on
  exactly that schedule: a failure of attempt k (k = 1, 2, ...) re-queues the message
  after d_k with its retry count k, and a failure once the schedule is used up moves it
  verbatim to the queue's dead-letter list after calling the actor's `on_dead_letter`
  hook (whose failure is logged and does not stop the dead-lettering; the job index
  keeps a `dead` mark so a reconciler can finish what the hook could not). A hook that
  returns False leaves its follow-up on purpose (another job of the same key is alive and
  decides): the mark is kept only if this was the key's last job after all. The retry
  count travels in `options["retry_count"]`, which a queue's codec may write into its
  own wire format.
- An actor that raises `DependencyUnavailable` did not make an attempt: the message goes
  back to the head of its queue, uncounted (see gate.py).
- Other actors keep Dramatiq's semantics (max_retries, min/max_backoff with jitter,
  retry_when, throws, on_retry_exhausted).
- Recording the failure and scheduling the retry (or dead-lettering) is one atomic
  Redis step, so no crash can duplicate or lose the message (Dramatiq #431/#545).
- Deliveries lost to a dead worker are counted apart from failures (the retry count counts
  failed attempts only): a worker killed under a job says nothing sure about the job, and
  must not cost it a step of its schedule. Only a delivery that had started counts: the
  broker marks each message started in Redis once its middleware let it through, before its
  actor runs (a batch's messages all at once: broker.py, batchhooks.py), and the reaper counts
  a lost delivery for the marked ones only; the jobs merely prefetched beside a poison pill go
  back to their queue uncounted, as at a graceful shutdown. A message lost more than
  `max_lost_deliveries` times is dead-lettered on arrival as a poison pill (it may be what
  kills its worker) instead of looping forever, as Sidekiq Pro's super_fetch does with a
  job recovered more than 3 times.

Without `retry_delays` the count lives in `options["retries"]`, as with Dramatiq's own.

Logs: for an actor on an exact schedule, one line per failed attempt (the error, the
attempt, the retry), the traceback once, with the dead letter. Every failure of such an
actor is expected (its `throws` is `EVERY_FAILURE`, set when it is declared on a
`RedisListBroker`), so Dramatiq's worker logs it in one INFO line without a traceback, not
as an error with the traceback of every attempt; the schedule does not read `throws`, so
it stops no retry.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import dramatiq
from dramatiq.common import compute_backoff
from dramatiq.errors import ConnectionClosed, Retry
from dramatiq.middleware import Retries, SkipMessage
from dramatiq.middleware.retries import DEFAULT_MAX_BACKOFF

from listbroker.broker import RedisListBroker
from listbroker.consumer import ListMessageProxy
from listbroker.deadletters import DEAD_LETTER_OPTION
from listbroker.errors import DependencyUnavailable

logger = logging.getLogger(__name__)

#: Deliveries of one message that may be lost with their worker (killed, its host gone)
#: before the next arrival dead-letters it as a poison pill. Apart from the failure budget.
DEFAULT_MAX_LOST_DELIVERIES = 3
#: Set in a message's options when it is dead-lettered for its lost deliveries (their
#: number), so that an `on_dead_letter` hook can tell a poison pill from a failed job.
LOST_DELIVERIES_OPTION = "lost_deliveries"

#: Signature of the `on_dead_letter` actor option: called with the message before it is
#: dead-lettered. False: its follow-up was left to the key's last job (or, should this one be
#: the last by the time it is recorded, to a reconciler, through the index's `dead` mark).
DeadLetterHook = Callable[[dramatiq.Message[Any]], bool | None]


#: The `throws` of an actor on an exact schedule (`ExactRetries.after_declare_actor`).
EVERY_FAILURE: tuple[type[BaseException], ...] = (BaseException,)


def describe_error(error: BaseException | str) -> str:
    """`Type: message`, on one line."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return " ".join(text.split())


class ExactRetries(Retries):
    def __init__(self, *, max_lost_deliveries: int = DEFAULT_MAX_LOST_DELIVERIES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_lost_deliveries = max_lost_deliveries

    @property
    def actor_options(self) -> set[str]:
        return set(super().actor_options) | {"retry_delays", "on_dead_letter"}

    # ------------------------------------------------------------------ hooks

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        """An actor on an exact schedule expects every failure (Dramatiq's `throws`): each failed
        attempt is then one INFO line of Dramatiq's worker without a traceback, beside this
        middleware's line. Its own `throws` would say nothing more: the schedule retries every
        failure. On a `RedisListBroker` only, where the schedule applies; elsewhere such an
        actor keeps Dramatiq's retries, which `throws` would stop."""
        if isinstance(broker, RedisListBroker) and actor.options.get("retry_delays") is not None:
            actor.options["throws"] = EVERY_FAILURE

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        # A message the broker then marks started (broker.py): first, one that must not run.
        if isinstance(message, ListMessageProxy) and self._refuse(broker, message):
            raise SkipMessage("refused on arrival")

    def _refuse(self, broker: dramatiq.Broker, message: ListMessageProxy) -> bool:
        """Settle `message` if it must not run (True): a dead letter moved back by hand, a poison pill."""
        if message.options.get(DEAD_LETTER_OPTION):
            # A dead letter moved back by hand (LMOVE): running it would at best be skipped
            # by the actor and the entry lost. Refuse it loudly and keep it where it was.
            logger.error(
                "Message %s is a dead letter (%s) moved back to the queue by hand; returned "
                "to the dead-letter list. Requeue dead letters with the operations tooling, "
                "which resets them.",
                message,
                message.options[DEAD_LETTER_OPTION],
            )
            message.return_to_dead()
            return True
        lost = message.redeliveries
        if lost > self.max_lost_deliveries:
            actor = broker.get_actor(message.actor_name)
            logger.error(
                "Message %s was lost with its worker %d times (more than %d); dead-lettering it "
                "as a poison pill.",
                message,
                lost,
                self.max_lost_deliveries,
            )
            message.options[LOST_DELIVERIES_OPTION] = lost
            self._dead_letter(
                message,
                actor,
                f"lost with its worker {lost} times",
                self._failed_attempts(message, actor) + lost,
            )
            return True
        return False

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if exception is None:
            return
        if not isinstance(message, ListMessageProxy):
            super().after_process_message(broker, message, result=result, exception=exception)  # type: ignore[no-untyped-call]
            return
        self._after_attempt(broker, message, exception)

    def _after_attempt(
        self, broker: dramatiq.Broker, message: ListMessageProxy, exception: BaseException | None
    ) -> None:
        if exception is None or message.settled or message.recording_deferred:
            return
        try:
            self._record_failure(broker, message, exception)
        except ConnectionClosed as exc:
            # Kept on the message (consumer.py, `_unrecorded`): its acknowledgement, which
            # Dramatiq repeats until Redis answers, records it. One line, not Dramatiq's
            # CRITICAL with a traceback: a Redis outage is expected.
            logger.warning(
                "Message %s: its outcome could not be recorded (%s); its acknowledgement will.",
                message,
                exc.__cause__ or exc,
            )

    def _record_failure(
        self, broker: dramatiq.Broker, message: ListMessageProxy, exception: BaseException
    ) -> None:
        if isinstance(exception, DependencyUnavailable):
            # The actor found a dependency down before it did anything: not an attempt.
            message.give_back()
            logger.warning(
                "Message %s could not start (%s); returned to its queue uncounted.", message, exception
            )
            return
        actor = broker.get_actor(message.actor_name)
        delays: Sequence[int] | None = actor.options.get("retry_delays")
        if delays is not None:
            self._retry_on_schedule(message, actor, delays, exception)
        else:
            self._retry_with_backoff(message, actor, exception)

    # ------------------------------------------------------------------ exact schedule

    def _retry_on_schedule(
        self,
        message: ListMessageProxy,
        actor: dramatiq.Actor[Any, Any],
        delays: Sequence[int],
        exception: BaseException,
    ) -> None:
        failed = self._failed_attempts(message, actor) + 1  # this attempt included
        error = describe_error(exception)
        if failed > len(delays) + 1:
            # Pushed with a retry count past the schedule (by hand, or by another producer):
            # "attempt 100 of 4" would misstate what ran.
            logger.error(
                "Message %s failed (%s) with retry count %d, over the limit of %d; dead-lettering it.",
                message,
                error,
                failed - 1,
                len(delays),
                exc_info=exception,
            )
            self._dead_letter(message, actor, exception, failed + message.redeliveries)
            return
        if failed > len(delays):
            logger.error(
                "Message %s failed (attempt %d of %d: %s); dead-lettering it.",
                message,
                failed,
                len(delays) + 1,
                error,
                exc_info=exception,
            )
            self._dead_letter(message, actor, exception, failed + message.redeliveries)
            return
        delay = delays[failed - 1]
        retried = message.message.copy(options={**message.options, "retry_count": failed})
        if message.retry_later(retried, delay):
            logger.warning(
                "Message %s failed (attempt %d of %d: %s); retry %d in %d ms.",
                message,
                failed,
                len(delays) + 1,
                error,
                failed,
                delay,
            )
        else:
            logger.warning(
                "Message %s failed (%s) and was returned to the queue while it ran; not retried twice.",
                message,
                error,
            )

    # ------------------------------------------------------------------ Dramatiq's backoff

    def _retry_with_backoff(
        self, message: ListMessageProxy, actor: dramatiq.Actor[Any, Any], exception: BaseException
    ) -> None:
        throws = message.options.get("throws") or actor.options.get("throws")
        if throws and isinstance(exception, throws):
            logger.info("Aborting message %r.", message.message_id)
            message.fail()
            return
        retries = self._failed_attempts(message, actor)
        message.options["retries"] = retries + 1
        message.options["traceback"] = traceback.format_exc(limit=30)
        message.options["requeue_timestamp"] = int(time.time() * 1000)
        max_retries = self._max_retries(message, actor)
        retry_when = actor.options.get("retry_when", self.retry_when)
        exhausted = (
            (not retry_when(retries, exception))
            if retry_when is not None
            else (max_retries is not None and retries >= max_retries)
        )
        if exhausted:
            logger.warning("Retries exceeded for message %r.", message.message_id)
            message.fail()  # the worker nacks it: an atomic move to the dead-letter list
            target = message.options.get("on_retry_exhausted") or actor.options.get("on_retry_exhausted")
            if target:
                broker = actor.broker
                broker.get_actor(target).send(
                    message.asdict(), {"retries": retries, "max_retries": max_retries}
                )
            return
        if isinstance(exception, Retry) and exception.delay is not None:
            delay = exception.delay
        else:
            min_backoff = message.options.get(
                "min_backoff", actor.options.get("min_backoff", self.min_backoff)
            )
            max_backoff = message.options.get(
                "max_backoff", actor.options.get("max_backoff", self.max_backoff)
            )
            _, delay = compute_backoff(
                retries, factor=min_backoff, max_backoff=min(max_backoff, DEFAULT_MAX_BACKOFF)
            )
        logger.info("Retrying message %r in %d milliseconds.", message.message_id, delay)
        message.retry_later(message.message, delay)

    # ------------------------------------------------------------------ shared

    def _failed_attempts(self, message: ListMessageProxy, actor: dramatiq.Actor[Any, Any]) -> int:
        """Attempts of this message that failed (deliveries lost with a worker are counted apart)."""
        field = "retry_count" if actor.options.get("retry_delays") is not None else "retries"
        return int(message.options.get(field, 0))

    def _max_retries(self, message: ListMessageProxy, actor: dramatiq.Actor[Any, Any]) -> int:
        delays = actor.options.get("retry_delays")
        if delays is not None:
            return len(delays)
        value = message.options.get("max_retries", actor.options.get("max_retries", self.max_retries))
        return int(value) if value is not None else 2**31

    def _dead_letter(
        self,
        message: ListMessageProxy,
        actor: dramatiq.Actor[Any, Any],
        error: BaseException | str,
        attempts: int,
    ) -> None:
        hook: DeadLetterHook | None = actor.options.get("on_dead_letter")
        confirmed = True
        if hook is not None:
            try:
                confirmed = hook(message.message) is not False
            except Exception:
                confirmed = False
                logger.exception(
                    "on_dead_letter hook of %s failed for %s; dead-lettered, left to the reconciler.",
                    actor.actor_name,
                    message,
                )
        message.dead_letter(unconfirmed=not confirmed, error=error, attempts=attempts)
