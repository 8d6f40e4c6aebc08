"""Run-time settings of the hot path's loops: their Redis hash and their defaults.

The key layout shared with the adapters (autosave store, event sink) is in
redis_adapters/keyspace.py.
"""

from __future__ import annotations

from redis_adapters.keyspace import HOTPATH_SETTINGS_KEY

#: Run-time settings of the loops (a Redis hash; fields are HotpathSettings' names).
SETTINGS_KEY = HOTPATH_SETTINGS_KEY

# -- defaults of the run-time settings (environment: HOTPATH_<NAME upper-cased>) -------------

#: Pause between two cycles of the answer flusher (ms) and most records per DB transaction.
DEFAULT_ANSWERS_INTERVAL_MS = 1_000
DEFAULT_ANSWERS_BATCH = 500
#: The same for the progress flusher.
DEFAULT_PROGRESS_INTERVAL_MS = 2_000
DEFAULT_PROGRESS_BATCH = 500
#: Pause of the event-log consumer when the queue is empty (ms); most events per round trip.
DEFAULT_EVENTS_INTERVAL_MS = 1_000
DEFAULT_EVENTS_BATCH = 500
#: Lifetime of each loop's lock (ms). Its owner renews it every third of it while a
#: cycle works and while it sleeps; a standby process takes over this long after the
#: owner died. Must be at least 1 ms per item of the largest batch (settings.inconsistency).
DEFAULT_LOCK_TTL_MS = 15_000
