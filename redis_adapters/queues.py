"""Names, keys and timings of the report pipeline, in one place.

The Redis key names and the retry schedule are those of the original .NET system and
part of its wire contract: a .NET producer or an operator's redis-cli uses the same
keys, and jobs are retried on the schedule its clients expect. The broker's own
key layout is in broker/src/listbroker/keys.py.
"""

from __future__ import annotations

from listbroker.keys import QueueKeys

# The retry schedule, part of the queue's contract (REPORT_RETRY_DELAYS_MS: config/settings.py).
from config.retries import ERROR_RECOVERY_DELAY_MS, MAX_RETRY_COUNT, RETRY_DELAYS_MS

__all__ = [
    "ADMIN_QUEUE_NAME",
    "DEAD_LETTER_QUEUE_KEY",
    "ERROR_RECOVERY_DELAY_MS",
    "INVALID_META_KEY",
    "INVALID_QUEUE_KEY",
    "MAX_RETRY_COUNT",
    "REGENERATE_MATCHING_ACTOR_NAME",
    "REPORT_ACTOR_NAME",
    "REPORT_DELAYED_KEY",
    "REPORT_JOBS_KEY",
    "REPORT_QUEUE_KEY",
    "REPORT_QUEUE_NAME",
    "RETRY_DELAYS_MS",
]

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
INVALID_META_KEY = _REPORT_KEYS.invalid_meta  # "report:queue:invalid:meta": why and when, per payload
REPORT_DELAYED_KEY = _REPORT_KEYS.delayed  # "report:queue:delayed"
REPORT_JOBS_KEY = _REPORT_KEYS.jobs  # "report:queue:jobs": RecordId -> jobs alive

assert REPORT_QUEUE_KEY == "report:queue"  # the .NET system's key: changing it breaks its producer
