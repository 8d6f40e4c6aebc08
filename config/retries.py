"""The report job's retry schedule: the original .NET system's MaxRetryCount and RetryDelays.

Part of its contract: the .NET clients expect this schedule. A message is delivered at most
MAX_RETRY_COUNT + 1 times, failures and worker crashes counted together.
"""

from __future__ import annotations

#: A message is delivered at most MAX_RETRY_COUNT + 1 times (the .NET system's MaxRetryCount).
MAX_RETRY_COUNT = 3

#: The wait before retry r+1 after a failure at RetryCount r, in milliseconds (the .NET system's RetryDelays).
RETRY_DELAYS_MS: tuple[int, ...] = (10_000, 30_000, 60_000)

#: Replaces the schedule, for tests and drills only (e.g. "200,200,200"): the same number of
#: delays, in milliseconds (config/settings.py reads it). Production leaves it unset.
RETRY_DELAYS_ENV = "REPORT_RETRY_DELAYS_MS"

#: Pause before Dramatiq starts a worker's consumer again after an error the broker does not wait
#: out itself (an unexpected one: a Redis error is waited out by the consumer, with backoff), so
#: a failing consumer is not a busy loop (Dramatiq's `dramatiq_restart_delay`, which
#: actors/run_worker.py defaults to it).
ERROR_RECOVERY_DELAY_MS = 5_000

assert len(RETRY_DELAYS_MS) == MAX_RETRY_COUNT
