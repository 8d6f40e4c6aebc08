"""Names, keys and timings of the report pipeline, in one place.

The Redis key names and the retry schedule are those of the original .NET system and
part of its wire contract: a .NET producer or an operator's redis-cli uses the same
keys, and jobs are retried on the schedule its clients expect. The broker's own
key layout is in broker/src/listbroker/keys.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from listbroker.keys import QueueKeys

#: Name of the Dramatiq queue the report actor consumes.
REPORT_QUEUE_NAME = "report"

#: Name of the report actor: Dramatiq messages of the report queue name it.
REPORT_ACTOR_NAME = "generate_report"

#: The queue of admin tasks (e.g. regenerating every record matching a filter), and its actor.
ADMIN_QUEUE_NAME = "admin"
REGENERATE_MATCHING_ACTOR_NAME = "regenerate_matching"

_REPORT_KEYS = QueueKeys.for_queue(REPORT_QUEUE_NAME)
REPORT_QUEUE_KEY = _REPORT_KEYS.queue  # "report:queue"
DEAD_LETTER_QUEUE_KEY = _REPORT_KEYS.dead  # "report:queue:dead"
INVALID_QUEUE_KEY = _REPORT_KEYS.invalid  # "report:queue:invalid"
REPORT_DELAYED_KEY = _REPORT_KEYS.delayed  # "report:queue:delayed"
REPORT_JOBS_KEY = _REPORT_KEYS.jobs  # "report:queue:jobs": RecordId -> jobs alive

#: A message is delivered at most MAX_RETRY_COUNT + 1 times, failures and worker
#: crashes counted together (the .NET system's MaxRetryCount).
MAX_RETRY_COUNT = 3

#: The wait before retry r+1 after a failure at RetryCount r, in milliseconds (the .NET system's RetryDelays).
RETRY_DELAYS_MS: tuple[int, ...] = (10_000, 30_000, 60_000)

#: Replaces the schedule, for tests and drills only (e.g. "200,200,200"): the same number of
#: delays, in milliseconds. The .NET clients expect the default; production leaves it unset.
RETRY_DELAYS_ENV = "REPORT_RETRY_DELAYS_MS"


def retry_delays_ms(env: Mapping[str, str]) -> tuple[int, ...]:
    """The retry schedule: RETRY_DELAYS_MS unless REPORT_RETRY_DELAYS_MS sets another.

    A malformed value raises ValueError naming the variable: a worker must not start on a
    schedule it misread.
    """
    raw = env.get(RETRY_DELAYS_ENV, "").strip()
    if not raw:
        return RETRY_DELAYS_MS
    try:
        delays = tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise ValueError(f"{RETRY_DELAYS_ENV} must be comma-separated milliseconds, got {raw!r}") from None
    if len(delays) != MAX_RETRY_COUNT or any(d < 0 for d in delays):
        raise ValueError(f"{RETRY_DELAYS_ENV} needs {MAX_RETRY_COUNT} delays >= 0, got {raw!r}")
    return delays


#: The longest a consumer blocks on an empty queue before looking around (delayed jobs, shutdown).
BRPOP_TIMEOUT_MS = 30_000

#: Pause before a consumer reconnects after a Redis error, so an outage is not a busy loop.
ERROR_RECOVERY_DELAY_MS = 5_000

assert len(RETRY_DELAYS_MS) == MAX_RETRY_COUNT
assert REPORT_QUEUE_KEY == "report:queue"  # the .NET system's key: changing it breaks its producer
