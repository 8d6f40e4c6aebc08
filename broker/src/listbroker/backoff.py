"""How a failing loop waits and what it logs: capped exponential backoff, the failure once,
a summary while it lasts, its end.

Every long-running loop of the Procfile's processes (the broker's housekeeping and consumers'
fetches, the availability gate, the heartbeats, the hot path's loops, the reconciler)
retries a failing step through a `Backoff`:

- it waits `first_s` after the first failure, twice as long after each next one, at most
  `max_s`, so an outage of any length costs a loop a few wake-ups a minute, never a busy
  loop (which would hold a core for as long as Redis is gone);
- it logs the first failure (WARNING, the error on one line), then `still failing after N
  attempts / T s` every `summary_s` while the failure lasts, then `recovered after N failed
  attempts / T s` at the first success: a few lines per outage, never one per attempt
  (a line per attempt is millions of lines in an outage of an hour).

Thread-safe: some loops share one (the hot path's settings are read by every loop).
Part of the broker library (standard library only), so the broker uses it and the rest of
the project imports it from `listbroker`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Default of `summary_s`: while a failure lasts, one line says so this often.
DEFAULT_SUMMARY_S = 60.0
#: Longest error text put in a log line (a driver's message may span many lines).
MAX_ERROR_CHARS = 300


def one_line(error: object) -> str:
    """`error` as one short line: its type and the first line of its message."""
    if isinstance(error, BaseException):
        message = str(error).strip().splitlines()
        text = type(error).__name__ + (f": {message[0]}" if message else "")
    else:
        text = str(error).strip().splitlines()[0] if str(error).strip() else "?"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class Backoff:
    """The wait and the log of one loop retrying a failing step.

    Call `failed(error)` after each failed attempt (it returns how long to wait before the
    next one) and `succeeded()` after each successful one (cheap when nothing failed).
    `what` names the step; it begins each log line ("Broker housekeeping: ...").
    """

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        *,
        first_s: float = 0.5,
        max_s: float = 10.0,
        summary_s: float = DEFAULT_SUMMARY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError("need 0 < first_s <= max_s")
        self.what = what
        self.log = log
        self.first_s = first_s
        self.max_s = max_s
        self.summary_s = summary_s
        self._clock = clock
        self._lock = threading.Lock()
        self._attempts = 0
        self._delay = 0.0
        self._since = 0.0
        self._said_at = 0.0

    @property
    def failing(self) -> bool:
        with self._lock:
            return self._attempts > 0

    @property
    def attempts(self) -> int:
        """Failed attempts in a row (0 while the step works)."""
        with self._lock:
            return self._attempts

    @property
    def delay(self) -> float:
        """The wait before the next attempt: 0 while the step works."""
        with self._lock:
            return self._delay

    def failed(self, error: object, *, traceback: bool = False) -> float:
        """Count a failed attempt; the seconds to wait before the next one.

        `traceback`: log the first failure with the exception's traceback (an unexpected
        error, not a server being unreachable).
        """
        with self._lock:
            now = self._clock()
            self._attempts += 1
            attempts = self._attempts
            if attempts == 1:
                self._since = self._said_at = now
                self._delay = self.first_s
                first, summary = True, False
            else:
                self._delay = min(self._delay * 2, self.max_s)
                first, summary = False, now - self._said_at >= self.summary_s
                if summary:
                    self._said_at = now
            delay, lasted = self._delay, now - self._since
        if first:
            self.log.warning(
                "%s: %s; retrying in %.1f s (backing off up to %.0f s)",
                self.what,
                one_line(error),
                delay,
                self.max_s,
                exc_info=error if traceback and isinstance(error, BaseException) else None,
            )
        elif summary:
            self.log.warning(
                "%s: still failing after %d attempts / %.0f s: %s",
                self.what,
                attempts,
                lasted,
                one_line(error),
            )
        return delay

    def succeeded(self) -> bool:
        """The step worked: log the recovery if it ends a failure; whether it did."""
        if not self._attempts:  # the common case, without the lock (a stale read only delays the log)
            return False
        with self._lock:
            if not self._attempts:
                return False
            attempts, lasted = self._attempts, self._clock() - self._since
            # Logged before the count is reset: whoever sees the step working again (a
            # health check, a test) finds the recovery already said.
            self.log.warning("%s: recovered after %d failed attempt(s) / %.1f s", self.what, attempts, lasted)
            self._attempts, self._delay = 0, 0.0
        return True
