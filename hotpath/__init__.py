"""The hot path: frequent writes go to Redis first, and to PostgreSQL in bulk behind.

The loops, run by one process; what web and worker write into Redis is done by the
adapters (redis_adapters/: the autosave store, the event sink, the lease and the keys).

- `autosave`: the answer flusher;
- `progress`: the progress flusher; `dirty`: the RENAME-based flush both share;
- `eventlog`: the event-log consumer;
- `settings`: run-time settings;
- `runner` (``python -m hotpath``): the process that runs the three loops.

Settings defaults: `constants`.
"""
