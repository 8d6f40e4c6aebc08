"""The hot path: frequent writes go to Redis first, and to PostgreSQL in bulk behind.

The loops, run by one process; what web and worker write into Redis is done by the
adapters (redis_adapters/: the autosave store, the event sink, the lease and the keys).

- `answers_flusher`, `progress_flusher`: the answers' and the progress' flushes, on the
  RENAME-based flush both share (`dirty`);
- `eventlog_consumer`: the event-log consumer;
- `retention_loop`: the retention (old event-log partitions, purged records, set-aside lists);
- `runtime_settings`: the loops' run-time settings (defaults: `constants`);
- `runner` (``python -m hotpath``): the process that runs the four loops, each on the
  leased loop of background/leased_loop.py.
"""
