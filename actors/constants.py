"""Names, keys and timings of the report pipeline, in one place.

The Redis key names and the retry schedule are those of the original system (seed
000) and are part of its wire contract: a .NET producer or an operator's redis-cli
uses the same keys. The broker's own key layout is in actors/broker/keys.py.
"""

from __future__ import annotations

from actors.broker.keys import QueueKeys

#: Name of the Dramatiq queue the report actor consumes.
REPORT_QUEUE_NAME = "report"

#: Name of the report actor (seed: ReportGenerationService.GenerateReportAsync).
REPORT_ACTOR_NAME = "generate_report"

_REPORT_KEYS = QueueKeys.for_queue(REPORT_QUEUE_NAME)
REPORT_QUEUE_KEY = _REPORT_KEYS.queue  # "report:queue"
DEAD_LETTER_QUEUE_KEY = _REPORT_KEYS.dead  # "report:queue:dead"
INVALID_QUEUE_KEY = _REPORT_KEYS.invalid  # "report:queue:invalid"
REPORT_DELAYED_KEY = _REPORT_KEYS.delayed  # "report:queue:delayed"
REPORT_JOBS_KEY = _REPORT_KEYS.jobs  # "report:queue:jobs": RecordId -> jobs alive

#: Seed: MaxRetryCount. A message is delivered at most MAX_RETRY_COUNT + 1 times,
#: failures and worker crashes counted together.
MAX_RETRY_COUNT = 3

#: Seed: RetryDelays, in milliseconds; the wait before retry r+1 after a failure at RetryCount r.
RETRY_DELAYS_MS: tuple[int, ...] = (10_000, 30_000, 60_000)

#: Seed: BrpopTimeout. The longest a consumer blocks on an empty queue before looking around.
BRPOP_TIMEOUT_MS = 30_000

#: Seed: ErrorRecoveryDelay. Pause before a consumer reconnects after a Redis error.
ERROR_RECOVERY_DELAY_MS = 5_000

assert len(RETRY_DELAYS_MS) == MAX_RETRY_COUNT
assert REPORT_QUEUE_KEY == "report:queue"  # the seed's key: changing it breaks the .NET producer
