"""Keys, limits and timings of the report pipeline, in one place.

The Redis key names and the retry schedule are those of the original .NET system and
part of its wire contract: a .NET producer or an operator's redis-cli uses the same
keys, and jobs are retried on the schedule its clients expect.
"""

from __future__ import annotations

#: Name of the Dramatiq queue the report actor consumes.
REPORT_QUEUE_NAME = "report"

#: Name of the report actor: Dramatiq messages of the report queue name it.
REPORT_ACTOR_NAME = "generate_report"

#: Every Dramatiq queue `q` lives in the Redis list `q:queue`, so `report` is `report:queue`.
QUEUE_KEY_SUFFIX = ":queue"

#: Suffixes of the keys that belong to a queue key `Q` (e.g. `report:queue:dead`).
DEAD_SUFFIX = ":dead"  # list: messages whose attempts are exhausted (as in the .NET system)
INVALID_SUFFIX = ":invalid"  # list: messages that could not be decoded, kept verbatim
DELAYED_SUFFIX = ":delayed"  # sorted set: delayed messages and retries, scored by due time (ms)
CRASHED_SUFFIX = ":crashed"  # hash: raw message -> times its consumer died holding it
JOBS_SUFFIX = ":jobs"  # hash: job key -> jobs alive for it (see scripts.py), if the codec names one
PROCESSING_INFIX = ":processing:"  # list per consumer: `Q:processing:<consumer id>`

#: Sorted set of live consumers' processing lists, scored by their last heartbeat (ms).
HEARTBEATS_KEY = "broker:heartbeats"

REPORT_QUEUE_KEY = REPORT_QUEUE_NAME + QUEUE_KEY_SUFFIX  # "report:queue"
DEAD_LETTER_QUEUE_KEY = REPORT_QUEUE_KEY + DEAD_SUFFIX  # "report:queue:dead"
INVALID_QUEUE_KEY = REPORT_QUEUE_KEY + INVALID_SUFFIX  # "report:queue:invalid"
REPORT_DELAYED_KEY = REPORT_QUEUE_KEY + DELAYED_SUFFIX  # "report:queue:delayed"
REPORT_JOBS_KEY = REPORT_QUEUE_KEY + JOBS_SUFFIX  # "report:queue:jobs": RecordId -> jobs alive

#: A message is delivered at most MAX_RETRY_COUNT + 1 times, failures and worker
#: crashes counted together (the .NET system's MaxRetryCount).
MAX_RETRY_COUNT = 3

#: The wait before retry r+1 after a failure at RetryCount r, in milliseconds (the .NET system's RetryDelays).
RETRY_DELAYS_MS: tuple[int, ...] = (10_000, 30_000, 60_000)

#: The longest a consumer blocks on an empty queue before looking around (delayed jobs, shutdown).
BRPOP_TIMEOUT_MS = 30_000

#: Pause before a consumer reconnects after a Redis error, so an outage is not a busy loop.
ERROR_RECOVERY_DELAY_MS = 5_000

#: A consumer silent for longer than this is dead: its messages go back to the queue.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 60_000

#: How often each worker process beats for its consumers and looks for dead ones.
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000

#: Upper bound on how long the delay scheduler sleeps without looking at the delayed sets,
#: so retries scheduled by other processes are released on time even if this one is idle.
DEFAULT_DELAY_POLL_MS = 100

#: Most delayed messages released to a queue per Redis round trip.
PROMOTE_BATCH = 1_000

#: Largest batch of messages one fetch moves into a processing list.
MAX_FETCH_BATCH = 256

assert len(RETRY_DELAYS_MS) == MAX_RETRY_COUNT
